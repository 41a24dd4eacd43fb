"""Time the hub takes to check one published version, against an unsandboxed check.

Why this exists: every upload costs the hub one check, and the check runs untrusted code,
so it runs in bwrap with a fresh ``pip install --no-index`` of the wheel. The baseline is
what an author pays: ``gymhub env check`` on the same wheel, already installed (once,
outside the timing) into a directory on ``PYTHONPATH``, no sandbox. The ratio is the
price of isolation plus the install.

The wheel is the ``gymhub env init`` scaffold, built with ``gymhub env build``.

    python benchmarks/bench_hub_check.py --repeats 5
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from gymhub.hub.checker import check_sandbox, run_check
from gymhub.hub.records import VersionInfo


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gymhub.cli", *args], capture_output=True,
                          text=True, check=True, env=env, timeout=600)


def main() -> None:
    """Build the scaffold once, then time both checks ``--repeats`` times each."""
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _cli("env", "init", "word-ladder", "--owner", "alice", "--dir", str(root))
        out = _cli("env", "build", str(root / "word-ladder"), "--no-check")
        wheel = Path(out.stdout.strip().splitlines()[-1])
        data = wheel.read_bytes()
        info = VersionInfo("alice", "word-ladder", "0.1.0", hashlib.sha256(data).hexdigest(),
                           len(data), wheel.name, ("alice/word-ladder-v0",), {},
                           datetime.now(UTC), None, None)
        site = root / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-index", "--target", str(site), str(wheel)], check=True)
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
        box = check_sandbox()
        sandboxed, plain = [], []
        try:
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                status, _ = run_check(info, data, sandbox=box, timeout_s=300)
                sandboxed.append(time.perf_counter() - t0)
                assert status == "passed", status
                t0 = time.perf_counter()
                _cli("env", "check", "alice/word-ladder-v0", env=env)
                plain.append(time.perf_counter() - t0)
        finally:
            box.close()
    s, b = statistics.median(sandboxed), statistics.median(plain)
    print(f"scaffold wheel {len(data)} bytes, {args.repeats} repeats, medians:")
    print(f"  hub check (bwrap, pip --no-index, check_runner): {s:.2f} s")
    print(f"  gymhub env check (installed, no sandbox):        {b:.2f} s")
    print(f"  ratio: {s / b:.2f}x")


if __name__ == "__main__":
    main()
