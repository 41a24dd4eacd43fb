"""Verifications per second of every verifier kind on one core, against exact_match.

Each kind scores the first ``pass`` case of its own golden cases (so the workload is a
real, judged one: a two-database sql_match, a parallel two-call tool_calls, a boxed
fraction for math_equiv, ...). Kinds are measured in interleaved rounds, so machine
noise hits the baseline (``exact_match``) and every kind alike; the ratio is kind rate /
exact_match rate. The process (and so math_equiv's worker, which inherits it) is pinned
to one CPU.

Then math_equiv latency: *cold* is the first request of a fresh pool (spawning the
worker and importing SymPy and math-verify included), *warm* a request to a worker that
is already up; and the deadline path: a runaway answer killed at its ``timeout_s``, then
the next request (which pays a cold start again).

Run: ``PYTHONPATH=. python benchmarks/bench_verifiers.py [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from gymhub.sandbox import available_backends
from gymhub.types import Task
from gymhub.verifiers import KINDS, compile
from gymhub.verifiers.golden import GoldenCase, cases_of
from gymhub.verifiers.math_pool import MathPool, WorkerTimeout


def pin_one_core() -> str:
    try:
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    except (AttributeError, OSError):
        return "not pinned (no sched_setaffinity here)"


def workload(kind: str) -> tuple[Callable[[], Any], GoldenCase] | None:
    cases = [c for c in cases_of(kind) if c.expect == "pass"]
    if not cases:
        return None
    case = cases[0]
    if "sandbox" in case.needs and not available_backends():
        return None
    verifier = compile(case.spec)
    task = Task(id="bench", prompt="", fixture=case.fixture, gold=case.gold, meta=case.meta)
    numbers = iter(range(1, 10**9))

    def submission() -> Any:
        if kind == "math_equiv":  # a fresh answer each time: math-verify caches parses
            return half(next(numbers))["answer"]
        return case.submission

    def run() -> Any:
        score = verifier(submission(), task, case.state)
        if score.value != 1.0 or score.error:
            raise RuntimeError(f"{kind}: the benchmark case no longer passes: {score}")
        return score

    return run, case


def rates(fns: dict[str, Callable[[], Any]], budget_s: float, rounds: int) -> dict[str, float]:
    count = dict.fromkeys(fns, 0)
    spent = dict.fromkeys(fns, 0.0)
    for fn in fns.values():  # warm-up: caches, pools, first compilation
        fn()
    for _ in range(rounds):
        for kind, fn in fns.items():
            t0 = time.perf_counter()
            stop = t0 + budget_s / rounds
            n = 0
            while True:
                fn()
                n += 1
                now = time.perf_counter()
                if now >= stop:
                    break
            count[kind] += n
            spent[kind] += now - t0
    return {k: count[k] / spent[k] for k in fns}


def half(n: int) -> dict[str, str]:
    """A request math-verify has not seen (its parse caches would hide the real cost)."""
    return {"gold": "\\frac{1}{2}", "answer": f"So it is $\\boxed{{\\frac{{{n}}}{{{2 * n}}}}}$."}


def math_latency(samples: int, warm_n: int) -> None:
    numbers = iter(range(1, 1_000_000))
    cold, warm = [], []
    for _ in range(samples):
        pool = MathPool(size=1)
        try:
            t0 = time.perf_counter()
            assert pool.request(half(next(numbers)), 60)["status"] == "match"
            cold.append((time.perf_counter() - t0) * 1000)
            for _ in range(warm_n):
                t0 = time.perf_counter()
                pool.request(half(next(numbers)), 60)
                warm.append((time.perf_counter() - t0) * 1000)
        finally:
            pool.shutdown()
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"\nmath_equiv latency (median; cold n={len(cold)}, warm n={len(warm)})")
    print(f"  cold (spawn + import + request) {c:9.1f} ms")
    print(f"  warm (request only)             {w:9.1f} ms   cold/warm = {c / w:,.0f}x")

    pool = MathPool(size=1)
    try:
        pool.warm()
        t0 = time.perf_counter()
        with contextlib.suppress(WorkerTimeout):
            pool.request({"gold": "1", "answer": "$9^{9^{9^{9}}}$"}, 0.5)
        killed = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        pool.request(half(next(numbers)), 60)
        now = (time.perf_counter() - t0) * 1000
        time.sleep(3)  # the background replacement is up by now
        t0 = time.perf_counter()
        pool.request(half(next(numbers)), 60)
        later = (time.perf_counter() - t0) * 1000
    finally:
        pool.shutdown()
    print(f"  runaway answer, timeout_s=0.5   {killed:9.1f} ms to the error (worker killed)")
    print(f"  request right after the kill    {now:9.1f} ms (waits for the replacement)")
    print(f"  request 3 s after the kill      {later:9.1f} ms (the replacement is warm)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller budgets (a smoke run)")
    args = ap.parse_args()
    budget, rounds = (0.3, 2) if args.quick else (2.0, 4)
    print(pin_one_core())

    compile({"type": "exact_match"})
    fns: dict[str, Callable[[], Any]] = {}
    skipped = []
    for kind in ["exact_match", *sorted(k for k in KINDS if k != "exact_match")]:
        found = workload(kind)
        if found is None:
            skipped.append(kind)
        else:
            fns[kind] = found[0]
    got = rates(fns, budget, rounds)
    base = got["exact_match"]
    print(f"\nverifications/s on one core ({budget:g} s per kind in {rounds} interleaved rounds)")
    print(f"  {'kind':<14}{'per second':>12}{'µs each':>12}{'vs exact_match':>16}")
    for kind, rate in got.items():
        print(f"  {kind:<14}{rate:>12,.0f}{1e6 / rate:>12,.1f}{rate / base:>15.4f}x")
    if skipped:
        print(f"  skipped (no pass case, or it needs a sandbox backend): {', '.join(skipped)}")

    math_latency(samples=2 if args.quick else 3, warm_n=10 if args.quick else 30)


if __name__ == "__main__":
    main()
