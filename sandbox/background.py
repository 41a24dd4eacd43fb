"""A long-lived command in a sandbox session: a server the host talks to while it runs.

:meth:`Session.run` runs a command to completion; a service (``gymhub serve`` in the
hub's check) must instead keep running while the host drives it, and stop when the
host is done, whatever the code inside does. :class:`Background` is that process:

* it starts through the session's own launcher and wrapping (same namespaces, uid,
  rlimits, its own cgroup for memory and pids), so it is confined exactly like a call;
* its stdout is discarded and its stderr kept as a bounded tail (a reader thread drains
  the pipe, so a chatty process can neither block on a full pipe nor fill the host);
* :meth:`stop` kills the whole sandbox (the backend's soft kill ends its pid namespace,
  then the process group and the cgroup are killed), reaps it and removes the cgroup.
  The host decides when it ends; nothing inside can outlive or delay that;
* the host owns the deadline: :meth:`stop` is called in a ``finally`` (or by the
  session's close), never left to the process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Sequence

from gymhub.errors import BackendError
from gymhub.sandbox.cgroups import CallCgroup

__all__ = ["Background", "end_process"]

_TAIL_BYTES = 64 * 1024


def end_process(proc: subprocess.Popen[bytes], soft_kill: Callable[[int], bool],
                cgroup: CallCgroup | None) -> bool:
    """Kill a sandboxed launcher and everything under it, and reap it.

    Soft first (the backend ends the sandbox's pid namespace), then the process group,
    then the cgroup; a process that survives the wait is killed again and reaped. The
    cgroup is killed, not removed: the caller may still read its counters.

    Returns:
        Whether it was still running (so its status is the kill's, not its own).
    """
    running = proc.poll() is None
    if running and not soft_kill(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill()
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything that left the group meanwhile
    return running


class Background:
    """A running sandboxed command (see the module docstring).

    Args:
        argv: the full host command (launcher + wrapped command).
        cgroup: the process's own cgroup, if any (killed and removed by :meth:`stop`).
        cwd: working directory of the launcher.
        soft_kill: the backend's soft kill, given the launcher's pid.

    Raises:
        BackendError: the command could not be started.
    """

    def __init__(self, argv: Sequence[str], cgroup: CallCgroup | None, cwd: str,
                 soft_kill: Callable[[int], bool]) -> None:
        self.cgroup = cgroup
        self._soft_kill = soft_kill
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self._tail_lock = threading.Lock()
        self._stopped = False
        try:
            self.proc = subprocess.Popen(
                list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, env={}, cwd=cwd, close_fds=True,
                start_new_session=True)
        except OSError as exc:
            if cgroup is not None:
                cgroup.remove()
            raise BackendError(f"cannot start the background command: {exc}") from exc
        self._reader = threading.Thread(target=self._drain, name="gymhub-sandbox-bg",
                                        daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            with self._tail_lock:
                self._tail.append(chunk)
                self._tail_bytes += len(chunk)
                while self._tail_bytes - len(self._tail[0]) >= _TAIL_BYTES:
                    self._tail_bytes -= len(self._tail.popleft())

    @property
    def alive(self) -> bool:
        """Whether the command is still running."""
        return self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit status once it ended (negative: killed by that signal)."""
        return self.proc.poll()

    def stderr_tail(self, limit: int = 4000) -> str:
        """The last ``limit`` characters it wrote to stderr (decoded leniently)."""
        with self._tail_lock:
            data = b"".join(self._tail)
        return data.decode("utf-8", "replace")[-limit:]

    def stop(self) -> None:
        """Kill everything the command started, reap it and free its cgroup (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        end_process(self.proc, self._soft_kill, self.cgroup)
        self._reader.join(timeout=5.0)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        if self.cgroup is not None:
            self.cgroup.remove()

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
