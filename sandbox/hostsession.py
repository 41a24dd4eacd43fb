"""A session whose commands are host processes: the common half of ``bwrap`` and ``local``.

Each call gets a fresh cgroup (when writable), runs through the launcher of
:mod:`gymhub.sandbox.process`, and ends with the cgroup killed and removed, so nothing a
call starts outlives it. The workdir (:class:`~gymhub.sandbox.workdir.HostWorkdir`) is
the only state that persists between calls; the REPL of :meth:`HostSession.run_python`
(:class:`HostChannel`, in its own cgroup) is the only process that lives on between
calls, until it is killed or the session closes. Subclasses only say how to wrap a
command (:meth:`HostSession._wrap`).
"""

from __future__ import annotations

import abc
import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from gymhub.errors import BackendError
from gymhub.sandbox.background import Background, end_process
from gymhub.sandbox.base import (
    LIMIT_CPU,
    LIMIT_MEMORY,
    ExecResult,
    Limits,
    PythonResult,
    Session,
)
from gymhub.sandbox.cgroups import CallCgroup, Cgroups
from gymhub.sandbox.process import hit_cpu_rlimit, launcher_argv, run_monitored
from gymhub.sandbox.repl import Channel, Death, ReplClient, send_until, server_argv
from gymhub.sandbox.workdir import HostWorkdir
from gymhub.sandbox.workdir_pool import WorkdirPool

__all__ = ["BASE_ENV", "HostChannel", "HostSession", "repl_rlimits"]

#: Environment every command starts with (the host's own is never passed through).
BASE_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONIOENCODING": "utf-8",
}


def repl_rlimits(limits: Limits) -> Limits:
    """Limits for the REPL's launcher: ``RLIMIT_CPU`` counts a process's whole life.

    A REPL serves many calls, so its per-process CPU rlimit is a lifetime backstop (60
    calls' worth, at least 10 minutes); each call's own budget is enforced by the host
    from the REPL cgroup's CPU counter, and its wall time by the call's deadline.
    """
    return limits.replace(cpu_s=max(limits.cpu_s * 60, 600.0))


class HostChannel(Channel):
    """A REPL that is a host process (bwrap, local): two pipes, a pidfd and a cgroup.

    Args:
        argv: the full host command (launcher + wrapped server); it must pass
            ``channel_fds`` (the interpreter's ends) to the server as arguments.
        channel_fds: ``(request read end, response write end)``, inherited by the child.
        host_fds: ``(request write end, response read end)``, kept here.
        cgroup: the REPL's own group (memory, pids, CPU accounting, kill), if any.
        cwd: working directory of the launcher.
        soft_kill: the backend's soft kill, given the launcher's pid.
    """

    def __init__(self, argv: Sequence[str], channel_fds: tuple[int, int],
                 host_fds: tuple[int, int], cgroup: CallCgroup | None, cwd: str,
                 soft_kill: Callable[[int], bool]) -> None:
        self.cgroup = cgroup
        self._soft_kill = soft_kill
        self._req, self._resp = host_fds
        self._death: Death | None = None
        self._eof = False
        try:
            self.proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env={}, cwd=cwd, close_fds=True,
                pass_fds=channel_fds, start_new_session=True,
            )
        except OSError as exc:
            for fd in (*channel_fds, *host_fds):
                os.close(fd)
            if cgroup is not None:
                cgroup.remove()
            raise BackendError(f"cannot start the Python REPL: {exc}") from exc
        for fd in channel_fds:
            os.close(fd)
        try:
            self._pidfd = os.pidfd_open(self.proc.pid)
        except OSError as exc:  # EMFILE, or a kernel without pidfds: undo the start
            self._abandon()
            raise BackendError(f"cannot watch the Python REPL: {exc}") from exc
        os.set_blocking(self._req, False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._resp, selectors.EVENT_READ)
        self._sel.register(self._pidfd, selectors.EVENT_READ)

    def _abandon(self) -> None:
        """Kill and reap a REPL started without a pidfd; free its cgroup and descriptors.

        The constructor is failing, so nobody will ever call :meth:`kill`: without this
        the interpreter, its cgroup and the host's pipe ends would leak.
        """
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill()
        self.proc.wait()
        if self.cgroup is not None:
            self.cgroup.remove()
        for fd in (self._req, self._resp):
            with contextlib.suppress(OSError):
                os.close(fd)
        assert self.proc.stderr is not None
        self.proc.stderr.close()

    def send(self, data: bytes, deadline: float) -> bool:
        """Write a request (see :meth:`Channel.send`)."""
        return send_until(self._req, lambda view: os.write(self._req, view), data, deadline)

    def recv(self, deadline: float) -> bytes | None:
        """Read what the interpreter sent (see :meth:`Channel.recv`)."""
        events = self._sel.select(max(deadline - time.monotonic(), 0))
        if not events:
            return None
        if any(key.fd == self._resp for key, _ in events):
            data = os.read(self._resp, 1 << 16)
            self._eof = not data
            return data
        # The process ended; a child it forked may still hold the pipe open, so take
        # what is already buffered and call it the end.
        os.set_blocking(self._resp, False)
        try:
            data = os.read(self._resp, 1 << 16)
        except BlockingIOError:
            data = b""
        self._eof = not data
        return data

    def pending(self) -> bool:
        """Whether bytes or an exit are waiting (see :meth:`Channel.pending`)."""
        return bool(self._sel.select(0))

    def cpu_ms(self) -> float | None:
        """CPU time of the REPL's cgroup (None without cgroups)."""
        return self.cgroup.cpu_ms() if self.cgroup is not None else None

    def diagnostics(self) -> bytes:
        """Up to 64 KiB of what the launcher and interpreter wrote to stderr."""
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        os.set_blocking(fd, False)
        with contextlib.suppress(OSError):
            return os.read(fd, 1 << 16)
        return b""

    def kill(self) -> Death:
        """Kill the interpreter, its children and its cgroup; reap; remove the cgroup."""
        if self._death is not None:
            return self._death
        if self._eof:  # it is ending on its own: let its own status through
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=0.1)
        running = end_process(self.proc, self._soft_kill, self.cgroup)
        code = self.proc.returncode
        sig = -code if code < 0 else (code - 128 if 128 < code <= 192 else None)
        oom = self.cgroup.oom_killed() if self.cgroup is not None else False
        self._death = Death(exit_code=None if sig is not None else code, signal=sig,
                            oom_killed=oom)
        if running and sig is None:
            self._death.signal, self._death.exit_code = signal.SIGKILL, None
        if self.cgroup is not None:
            self.cgroup.remove()
        self._sel.close()
        for fd in (self._req, self._resp, self._pidfd):
            with contextlib.suppress(OSError):
                os.close(fd)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return self._death


class HostSession(Session):
    """Session state shared by host-process backends.

    Args:
        backend: backend name reported in results.
        limits: the session's default limits.
        cgroups: writable hierarchy, or None to rely on rlimits alone.
        uid: host uid that owns the workdir (the sandbox user).
        gid: host gid of the same.
        workdirs: the backend's pool of ready workdirs, used when its size matches.
    """

    def __init__(self, backend: str, limits: Limits, cgroups: Cgroups | None,
                 uid: int, gid: int, workdirs: WorkdirPool | None = None) -> None:
        super().__init__(limits)
        self.backend = backend
        self._cgroups = cgroups
        self._repl = ReplClient(self._start_repl, limits, backend)
        self._background: list[Background] = []
        self._workdirs = workdirs
        if workdirs is not None and (workdirs.size_mb, workdirs.uid, workdirs.gid) != (
                limits.workdir_mb, uid, gid):
            self._workdirs = None
        try:
            self.workdir = (self._workdirs.take() if self._workdirs is not None
                            else HostWorkdir(limits.workdir_mb, uid, gid))
        except OSError as exc:
            raise BackendError(f"cannot create a workdir: {exc}") from exc

    # -- what subclasses provide --------------------------------------------------------
    @abc.abstractmethod
    def _wrap(self, argv: Sequence[str], env: Mapping[str, str], limits: Limits, *,
              repl: bool = False) -> list[str]:
        """The full host command (after the launcher) that runs ``argv`` in the sandbox.

        ``repl`` marks the long-lived REPL interpreter (a backend may start it slightly
        differently, e.g. with an init that reaps its orphans).
        """

    def _soft_kill(self, pid: int) -> bool:
        """Kill the sandboxed processes under launcher ``pid``, leaving the supervisor.

        Returns False when the backend has no such step (the hard kill then runs).
        """
        return False

    def _nproc(self) -> int | None:
        """RLIMIT_NPROC for the launcher (None: leave it; only meaningful for non-root)."""
        return None

    # -- Session API ---------------------------------------------------------------------
    def new_cgroup(self, limits: Limits) -> CallCgroup | None:
        """A cgroup for one call or REPL, or None when cgroups are unavailable."""
        if self._cgroups is None:
            return None
        try:
            return self._cgroups.create(limits.memory_mb << 20, limits.pids)
        except OSError as exc:
            raise BackendError(f"cannot create a cgroup: {exc}") from exc

    def command(self, argv: Sequence[str], env: Mapping[str, str] | None, limits: Limits,
                cgroup: CallCgroup | None, *, repl: bool = False) -> list[str]:
        """Launcher + wrapped command, ready for ``run_monitored`` or a REPL."""
        full_env = {**BASE_ENV, "HOME": "/tmp", **(env or {})}
        launch = launcher_argv(repl_rlimits(limits) if repl else limits, cgroup, self._nproc())
        return launch + self._wrap(argv, full_env, limits, repl=repl)

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              limits: Limits | None = None) -> Background:
        """Start ``argv`` in the sandbox and return at once; it runs until stopped.

        Confined like :meth:`run` (namespaces, uid, rlimits, its own cgroup). The caller
        stops it (:meth:`Background.stop`); closing the session stops it too. Its wall
        time is the caller's to enforce: ``limits.wall_s`` is not watched here.

        Raises:
            BackendError: it could not be started.
            RuntimeError: the session is closed.
        """
        lim = limits or self.limits
        with self._lock:
            self._check_open()
            cgroup = self.new_cgroup(lim)
            bg = Background(self.command(argv, env, lim, cgroup), cgroup,
                            str(self.workdir.path), self._soft_kill)
            self._background.append(bg)
            return bg

    def _start_repl(self) -> Channel:
        """Start a fresh REPL interpreter in its own cgroup (see :mod:`.repl`)."""
        cgroup = self.new_cgroup(self.limits)
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        argv = server_argv("python3", (req_r, resp_w))
        return HostChannel(self.command(argv, None, self.limits, cgroup, repl=True),
                           (req_r, resp_w), (req_w, resp_r), cgroup, str(self.workdir.path),
                           self._soft_kill)

    def run_python(self, code: str, *, timeout: float | None = None) -> PythonResult:
        """Run a cell in the session's REPL (see :meth:`Session.run_python`)."""
        with self._lock:
            self._check_open()
            return self._repl.run(code, timeout)

    def _execute(self, argv: list[str], stdin: bytes, env: Mapping[str, str], limits: Limits,
                 collect: tuple[str, ...]) -> ExecResult:
        """Run one command in a fresh cgroup (see :meth:`Session._execute`)."""
        cgroup = self.new_cgroup(limits)
        try:
            outcome = run_monitored(
                self.command(argv, env, limits, cgroup), stdin=stdin, limits=limits,
                cgroup=cgroup, cwd=str(self.workdir.path), on_kill=self._soft_kill,
            )
            cpu = cgroup.cpu_ms() if cgroup is not None else None
            oom = cgroup.oom_killed() if cgroup is not None else False
            pids_hit = cgroup.pids_exhausted() if cgroup is not None else False
        finally:
            if cgroup is not None:
                cgroup.remove()
        collected = self.workdir.collect(collect, limits.file_size_mb << 20)
        limit = outcome.limit
        cpu_ms = cpu if cpu is not None else outcome.rusage_cpu_ms
        if limit is None and hit_cpu_rlimit(outcome.signal, cpu_ms, limits):  # second layer
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
            try:
                for bg in self._background:
                    bg.stop()
                self._repl.kill()
            finally:  # a failed kill must not also leak the workdir's tmpfs mount
                if self._workdirs is not None:  # nothing of the session runs any more
                    self._workdirs.give_back(self.workdir)
                else:
                    self.workdir.remove()

    def __del__(self) -> None:
        # A forgotten session must not leak a tmpfs mount or a REPL process.
        if not getattr(self, "_closed", True):
            self.close()
