"""What the out-of-process check costs: push-to-``passed`` and the check itself, side by side.

Why this exists: the hub's check used to import the author's wheel inside the sandbox and
write its own verdict there (which the wheel could forge). It now serves the wheel with
``gymhub serve --uds`` in the sandbox and plays every episode from the hub's process over
that socket. This prints, alternating the two in the same run on the same wheel:

* **check, out-of-process**: :func:`gymhub.hub.checker.run_check` (today's);
* **check, in-process (old)**: the former design, ``inprocess_check_runner.py`` run in
  the same bwrap sandbox after the same ``pip install --no-index`` (the baseline);
* **push to passed**: a real hub app (SQLite, the database check queue, the worker
  thread) from ``POST /api/v1/upload`` to an attestation that says ``passed``;
* **gymhub env check**: what an author pays locally, no sandbox (for scale).

The wheel is the ``gymhub env init`` scaffold, built with ``gymhub env build``.

    python benchmarks/bench_hub_check.py --repeats 5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gymhub.hub.checker import _interpreter, check_sandbox, run_check
from gymhub.hub.records import VersionInfo
from gymhub.sandbox import Limits, Sandbox

RUNNER = Path(__file__).resolve().parent / "inprocess_check_runner.py"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gymhub.cli", *args], capture_output=True,
                          text=True, check=True, env=env, timeout=600)


def _old_check(box: Sandbox, info: VersionInfo, data: bytes) -> str:
    """The former in-process check: install, then import and judge in one interpreter."""
    exe, _ = _interpreter()
    env = {"PYTHONPATH": "/work/site:/opt/gymhub/src:/opt/gymhub/site", "HOME": "/tmp",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "PIP_NO_CACHE_DIR": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    limits = Limits(wall_s=300, cpu_s=300, memory_mb=1024, pids=64, workdir_mb=256,
                    tmp_mb=64, output_bytes=256 << 10)
    with box.session(limits) as session:
        wheel = f"in/{info.filename}"
        res = session.run([exe, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                           "--no-compile", "--target", "/work/site", wheel],
                          files={wheel: data}, env=env)
        assert res.exit_code == 0, res.stderr
        res = session.run([exe, "runner.py", "--site", "/work/site", "--out",
                           "/work/details.json", *info.env_ids],
                          files={"runner.py": RUNNER.read_bytes()}, collect=["details.json"],
                          env=env)
        found: dict[str, Any] = json.loads(res.files["details.json"])
    ok = all(c["ok"] for c in found["checks"]) and found.get("gold_score") == 1.0
    return "passed" if ok else "failed"


def _push_to_passed(root: Path, filename: str, data: bytes) -> float:
    """Seconds from the upload's first byte to a signed ``passed`` on a fresh hub."""
    from fastapi.testclient import TestClient

    from gymhub.hub.check_service import CheckWorker
    from gymhub.hub.service import create_hub_app
    from gymhub.hub.signing import HubKey
    from gymhub.hub.store import HubStore
    from gymhub.hub.tokens import create_token

    store = HubStore.open(f"sqlite:///{root / 'hub.db'}", root / "files")
    token = create_token(store.db, "alice")[1]
    worker = CheckWorker(store, timeout_s=300)
    url = "/api/v1/packages/alice/word-ladder/0.1.0/attestation"
    try:
        with TestClient(create_hub_app(store, key=HubKey.generate(), checker=worker)) as c:
            t0 = time.perf_counter()
            r = c.post("/api/v1/upload", content=data,
                       headers={"authorization": f"Bearer {token}", "x-filename": filename})
            assert r.status_code == 201, r.text
            while True:
                a = c.get(url)
                if a.status_code == 200 and a.json()["statement"]["status"] != "queued":
                    assert a.json()["statement"]["status"] == "passed", a.json()
                    return time.perf_counter() - t0
                if time.perf_counter() - t0 > 300:
                    raise TimeoutError("no check result within 300 s")
                time.sleep(0.02)
    finally:
        worker.close()
        store.db.close()


def main() -> None:
    """Build the scaffold once, then time each way ``--repeats`` times, alternating."""
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
                           len(data), wheel.name, ("alice/word-ladder-v0",),
                           {"requires_dist": []}, datetime.now(UTC), None, None)
        site = root / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--no-index", "--target", str(site), str(wheel)], check=True)
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
        box = check_sandbox()
        new, old, push, plain = [], [], [], []
        try:
            for i in range(args.repeats):
                t0 = time.perf_counter()
                status, details = run_check(info, data, sandbox=box, timeout_s=300)
                new.append(time.perf_counter() - t0)
                assert status == "passed", details
                t0 = time.perf_counter()
                assert _old_check(box, info, data) == "passed"
                old.append(time.perf_counter() - t0)
                hub = root / f"hub{i}"
                hub.mkdir()
                push.append(_push_to_passed(hub, wheel.name, data))
                t0 = time.perf_counter()
                _cli("env", "check", "alice/word-ladder-v0", env=env)
                plain.append(time.perf_counter() - t0)
        finally:
            box.close()
    n, o = statistics.median(new), statistics.median(old)
    pp, b = statistics.median(push), statistics.median(plain)
    print(f"scaffold wheel {len(data)} bytes, {args.repeats} repeats alternated, medians:")
    print(f"  check, out-of-process (served in bwrap, judged by the hub): {n:.2f} s")
    print(f"  check, in-process (old: judged inside the sandbox):        {o:.2f} s")
    print(f"  push to passed (upload, DB queue, worker, attestation):    {pp:.2f} s")
    print(f"  gymhub env check (author's machine, no sandbox):           {b:.2f} s")
    print(f"  out-of-process / in-process: {n / o:.2f}x   push-to-passed / in-process check: "
          f"{pp / o:.2f}x   out-of-process / local env check: {n / b:.2f}x")


if __name__ == "__main__":
    main()
