"""A session whose commands are host processes: the common half of ``bwrap`` and ``local``.

Each call gets a fresh cgroup (when writable), runs through the launcher of
:mod:`gymhub.sandbox.process`, and ends with the cgroup killed and removed, so nothing a
call starts outlives it. The workdir (:class:`~gymhub.sandbox.workdir.HostWorkdir`) is
the only state that persists between calls; the optional REPL is the only process.
Subclasses only say how to wrap a command (:meth:`HostSession._wrap`).
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Mapping, Sequence

from gymhub.errors import BackendError
from gymhub.sandbox.base import (
    LIMIT_CPU,
    LIMIT_MEMORY,
    ExecResult,
    Files,
    Limits,
    Session,
)
from gymhub.sandbox.cgroups import CallCgroup, Cgroups
from gymhub.sandbox.process import hit_cpu_rlimit, launcher_argv, run_monitored
from gymhub.sandbox.workdir import HostWorkdir

__all__ = ["BASE_ENV", "HostSession"]

#: Environment every command starts with (the host's own is never passed through).
BASE_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
}


class HostSession(Session):
    """Session state shared by host-process backends.

    Args:
        backend: backend name reported in results.
        limits: the session's default limits.
        cgroups: writable hierarchy, or None to rely on rlimits alone.
        uid: host uid that owns the workdir (the sandbox user).
        gid: host gid of the same.
    """

    def __init__(self, backend: str, limits: Limits, cgroups: Cgroups | None,
                 uid: int, gid: int) -> None:
        self.backend = backend
        self.limits = limits
        self._cgroups = cgroups
        self._lock = threading.RLock()
        self._closed = False
        try:
            self.workdir = HostWorkdir(limits.workdir_mb, uid, gid)
        except OSError as exc:
            raise BackendError(f"cannot create a workdir: {exc}") from exc

    # -- what subclasses provide --------------------------------------------------------
    @abc.abstractmethod
    def _wrap(self, argv: Sequence[str], env: Mapping[str, str], limits: Limits) -> list[str]:
        """The full host command (after the launcher) that runs ``argv`` in the sandbox."""

    def _soft_kill(self, pid: int) -> bool:
        """Kill the sandboxed processes under launcher ``pid``, leaving the supervisor.

        Returns False when the backend has no such step (the hard kill then runs).
        """
        return False

    def _nproc(self) -> int | None:
        """RLIMIT_NPROC for the launcher (None: leave it; only meaningful for non-root)."""
        return None

    # -- Session API ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the sandbox session is closed")

    def new_cgroup(self, limits: Limits) -> CallCgroup | None:
        """A cgroup for one call or REPL, or None when cgroups are unavailable."""
        if self._cgroups is None:
            return None
        try:
            return self._cgroups.create(limits.memory_mb << 20, limits.pids)
        except OSError as exc:
            raise BackendError(f"cannot create a cgroup: {exc}") from exc

    def command(self, argv: Sequence[str], env: Mapping[str, str] | None, limits: Limits,
                cgroup: CallCgroup | None) -> list[str]:
        """Launcher + wrapped command, ready for ``run_monitored`` or a REPL."""
        full_env = {**BASE_ENV, "HOME": "/tmp", **(env or {})}
        return launcher_argv(limits, cgroup, self._nproc()) + self._wrap(argv, full_env, limits)

    def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        files: Files | None = None,
        collect: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        """Run one command (see :meth:`Session.run`)."""
        if isinstance(argv, str) or not argv:
            raise ValueError("argv must be a non-empty list of strings")
        lim = limits or self.limits
        with self._lock:
            self._check_open()
            for name, data in (files or {}).items():
                self.workdir.write_file(name, data)
            cgroup = self.new_cgroup(lim)
            try:
                data_in = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
                outcome = run_monitored(
                    self.command(argv, env, lim, cgroup), stdin=data_in, limits=lim,
                    cgroup=cgroup, cwd=str(self.workdir.path), on_kill=self._soft_kill,
                )
                cpu = cgroup.cpu_ms() if cgroup is not None else None
                oom = cgroup.oom_killed() if cgroup is not None else False
                pids_hit = cgroup.pids_exhausted() if cgroup is not None else False
            finally:
                if cgroup is not None:
                    cgroup.remove()
            collected = self.workdir.collect(tuple(collect), lim.file_size_mb << 20)
        limit = outcome.limit
        cpu_ms = cpu if cpu is not None else outcome.rusage_cpu_ms
        if limit is None and hit_cpu_rlimit(outcome.signal, cpu_ms, lim):  # second layer
            limit = LIMIT_CPU
        if oom and limit is None and outcome.signal is not None:
            limit = LIMIT_MEMORY
        return ExecResult(
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            stdout=outcome.stdout,
            stderr=outcome.stderr,
            stdout_truncated=outcome.stdout_truncated,
            stderr_truncated=outcome.stderr_truncated,
            timed_out=limit in ("wall_time", "cpu_time"),
            oom_killed=oom,
            pids_exhausted=pids_hit,
            limit=limit,
            wall_ms=outcome.wall_ms,
            cpu_ms=cpu_ms,
            files=collected,
            backend=self.backend,
        )

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write a workdir file (see :meth:`Session.write_file`)."""
        with self._lock:
            self._check_open()
            self.workdir.write_file(path, data, mode)

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Read a workdir file (see :meth:`Session.read_file`)."""
        with self._lock:
            self._check_open()
            return self.workdir.read_file(path, max_bytes)

    def list_files(self) -> list[str]:
        """List workdir files (see :meth:`Session.list_files`)."""
        with self._lock:
            self._check_open()
            return self.workdir.list_files()

    def close(self) -> None:
        """Delete the workdir (idempotent); no process of the session outlives a call."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.workdir.remove()

    @property
    def closed(self) -> bool:
        """Whether the session is closed."""
        return self._closed

    def __del__(self) -> None:
        # A forgotten session must not leak a tmpfs mount or a REPL process.
        if not getattr(self, "_closed", True):
            self.close()
