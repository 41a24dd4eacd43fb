"""Push and install through a real hub, against ``pip install`` of the same wheel from a file.

Why this exists: publishing and installing are what a hub adds on top of a wheel, and
both do more than copy it (the push validates the archive without extracting it, stores
it by digest and commits it in one transaction; the install resolves on the hub, checks
the pinned key's signature over the hub's check, downloads by sha256 and only then runs
pip). The baseline is the floor of either: ``pip install --no-deps --target DIR`` of the
same wheel from a local file. Every command is a fresh process, as a user runs it.

The wheels are the ``gymhub env init`` scaffold at several versions, built once before
the timing. The hub is ``gymhub hub serve`` on a loopback port with a SQLite database.

    python benchmarks/bench_hub.py --versions 4
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gymhub.hub.build import build_wheel
from gymhub.hub.scaffold import init_env
from gymhub.hub.store import HubStore
from gymhub.hub.tokens import create_token

REPO = Path(__file__).resolve().parents[1]


def _timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{out.stdout}\n{out.stderr}")
    return took


def _wheels(root: Path, versions: int) -> list[Path]:
    pkg = init_env("word-ladder", owner="alice", parent=root)
    pyproject = pkg / "pyproject.toml"
    text = pyproject.read_text()
    wheels = []
    for i in range(versions):
        pyproject.write_text(text.replace('version = "0.1.0"', f'version = "0.1.{i}"'))
        wheels.append(build_wheel(pkg, out_dir=root / "dist"))
    return wheels


def _start_hub(root: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gymhub.cli", "hub", "serve", "--port", "0", "--db",
         f"sqlite:///{root / 'hub.db'}", "--storage", str(root / "files")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("hub serving at "):
        proc.kill()
        raise SystemExit(f"the hub did not start: {line!r}")
    return proc, line.split()[-1]


def _wait_checked(store: HubStore, version: str, deadline_s: float = 120) -> str:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        check = store.latest_check("alice", "word-ladder", version)
        if check is not None:
            return check.status
        time.sleep(0.1)
    raise SystemExit(f"version {version} was not checked within {deadline_s} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--versions", type=int, default=4, help="versions pushed and installed")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-hub-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GYMHUB_HUB_", "PIP_"))}
    env["PYTHONPATH"] = str(REPO)
    try:
        wheels = _wheels(root, args.versions)
        proc, url = _start_hub(root, env)
        try:
            store = HubStore.open(f"sqlite:///{root / 'hub.db'}", root / "files")
            token = create_token(store.db, "alice", ("read", "publish"))[1]
            auth = {**env, "GYMHUB_HUB_URL": url, "GYMHUB_HUB_TOKEN": token}
            pip = [sys.executable, "-m", "pip", "install", "--isolated", "--no-deps",
                   "--no-index", "--disable-pip-version-check", "-q"]
            rows: dict[str, list[float]] = {"push": [], "install": [], "pip": []}
            for i, wheel in enumerate(wheels):
                version = f"0.1.{i}"
                rows["push"].append(_timed(
                    [sys.executable, "-m", "gymhub.cli", "push", str(wheel)], auth))
                status = _wait_checked(store, version)  # install verifies the signed check
                lock = root / f"lock-{i}"
                lock.mkdir()
                rows["install"].append(_timed(
                    [sys.executable, "-m", "gymhub.cli", "install",
                     f"alice/word-ladder@{version}", "--target", str(root / f"gi-{i}"),
                     "--lock", str(lock / "gymhub.lock")], auth))
                rows["pip"].append(_timed(
                    [*pip, "--target", str(root / f"pip-{i}"), str(wheel)], env))
                print(f"  {version}: checked {status}; push {rows['push'][-1]:.2f} s, "
                      f"install {rows['install'][-1]:.2f} s, pip from file "
                      f"{rows['pip'][-1]:.2f} s", flush=True)
            store.db.close()
        finally:
            proc.terminate()
            proc.wait(30)
            if proc.stdout:
                proc.stdout.close()
        base = statistics.median(rows["pip"])
        print(f"\nmedians over {args.versions} versions (each a fresh process):")
        print(f"  pip install --no-deps of the wheel from a local file  {base:.2f} s  (1.00x)")
        for key, label in (("push", "gymhub push WHEEL"),
                           ("install", "gymhub install OWNER/NAME@VERSION")):
            med = statistics.median(rows[key])
            print(f"  {label:<52} {med:.2f} s  ({med / base:.2f}x)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
