"""Run one host process under a deadline, capping its output and killing its whole tree.

Shared by the ``bwrap`` and ``local`` backends. The calling thread does all the work
with one ``selectors`` loop over stdin, stdout, stderr and a pidfd (no helper threads,
so 32 concurrent callers cost 32 threads, not 96), which lets it enforce in one place:

* the wall-clock deadline (``Limits.wall_s``),
* the total CPU time of the call's cgroup, polled every 50 ms (``Limits.cpu_s``),
* the output cap (``Limits.output_bytes`` per stream; exceeding it kills).

The process is started through a ``/bin/sh`` launcher that joins the call's cgroups and
sets rlimits *before* it ``exec``s the real command, so no child can be forked outside
the group (``preexec_fn`` would do the same but is unsafe with threads).
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gymhub.errors import BackendError
from gymhub.sandbox.base import LIMIT_CPU, LIMIT_OUTPUT, LIMIT_WALL, Limits
from gymhub.sandbox.cgroups import CallCgroup

__all__ = ["Outcome", "hit_cpu_rlimit", "launcher_argv", "rlimit_cpu_s", "run_monitored"]

#: Exit status the launcher uses when it could not join a cgroup (with a marker on stderr).
_LAUNCH_FAIL = 125
_LAUNCH_MARK = b"gymhub-launcher:"
_CPU_POLL_S = 0.05
_DRAIN_S = 0.2


def launcher_argv(limits: Limits, cgroup: CallCgroup | None, nproc: int | None) -> list[str]:
    """The ``sh -c`` prefix that joins ``cgroup`` and applies rlimits, then execs "$@".

    rlimits (hard and soft, so the command cannot raise them): CPU seconds, file size,
    open files, address space (2x memory + 512 MiB: a second layer behind the memory
    cgroup that also turns one huge allocation into a clean ``MemoryError``), no core
    dumps, and ``RLIMIT_NPROC`` when ``nproc`` is given (useful only for a non-root user).
    """
    procs = cgroup.procs_files if cgroup is not None else []
    cmds = [
        'n=$1; shift; while [ "$n" -gt 0 ]; do',
        f' echo $$ > "$1" || {{ echo "{_LAUNCH_MARK.decode()} cannot join $1" >&2;'
        f" exit {_LAUNCH_FAIL}; }}; shift; n=$((n-1)); done",
        # With a cgroup the parent's CPU polling is the limit and RLIMIT_CPU a backstop.
        f"; ulimit -t {rlimit_cpu_s(limits) + (1 if cgroup is not None else 0)}",
        f"; ulimit -f {limits.file_size_mb * 2048}",
        f"; ulimit -n {limits.open_files}",
        f"; ulimit -v {(2 * limits.memory_mb + 512) * 1024}",
        "; ulimit -c 0",
    ]
    if nproc is not None:
        cmds.append(f"; ulimit -p {nproc}")
    cmds.append('; exec "$@"')
    return ["/bin/sh", "-c", "".join(cmds), "gymhub-launch", str(len(procs)), *procs]


def rlimit_cpu_s(limits: Limits) -> int:
    """RLIMIT_CPU for a call: the CPU budget rounded up (the kernel counts whole seconds)."""
    return math.ceil(limits.cpu_s)


def hit_cpu_rlimit(signal_: int | None, cpu_ms: float, limits: Limits) -> bool:
    """Whether a death by SIGXCPU/SIGKILL is the CPU rlimit, judged by the CPU time used.

    dash sets soft = hard, so the kernel may deliver either signal.
    """
    # The kernel's per-process CPU clock and the accounting we read differ by a few ticks.
    return signal_ in (9, 24) and cpu_ms >= limits.cpu_s * 1000 * 0.8


@dataclass
class Outcome:
    """Raw facts about one monitored process; backends turn it into an ExecResult."""

    returncode: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    limit: str | None
    wall_ms: float
    rusage_cpu_ms: float

    @property
    def exit_code(self) -> int | None:
        """Exit status; a shell-style 128+N (bwrap's report of a signal) counts as signal N."""
        if self.returncode < 0 or 128 < self.returncode <= 128 + 64:
            return None
        return self.returncode

    @property
    def signal(self) -> int | None:
        """The terminating signal, decoded from a negative status or 128+N."""
        if self.returncode < 0:
            return -self.returncode
        if 128 < self.returncode <= 128 + 64:
            return self.returncode - 128
        return None


def run_monitored(
    argv: Sequence[str],
    *,
    stdin: bytes,
    limits: Limits,
    cgroup: CallCgroup | None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    on_kill: Callable[[int], bool] | None = None,
) -> Outcome:
    """Start ``argv`` and supervise it to the end (see module docstring).

    Args:
        argv: full command, normally ``launcher_argv(...) + backend command``.
        stdin: bytes to feed; stdin is closed after them.
        limits: deadline, CPU and output caps.
        cgroup: the call's group (CPU polling and the final kill), if any.
        env: environment of the launcher (the backend clears the command's own).
        cwd: working directory of the launcher.
        on_kill: backend-specific soft kill, given the launcher's pid; returns whether it
            did anything (else the hard kill runs at once).

    Raises:
        BackendError: the launcher or the backend binary could not be started.
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(env or {}), cwd=cwd,
            close_fds=True, start_new_session=True,
        )
    except OSError as exc:
        raise BackendError(f"cannot start {argv[0]}: {exc}") from exc
    assert proc.stdout is not None and proc.stderr is not None
    pidfd = os.pidfd_open(proc.pid)
    out: dict[int, bytearray] = {proc.stdout.fileno(): bytearray(),
                                 proc.stderr.fileno(): bytearray()}
    truncated = {fd: False for fd in out}
    cap = limits.output_bytes
    limit: str | None = None
    exited = False
    stdin_view = memoryview(stdin)

    def kill(hard: bool = False) -> None:
        # Soft first: the backend kills the sandbox's inner processes and lets its
        # supervisor (bwrap) reap them and exit, so no orphan zombie is left for the host's
        # init. Hard (also used when the soft kill did not end it by the drain deadline):
        # the whole process group and cgroup at once.
        if not hard and on_kill is not None and on_kill(proc.pid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        if cgroup is not None:
            cgroup.kill()

    fd_out, fd_err = proc.stdout.fileno(), proc.stderr.fileno()
    sel = selectors.DefaultSelector()
    try:
        for fd in out:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        sel.register(pidfd, selectors.EVENT_READ)
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
        deadline = start + limits.wall_s
        drain_until: float | None = None
        next_cpu = start + _CPU_POLL_S if cgroup is not None else math.inf
        while True:
            pipes_open = any(fd in out for fd in sel.get_map())
            if exited and not pipes_open:
                break
            now = time.monotonic()
            if limit is None and now >= deadline:
                limit = LIMIT_WALL
                kill()
            elif limit is None and cgroup is not None and now >= next_cpu:
                next_cpu = now + _CPU_POLL_S
                used = cgroup.cpu_ms()
                if used is not None and used > limits.cpu_s * 1000:
                    limit = LIMIT_CPU
                    kill()
            if (limit is not None or exited) and drain_until is None:
                drain_until = now + _DRAIN_S
            if drain_until is not None and now >= drain_until:
                if not exited:
                    kill(hard=True)
                    drain_until = now + _DRAIN_S
                    exited = True  # stop waiting for the pidfd; wait4 below reaps it
                    continue
                break  # something still holds the pipes (or the kill is slow): stop reading
            wait = min(deadline, next_cpu, drain_until or math.inf) - now
            for key, _ in sel.select(max(wait, 0.001)):
                fd = int(key.fd)
                if fd == pidfd:
                    exited = True
                    sel.unregister(pidfd)
                elif fd in out:
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        sel.unregister(fd)
                        continue
                    buf = out[fd]
                    room = cap - len(buf)
                    if len(chunk) > room:
                        buf += chunk[:max(room, 0)]
                        truncated[fd] = True
                        if limit is None:
                            limit = LIMIT_OUTPUT
                            kill()
                    else:
                        buf += chunk
                elif proc.stdin is not None:
                    try:
                        stdin_view = stdin_view[os.write(fd, stdin_view[:65536]):]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        stdin_view = stdin_view[:0]
                    if not stdin_view:
                        sel.unregister(fd)
                        proc.stdin.close()
        # Whatever is left in the process group dies now; the zombie still reserves the
        # pgid, so this cannot hit an unrelated group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if not exited:
            kill(hard=True)
        _, status, rusage = os.wait4(proc.pid, 0)
    finally:
        sel.close()
        os.close(pidfd)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = bytes(out[fd_err])
    if proc.returncode == _LAUNCH_FAIL and stderr.startswith(_LAUNCH_MARK):
        raise BackendError(stderr.decode(errors="replace").strip())
    return Outcome(
        returncode=proc.returncode,
        stdout=bytes(out[fd_out]),
        stderr=stderr,
        stdout_truncated=truncated[fd_out],
        stderr_truncated=truncated[fd_err],
        limit=limit,
        wall_ms=(time.monotonic() - start) * 1000,
        rusage_cpu_ms=(rusage.ru_utime + rusage.ru_stime) * 1000,
    )
