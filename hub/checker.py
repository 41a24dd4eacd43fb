"""The hub's own check of every published version, run on the author's code in a sandbox.

An author's ``gymhub env check`` proves nothing to anyone else: it ran on their machine,
on code they could have changed since. The hub therefore installs the exact wheel it
serves and runs the same gate itself, and signs the outcome (:mod:`gymhub.hub.signing`).
The wheel is untrusted code, so everything that imports it runs inside the sandbox
with no network: ``pip install --no-deps --no-index`` into the sandbox's workdir, then
:mod:`gymhub.hub.check_runner`. The host only reads back a JSON file.

The sandbox sees the host's interpreter (its prefix, read-only, at its own path: a
shared ``libpython`` may be linked to it), the hub's site-packages and gymhub's own
source (read-only, under ``/opt/gymhub``), so a wheel may depend on what the hub
already has and nothing else. Anything the hub cannot decide (a dependency it lacks, no
sandbox, a timeout, a crash of the runner) is ``unchecked`` with a reason, never
``passed``.

Details (the JSON :meth:`HubStore.record_check` stores and the pages render)::

    {"summary": str, "checks": [{"name", "ok", "ms", "detail"}],
     "envs": {env_id: {"tools": [...], "verifier": str, "task_count": int,
                       "max_turns": int | None}},
     "gold_score": float | None, "noop_score": float | None, "reason": str}
"""

from __future__ import annotations

import json
import os
import site
import sys
import time
from pathlib import Path
from typing import Any

import gymhub
from gymhub.errors import BackendError
from gymhub.hub.records import CheckInfo, VersionInfo
from gymhub.hub.store import HubStore
from gymhub.sandbox import Limits, Sandbox, get_sandbox
from gymhub.sandbox.bwrap import others_can_reach

__all__ = ["DEFAULT_TIMEOUT_S", "check_sandbox", "check_version", "run_check", "unchecked"]

DEFAULT_TIMEOUT_S = 300.0
_SRC = "/opt/gymhub/src"
_SITE = "/opt/gymhub/site"
_FORBIDDEN = ("/work", "/tmp", "/proc", "/dev", "/etc")


def _others_can_run(path: str) -> bool:
    """Whether the unprivileged sandbox user (host ``nobody``) can run ``path``."""
    return others_can_reach(path) and bool(Path(path).stat().st_mode & 0o001)


def _interpreter() -> tuple[str, dict[str, str]]:
    """A Python of this minor version that the sandbox user can run, with its binds.

    The hub's own interpreter when ``nobody`` can read it (its prefix bound at its own
    path: a shared ``libpython`` may be linked there); else the system's ``/usr/bin``
    one of the same minor version, which reads the same compiled wheels (same ABI).
    """
    exe = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if exe.startswith("/usr/") and _others_can_run(exe):
        return exe, {}
    hidden = any(prefix == p or prefix.startswith(p + "/") for p in _FORBIDDEN)
    if not hidden and _others_can_run(exe):
        return exe, {prefix: prefix}
    system = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
    if os.path.exists(system) and _others_can_run(os.path.realpath(system)):
        return system, {}
    raise BackendError(f"no Python {sys.version_info[0]}.{sys.version_info[1]} that the "
                       f"sandbox user may run ({exe} is not readable by others)")


def _binds() -> dict[str, str]:
    """Host paths the check needs, read-only: site-packages and gymhub's source."""
    binds: dict[str, str] = {}
    package = Path(gymhub.__file__).resolve().parent
    binds[str(package)] = f"{_SRC}/gymhub"
    for child in package.iterdir():  # subpackages are links to top-level folders
        if child.is_symlink():
            target = child.resolve()
            binds[str(target)] = f"{_SRC}/{target.name}"
    if sys.prefix != sys.base_prefix:
        venv_site = [p for p in site.getsitepackages() if p.startswith(sys.prefix)]
        if venv_site:
            binds[os.path.realpath(venv_site[0])] = _SITE
    return binds


def check_sandbox() -> Sandbox:
    """A bwrap sandbox that shows the interpreter and gymhub read-only (see module doc).

    Raises:
        BackendError: bwrap is missing or unusable, or the interpreter lives where the
            sandbox mounts its own directories.
    """
    _, binds = _interpreter()
    return get_sandbox("bwrap", ro_binds={**binds, **_binds()})


def unchecked(reason: str, checks: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Details for a version the hub could not decide on."""
    return {"summary": f"unchecked: {reason}", "checks": checks or [], "envs": {},
            "gold_score": None, "noop_score": None, "reason": reason}


def run_check(version: VersionInfo, data: bytes, *, sandbox: Sandbox | None = None,
              timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[str, dict[str, Any]]:
    """``(status, details)`` for the wheel ``data`` of ``version``; records nothing."""
    own = sandbox is None
    try:
        box = check_sandbox() if sandbox is None else sandbox
    except BackendError as exc:
        return "unchecked", unchecked(f"no sandbox to run the check in: {exc}")
    try:
        return _run(box, version, data, timeout_s)
    except BackendError as exc:
        return "unchecked", unchecked(f"the sandbox failed: {exc}")
    finally:
        if own:
            box.close()


def _run(box: Sandbox, version: VersionInfo, data: bytes,
         timeout_s: float) -> tuple[str, dict[str, Any]]:
    exe, _ = _interpreter()
    env = {"PYTHONPATH": f"/work/site:{_SRC}:{_SITE}", "HOME": "/tmp",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "PIP_NO_CACHE_DIR": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    deadline = time.monotonic() + timeout_s
    limits = Limits(wall_s=timeout_s, cpu_s=timeout_s, memory_mb=1024, pids=64,
                    workdir_mb=256, tmp_mb=64, output_bytes=256 << 10)

    def left() -> Limits:
        # The budget is the whole check's: a step gets what is left of it, never a floor
        # that would let a slow install push the check past its deadline.
        wall = max(deadline - time.monotonic(), 0.01)
        return Limits(**{**vars(limits), "wall_s": wall, "cpu_s": wall})

    with box.session(limits) as session:
        t0 = time.perf_counter()
        wheel = f"in/{version.filename}"
        res = session.run([exe, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                           "--no-compile", "--target", "/work/site", wheel],
                          files={wheel: data}, env=env, limits=left())
        install = {"name": "installs offline (pip --no-index --no-deps)",
                   "ok": res.exit_code == 0 and not res.limit,
                   "ms": round((time.perf_counter() - t0) * 1000, 3),
                   "detail": _tail(res.stderr)}
        if res.limit:
            why = "timeout" if res.timed_out else f"{res.limit} limit"
            return "unchecked", unchecked(f"the install stopped: {why}", [install])
        if res.exit_code != 0 and _tail(res.stderr).startswith("bwrap:"):
            return "unchecked", unchecked(f"the sandbox failed: {_tail(res.stderr)}", [install])
        if not install["ok"]:
            return "failed", {**unchecked("", [install]), "summary": "the wheel does not install",
                              "reason": "the wheel does not install"}
        res = session.run([exe, "-m", "gymhub.hub.check_runner", "--site", "/work/site",
                           "--out", "/work/details.json", *version.env_ids],
                          collect=["details.json"], env=env, limits=left())
        if res.limit:
            why = "timeout" if res.timed_out else f"{res.limit} limit"
            return "unchecked", unchecked(f"the check stopped: {why}", [install])
        raw = res.files.get("details.json")
        if raw is None:
            return "unchecked", unchecked(f"the check runner wrote nothing (exit "
                                          f"{res.exit_code}): {_tail(res.stderr)}", [install])
        found = json.loads(raw)
    if "unchecked" in found:
        return "unchecked", unchecked(str(found["unchecked"]), [install])
    if "crashed" in found:
        return "unchecked", unchecked(f"the check runner crashed: {found['crashed']}", [install])
    details: dict[str, Any] = {**found, "checks": [install, *found["checks"]]}
    ok = all(c["ok"] for c in details["checks"]) and details["envs"]
    gold = details.get("gold_score")
    status = "passed" if ok and gold is not None and gold >= 1.0 - 1e-9 else "failed"
    passed = sum(1 for c in details["checks"] if c["ok"])
    details["summary"] = (f"{status}: {passed}/{len(details['checks'])} checks passed; gold "
                          f"{gold}, do-nothing {details.get('noop_score')}")
    if status == "failed" and not details["reason"]:
        details["reason"] = f"gold policy scored {gold}, not 1.0"
    return status, details


def _tail(text: str | bytes, limit: int = 2000) -> str:
    value = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    return value[-limit:].strip()


def check_version(store: HubStore, owner: str, name: str, version: str, *,
                  sandbox: Sandbox | None = None,
                  timeout_s: float = DEFAULT_TIMEOUT_S) -> CheckInfo:
    """Check one stored version in the sandbox and record the result.

    Raises:
        PackageNotFound, VersionNotFound: no such version.
        BlobCorrupted: the stored wheel no longer matches its digest.
    """
    info = store.resolve(owner, name, f"=={version}")
    status, details = run_check(info, store.read_file(info), sandbox=sandbox,
                                timeout_s=timeout_s)
    return store.record_check(owner, name, info.version, status, details)
