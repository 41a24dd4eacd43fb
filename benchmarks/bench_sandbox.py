"""Sandbox overhead and throughput, as ratios against bare runs measured in the same run.

    python benchmarks/bench_sandbox.py [--quick]

1. Per-call latency of ``true`` and ``python3 -c pass``: bare subprocess vs each backend
   (median, p95, and the overhead over bare). Aim: bwrap overhead < 10 ms median.
2. Calls per second with 2, 8 and 32 concurrent callers, per backend (bare for scale).
3. Docker (Podman here) with the warm pool vs without it (a container per call).
4. ``run_python("print(1)")`` in a warm session's persistent REPL vs spawning a sandboxed
   interpreter per call (``python3 -c 'print(1)'`` in the same session), per backend.
   Aim: REPL under 5 ms median.

``--skip-throughput`` runs sections 1 and 4 only (the quick way to compare ratios).

The docker rows appear when a Docker/Podman API answers (``scripts/setup-system.sh``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from gymhub.sandbox import Limits, Sandbox, Session
from gymhub.sandbox.bwrap import BwrapSandbox
from gymhub.sandbox.docker.backend import DockerSandbox

PY = "/usr/bin/python3"
LIMITS = Limits(wall_s=30, cpu_s=30)


def timed(fn: Callable[[], object], n: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, int(len(xs) * 0.95) - 1)]


def bare(argv: list[str]) -> Callable[[], object]:
    return lambda: subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                  check=False)


def in_sandbox(sb: Sandbox, argv: list[str]) -> Callable[[], object]:
    def call() -> object:
        res = sb.run(argv)
        assert res.ok, res
        return res
    return call


def throughput(fn: Callable[[], object], workers: int, calls: int) -> float:
    with ThreadPoolExecutor(workers) as pool:
        t = time.perf_counter()
        list(pool.map(lambda _: fn(), range(calls)))
        return calls / (time.perf_counter() - t)


def run_python_section(backends: dict[str, Sandbox], n: int) -> None:
    """Warm REPL round trip vs a fresh sandboxed interpreter, in the same session."""
    print("\n== print(1): persistent REPL (run_python) vs an interpreter per call (ms) ==")
    print(f"{'backend':<15}{'runner':<22}{'median':>9}{'p95':>9}{'ratio':>8}")
    for name, sb in backends.items():
        if "nopool" in name:
            continue
        with sb.session() as session:
            def spawn(s: Session = session) -> object:
                res = s.run([PY, "-c", "print(1)"])
                assert res.ok and res.stdout == b"1\n", res
                return res

            def repl(s: Session = session) -> object:
                res = s.run_python("print(1)")
                assert res.ok and res.stdout == b"1\n" and not res.restarted, res
                return res

            per_call = timed(spawn, n)
            warm = timed(repl, n * 3)
        smed, rmed = statistics.median(per_call), statistics.median(warm)
        print(f"{name:<15}{'interpreter per call':<22}{smed:>9.2f}{p95(per_call):>9.2f}{1.0:>8.1f}")
        print(f"{'':<15}{'warm REPL':<22}{rmed:>9.2f}{p95(warm):>9.2f}{rmed / smed:>8.3f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--skip-throughput", action="store_true", help="latency sections only")
    args = ap.parse_args()
    n = 10 if args.quick else 30
    backends: dict[str, Sandbox] = {"bwrap": BwrapSandbox(LIMITS)}
    if DockerSandbox.available():
        pooled = DockerSandbox(LIMITS, pool_size=32)
        pooled.prewarm()
        backends["docker+pool"] = pooled
        backends["docker-nopool"] = DockerSandbox(LIMITS, pool_size=0)
    else:
        print("(docker rows skipped: no Docker/Podman API reachable)")

    print("\n== per-call latency (ms) ==")
    print(f"{'command':<16}{'runner':<15}{'median':>9}{'p95':>9}{'overhead':>10}{'ratio':>8}")
    for label, argv in (("true", ["true"]), ("python3 -c pass", [PY, "-c", "pass"])):
        base = timed(bare(argv), n)
        bmed = statistics.median(base)
        print(f"{label:<16}{'bare':<15}{bmed:>9.2f}{p95(base):>9.2f}{'':>10}{1.0:>8.1f}")
        for name, sb in backends.items():
            reps = n if "nopool" not in name else max(5, n // 3)
            xs = timed(in_sandbox(sb, argv), reps)
            med = statistics.median(xs)
            print(f"{'':<16}{name:<15}{med:>9.2f}{p95(xs):>9.2f}{med - bmed:>+10.2f}"
                  f"{med / bmed:>8.1f}")

    run_python_section(backends, n)
    if args.skip_throughput:
        for sb in backends.values():
            sb.close()
        return 0

    print("\n== calls/second, `true`, concurrent callers (2 cores) ==")
    print(f"{'runner':<15}" + "".join(f"{w:>10}" for w in (2, 8, 32)))
    rows: list[tuple[str, Callable[[], object], int]] = [("bare", bare(["true"]), 200)]
    rows += [(name, in_sandbox(sb, ["true"]), 96 if "docker" in name else 200)
             for name, sb in backends.items() if "nopool" not in name]
    if "docker-nopool" in backends:
        rows.append(("docker-nopool", in_sandbox(backends["docker-nopool"], ["true"]), 32))
    for name, fn, calls in rows:
        rates = [throughput(fn, w, calls if args.quick is False else calls // 2)
                 for w in (2, 8, 32)]
        print(f"{name:<15}" + "".join(f"{r:>10.1f}" for r in rates))

    for sb in backends.values():
        sb.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
