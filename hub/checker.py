"""The hub's check of every version: the author's code in a sandbox, the verdict outside.

An author's ``gymhub env check`` proves nothing to anyone else: it ran on their machine,
on code they could have changed since. The hub therefore installs the exact wheel it
serves and checks it itself, and signs the outcome (:mod:`gymhub.hub.signing`).

The wheel is untrusted code, and the check's result is what the hub signs, so the two
never share a process: the wheel is installed with ``pip install --no-deps --no-index``
into the sandbox's workdir, then served there by ``gymhub serve --uds`` (no network:
the server listens on a socket file in the workdir), and the hub's own
:func:`~gymhub.hub.served_check.check_served`, in this process, plays the episodes over
that socket and computes every figure. The code under check can crash, lie in its
answers, rewrite files in its sandbox at exit or patch its copy of gymhub: none of it
reaches what the hub records. The whole check has one deadline, enforced here by
stopping the sandboxed server (which ends every pending call).

The sandbox sees the host's interpreter (its prefix, read-only, at its own path: a
shared ``libpython`` may be linked to it), the hub's site-packages and gymhub's own
source (read-only, under ``/opt/gymhub``), so a wheel may depend on what the hub
already has and nothing else. Anything the hub cannot decide (a dependency it lacks, no
sandbox, a timeout, a server that never comes up) is ``unchecked`` with a reason, never
``passed``. The details are documented in :mod:`gymhub.hub.served_check`.
"""

from __future__ import annotations

import os
import site
import sys
import threading
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

import gymhub
from gymhub.errors import BackendError
from gymhub.hub.records import CheckInfo, VersionInfo
from gymhub.hub.store import HubStore
from gymhub.sandbox import Limits, Sandbox, get_sandbox
from gymhub.sandbox.bwrap import others_can_reach

__all__ = ["DEFAULT_TIMEOUT_S", "check_sandbox", "check_version", "missing_requirements",
           "run_check", "unchecked"]

DEFAULT_TIMEOUT_S = 300.0
_SRC = "/opt/gymhub/src"
_SITE = "/opt/gymhub/site"
_FORBIDDEN = ("/work", "/tmp", "/proc", "/dev", "/etc")
_SOCKET = "env.sock"
#: How long the sandboxed server may take to accept its first connection.
_START_S = 60.0


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
    import importlib.util

    lacking = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if lacking:  # the environment is served in the sandbox from the hub's site-packages
        raise BackendError(f"the hub's check serves the environment with gymhub serve, "
                           f"which needs {', '.join(lacking)} (pip install 'gymhub[hub]')")
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


def missing_requirements(requires_dist: Iterable[str]) -> list[str]:
    """The wheel's requirements that nothing importable by the check satisfies.

    Read from the METADATA the hub validated, in the hub's process (the sandbox shows
    it the same site-packages). ``gymhub`` itself is always provided: the check runs
    the hub's gymhub, the one it vouches for, whatever version the wheel names.
    """
    missing: list[str] = []
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            missing.append(f"{line} (unparseable)")
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if canonicalize_name(req.name) == "gymhub":
            continue
        try:
            found = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            missing.append(line)
            continue
        if req.specifier and not req.specifier.contains(found, prereleases=True):
            missing.append(f"{line} (only {found} is available)")
    return missing


def _run(box: Sandbox, version: VersionInfo, data: bytes,
         timeout_s: float) -> tuple[str, dict[str, Any]]:
    requires = version.metadata.get("requires_dist") or []
    missing = missing_requirements(str(r) for r in requires)
    if missing:
        return "unchecked", unchecked("dependencies not available offline: "
                                      + ", ".join(missing))
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
        found = _serve_and_check(session, exe, env, left(), version.env_ids, deadline)
    if "unchecked" in found:
        return "unchecked", unchecked(str(found["unchecked"]), [install])
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


def _serve_and_check(session: Any, exe: str, env: dict[str, str], limits: Limits,
                     env_ids: Iterable[str], deadline: float) -> dict[str, Any]:
    """Serve the installed wheel in the sandbox and check it from here (module doc).

    Returns the details, or ``{"unchecked": reason}`` when the hub could not decide.
    """
    from gymhub.hub.served_check import check_served

    ids = list(env_ids)
    server = session.spawn(
        [exe, "-m", "gymhub.server.cli", *ids, "--uds", f"/work/{_SOCKET}", "--ttl", "0",
         "--max-episodes", "64", "--workers", "2", "--log-level", "error",
         "--step-timeout", str(max(int(deadline - time.monotonic()), 1))],
        env=env, limits=limits)
    sock = str(session.workdir.path / _SOCKET)
    try:
        if not _wait_for_socket(sock, server, min(deadline, time.monotonic() + _START_S)):
            if server.alive:
                return {"unchecked": "the check stopped: timeout (the environment server "
                                     "accepted no connection in time)"}
            return {"summary": "the environment server exited at start",
                    "checks": [{"name": "serves (gymhub serve in the sandbox)", "ok": False,
                                "ms": 0.0, "detail": _tail(server.stderr_tail())}],
                    "envs": {}, "gold_score": None, "noop_score": None,
                    "reason": "the environment server exited at start"}
        result: dict[str, Any] = {}

        def work() -> None:
            result["details"] = check_served(sock, ids)

        worker = threading.Thread(target=work, name="gymhub-hub-check-client", daemon=True)
        worker.start()
        worker.join(max(deadline - time.monotonic(), 0.0))
        if worker.is_alive():
            server.stop()  # every pending call now fails at once; the worker ends
            worker.join(30.0)
            return {"unchecked": "the check stopped: timeout"}
        return result.get("details") or {"unchecked": "the check client ended without a result"}
    finally:
        server.stop()


def _wait_for_socket(path: str, server: Any, until: float) -> bool:
    """Whether the sandboxed server accepts connections on ``path`` before ``until``."""
    import socket

    while time.monotonic() < until and server.alive:
        if os.path.exists(path):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(1.0)
                try:
                    probe.connect(path)
                    return True
                except OSError:
                    pass
        time.sleep(0.02)
    return False


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
