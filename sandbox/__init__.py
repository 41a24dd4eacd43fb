"""Isolated execution of untrusted, model-written code: backends, limits, sessions.

Use::

    from gymhub.sandbox import Limits, get_sandbox

    sandbox = get_sandbox()                      # bwrap where installed
    result = sandbox.run(["python3", "-c", "print(1)"], limits=Limits(wall_s=2))
    with sandbox.session() as s:                 # one per episode
        s.write_file("sol.py", code)
        result = s.run(["python3", "sol.py"], collect=["out.txt"])
        s.run_python("import sol; x = sol.f(3)")  # persistent REPL: x survives
        s.run_python("x + 1").value                 # -> repr of the trailing expression

What the package holds:

* the contract every backend implements: :mod:`gymhub.sandbox.base` (limits, results,
  :class:`Sandbox`, :class:`Session`);
* the backends: ``bwrap`` (default; :mod:`gymhub.sandbox.bwrap`), ``docker`` (Docker
  Engine API, also Podman's; the subpackage :mod:`gymhub.sandbox.docker`), ``local``
  (no isolation, refused unless enabled; :mod:`gymhub.sandbox.local`), and what the
  host-process backends share (:mod:`~gymhub.sandbox.hostsession`,
  :mod:`~gymhub.sandbox.process`, :mod:`~gymhub.sandbox.cgroups`,
  :mod:`~gymhub.sandbox.workdir`, :mod:`~gymhub.sandbox.workdir_pool`);
* the persistent REPL of :meth:`Session.run_python`: :mod:`gymhub.sandbox.repl` (host
  side) and :mod:`gymhub.sandbox.repl_server` (inside the sandbox);
* the guarded SQL layer, the subpackage :mod:`gymhub.sandbox.sql` (read-only SQLite and
  PostgreSQL handles for agents' queries; its own docstring lists what it protects);
* ``gymhub sandbox exec``: :mod:`gymhub.sandbox.cli`.

Backends are imported lazily: importing this package loads neither the ``docker`` SDK
nor any backend.

What the ``bwrap`` and ``docker`` backends protect against (each is an adversarial test
in ``tests/sandbox/test_attacks.py``, run on every available backend):

* **Resource exhaustion**: fork bombs (pids cgroup / container pids limit); memory bombs,
  one huge or many small allocations (memory cgroup, ``RLIMIT_AS``); infinite CPU loops
  (cgroup CPU accounting, ``RLIMIT_CPU``); sleeping past the deadline (wall-clock kill);
  floods of output (capped, the command is killed past the cap); filling ``/tmp`` and
  the workdir (size-capped tmpfs); huge files (``RLIMIT_FSIZE``); descriptor exhaustion
  (``RLIMIT_NOFILE``).
* **Escaping the call**: ``setsid``/double-fork daemons, zombies and ``kill -9 -1``
  (pid namespace; the call's cgroup or container processes are killed after each call;
  ``kill -9 -1`` only reaches the sandbox's own processes).
* **Reaching out**: network egress, DNS and listening ports (no network namespace route /
  ``network_mode=none``); reading host files such as ``/etc/shadow`` or the host's home
  (not mounted); the host's environment variables (environment cleared); overwriting the
  interpreter or runtime (read-only); ``../`` and symlink tricks in the files in/out API
  (names checked, paths walked with ``O_NOFOLLOW``); nested user namespaces
  (``--disable-userns``, all capabilities dropped, no-new-privileges).
* **Bad bytes**: non-UTF-8 output is returned as bytes, decoded only with replacement.
* **The persistent REPL** (``Session.run_python``; tests in ``tests/sandbox/test_repl.py``,
  also on ``local``): it runs inside the session's sandbox with the session's limits, as
  the sandbox user, in its own cgroup (``bwrap``) or the session's container
  (``docker``). A crash (``os._exit``, segfault, ``abort``, recursion), a memory or fork
  bomb, a loop past the call's timeout or CPU budget, closing or replacing its channel
  descriptors, or writing frames or garbage to them kills it and everything it started;
  the result says ``restarted=True`` with a reason and the next call gets a fresh
  interpreter. Printing fake frames, or garbage to fd 1, is only output: the protocol
  has its own descriptors. The host reads at most one bounded frame per call and checks
  its random id. Commands run by ``Session.run`` in the same session cannot kill it
  (``docker`` spares its process session when cleaning up after a command).

What they do **not** protect against:

* kernel vulnerabilities: bwrap and containers share the host kernel (no seccomp filter
  is installed by ``bwrap``; Podman/Docker apply their default seccomp profile). Use a VM
  boundary (gVisor, Firecracker) for adversaries with kernel exploits;
* side channels and timing: CPU caches, ``/proc/cpuinfo``, the kernel version, the
  load of other sandboxes; CPU *share* between sandboxes is not guaranteed, only each
  call's total CPU time;
* anything readable under the read-only runtime (``/usr``) and extra ``ro_binds``;
  do not put secrets there;
* without writable cgroups (non-root), fork bombs and multi-process memory are bounded
  only by rlimits and the deadline (``RLIMIT_NPROC`` counts all of the user's processes);
* a command's own session workdir: files it writes persist until the session closes,
  and a later call of the same session sees them (by design);
* the ``local`` backend protects against nothing but runaway resources;
* the REPL's code shares its process with the REPL server: it can read the current
  request id from memory and forge *its own* call's answer (the stale real answer is
  then caught and the interpreter replaced by the next call), so a REPL result is only
  as trustworthy as the code that produced it. Score with a fresh sandbox, never with
  ``run_python`` results. Background threads and processes it starts keep running
  between calls (like a notebook), bounded by its cgroup/container limits and a
  lifetime ``RLIMIT_CPU``, until a restart or the session's end; on ``docker`` a call's
  CPU time is bounded by its wall timeout only. Output of a call that killed the
  interpreter is lost.
"""

from __future__ import annotations

if __name__ != "gymhub." + __name__.rpartition(".")[2]:  # run from the repo root
    raise ImportError(f"import gymhub.{__name__}, not {__name__}: the top-level folders "
                      "are subpackages of gymhub and must not load a second time")

import atexit
import contextlib
import importlib
import os
import threading
from typing import TYPE_CHECKING, Any

from gymhub.errors import BackendError
from gymhub.sandbox.base import (
    WORKDIR,
    ExecResult,
    Limits,
    PythonResult,
    Sandbox,
    SandboxPathError,
    Session,
)

if TYPE_CHECKING:
    from gymhub.sandbox.bwrap import BwrapSandbox
    from gymhub.sandbox.docker.backend import DockerSandbox
    from gymhub.sandbox.local import LocalSandbox

__all__ = [
    "BACKENDS",
    "WORKDIR",
    "BackendError",
    "BwrapSandbox",
    "DockerSandbox",
    "ExecResult",
    "Limits",
    "LocalSandbox",
    "PythonResult",
    "Sandbox",
    "SandboxPathError",
    "Session",
    "available_backends",
    "get_sandbox",
    "shared_sandbox",
]

#: Backend name → "module:Class", imported on first use.
BACKENDS: dict[str, str] = {
    "bwrap": "gymhub.sandbox.bwrap:BwrapSandbox",
    "docker": "gymhub.sandbox.docker.backend:DockerSandbox",
    "local": "gymhub.sandbox.local:LocalSandbox",
}


def _load(name: str) -> type[Sandbox]:
    try:
        target = BACKENDS[name]
    except KeyError:
        raise BackendError(
            f"unknown sandbox backend {name!r}; choose one of {', '.join(BACKENDS)}"
        ) from None
    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    assert isinstance(cls, type) and issubclass(cls, Sandbox)
    return cls


def get_sandbox(backend: str | None = None, limits: Limits | None = None,
                **options: Any) -> Sandbox:
    """Make a sandbox: ``backend`` or ``$GYMHUB_SANDBOX_BACKEND`` or the best available.

    With no name, ``bwrap`` when installed, else ``docker`` when a daemon answers;
    ``local`` is never chosen implicitly.

    Raises:
        BackendError: the backend is unknown, not installed or unusable.
    """
    name = backend or os.environ.get("GYMHUB_SANDBOX_BACKEND") or None
    if name is None:
        found = available_backends()
        if not found:
            raise BackendError(
                "no sandbox backend is available: install bubblewrap, or start a Docker/"
                "Podman daemon and set DOCKER_HOST"
            )
        name = found[0]
    return _load(name)(limits, **options)


_shared: dict[str | None, Sandbox] = {}
_shared_lock = threading.Lock()
_atexit_registered = False


def shared_sandbox(backend: str | None = None) -> Sandbox:
    """The process-wide sandbox for ``backend`` (built on first use, closed at exit).

    Each sandbox object owns pooled resources (``bwrap``: a pool of tmpfs workdirs;
    ``docker``: a warm container pool), so every long-lived user in one process (the
    ``unit_tests`` verifier, ``code-v0``'s sessions) must share one per backend instead
    of building its own: two pools hold twice the mounts/containers and, built by
    separate caches, nobody closed either. The lock makes concurrent first calls build
    exactly one; sandboxes are thread-safe, so sharing is safe. ``None`` (and
    ``$GYMHUB_SANDBOX_BACKEND``) resolve as in :func:`get_sandbox`, and the result is
    filed under its real name too, so ``shared_sandbox()`` and
    ``shared_sandbox("bwrap")`` are the same object. An ``atexit`` hook closes them all.

    Raises:
        BackendError: the backend is unknown, not installed or unusable (nothing is
            cached then, so a later call tries again).
    """
    global _atexit_registered
    key = backend or os.environ.get("GYMHUB_SANDBOX_BACKEND") or None
    with _shared_lock:
        box = _shared.get(key)
        if box is None:
            box = get_sandbox(key)
            named = _shared.get(box.name)
            if named is not None and named is not box:
                box.close()  # an auto choice that resolved to one already shared
                box = named
            _shared[box.name] = _shared[key] = box
            if not _atexit_registered:
                atexit.register(_close_shared)
                _atexit_registered = True
        return box


def _close_shared() -> None:
    """Close every shared sandbox (the ``atexit`` hook; also used by tests)."""
    with _shared_lock:
        boxes = {id(b): b for b in _shared.values()}
        _shared.clear()
    for box in boxes.values():
        with contextlib.suppress(Exception):  # exiting: one failure must not stop the rest
            box.close()


def available_backends() -> list[str]:
    """Isolating backends usable here, best first (``local`` is never listed)."""
    found: list[str] = []
    if _load("bwrap").available():  # type: ignore[attr-defined]
        found.append("bwrap")
    if _load("docker").available():  # type: ignore[attr-defined]
        found.append("docker")
    return found


def __getattr__(name: str) -> Any:
    # Lazy backend classes: ``from gymhub.sandbox import DockerSandbox`` imports docker
    # only then.
    for backend, target in BACKENDS.items():
        if target.endswith(":" + name):
            return _load(backend)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
