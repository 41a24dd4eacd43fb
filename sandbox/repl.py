"""Host side of the persistent Python REPL behind :meth:`Session.run_python`.

A session's REPL is one long-lived ``python3`` inside the session's sandbox (same limits,
workdir, user, no network) running :mod:`gymhub.sandbox.repl_server`. A call costs one
round trip over a dedicated channel instead of an interpreter start.

Backends differ only in how the interpreter is started, how bytes reach it and how it is
killed: they provide a :class:`Channel`. :class:`ReplClient` does the rest, the same for
every backend:

* it starts the interpreter lazily and waits for its ``hello`` frame;
* it sends one request frame per call and reads exactly one response frame, enforcing the
  call's deadline, the cgroup CPU budget when the channel can measure it, and a size cap
  on the frame, so a hostile interpreter cannot make the host wait or allocate unbounded;
* anything unexpected (the interpreter died, the deadline passed, a malformed or forged
  frame, bytes arriving between calls) kills the interpreter and reports
  ``restarted=True`` with a reason; the next call starts a fresh one.

Failures are data: only an interpreter that cannot even start raises
:class:`~gymhub.errors.BackendError`.
"""

from __future__ import annotations

import abc
import json
import secrets
import selectors
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymhub.errors import BackendError, GymhubError, ReplProtocolError
from gymhub.sandbox.base import LIMIT_CPU, LIMIT_MEMORY, LIMIT_WALL, Limits, PythonResult

__all__ = ["Channel", "Death", "ReplClient", "send_until", "server_argv"]

_MAGIC = b"GHR1"
_HEAD = struct.Struct(">4sI")
_SUB = struct.Struct(">I")
_CPU_POLL_S = 0.05
#: How long a fresh interpreter may take to say hello (an import of site on a busy box).
START_TIMEOUT_S = 20.0
_SERVER_SOURCE: str | None = None


def server_argv(python: str, channel: str | tuple[int, int]) -> list[str]:
    """The command that starts the REPL server: ``python -I -c SOURCE FD FD`` (or ``stdio``).

    ``-I`` keeps ``PYTHON*`` variables and the user site out; the source travels in argv
    so nothing in the (writable) workdir can replace it.
    """
    global _SERVER_SOURCE
    if _SERVER_SOURCE is None:
        _SERVER_SOURCE = (Path(__file__).parent / "repl_server.py").read_text()
    args = ["stdio"] if channel == "stdio" else [str(channel[0]), str(channel[1])]
    return [python, "-I", "-c", _SERVER_SOURCE, *args]


@dataclass
class Death:
    """How an interpreter ended, as far as the backend can tell."""

    exit_code: int | None = None
    signal: int | None = None
    oom_killed: bool = False


def send_until(target: Any, write: Callable[[memoryview], int], data: bytes,
               deadline: float) -> bool:
    """Write all of ``data`` with ``write`` before ``deadline``; ``False`` if it cannot.

    Both channel kinds (a pipe, a container's socket) are non-blocking: a full buffer is
    waited out on ``target``'s writability, never spun on, and a closed peer (EPIPE) or
    the deadline ends the write as a dead interpreter rather than an exception.
    """
    view = memoryview(data)
    with selectors.DefaultSelector() as sel:
        sel.register(target, selectors.EVENT_WRITE)
        while view:
            try:
                view = view[write(view):]
                continue
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # EPIPE: the interpreter closed its end or died
                return False
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return False
    return True


class Channel(abc.ABC):
    """One started interpreter, as a backend provides it."""

    @abc.abstractmethod
    def send(self, data: bytes, deadline: float) -> bool:
        """Write a request; False when the interpreter is gone or the deadline passed."""

    @abc.abstractmethod
    def recv(self, deadline: float) -> bytes | None:
        """Next bytes from the interpreter; ``b""`` at its end, None at the deadline."""

    @abc.abstractmethod
    def pending(self) -> bool:
        """Whether bytes (or the end) are waiting right now; used between calls."""

    @abc.abstractmethod
    def kill(self) -> Death:
        """Kill the interpreter and everything it started; idempotent."""

    def cpu_ms(self) -> float | None:
        """CPU time used so far by the interpreter and its children, if measurable."""
        return None

    def diagnostics(self) -> bytes:
        """What the interpreter wrote before it was ready (for a failed start)."""
        return b""


class ReplClient:
    """Drives one session's REPL across restarts (see the module docstring).

    Args:
        start: makes a fresh :class:`Channel` (a new interpreter in the sandbox).
        limits: the session's limits (deadline, CPU budget, output cap).
        backend: backend name reported in results.
    """

    def __init__(self, start: Any, limits: Limits, backend: str) -> None:
        self._start = start
        self.limits = limits
        self.backend = backend
        self.channel: Channel | None = None
        self.info: dict[str, Any] = {}
        self._buf = bytearray()

    # -- lifecycle ---------------------------------------------------------------------
    def _launch(self) -> None:
        channel: Channel = self._start()
        self.channel = channel
        self._buf.clear()
        try:
            hello = self._read_frame(time.monotonic() + START_TIMEOUT_S, 1 << 16)
        except (ReplProtocolError, TimeoutError, EOFError) as exc:
            diag = channel.diagnostics().decode(errors="replace").strip()
            self.kill()
            raise BackendError(f"the Python REPL did not start ({exc}): {diag[-2000:]}") from exc
        header = hello[0]
        if header.get("id") != "hello":
            self.kill()
            raise BackendError("the Python REPL did not start: unexpected first frame")
        self.info = header

    def kill(self) -> Death:
        """Kill the current interpreter (if any); the next call starts a fresh one."""
        channel, self.channel = self.channel, None
        self.info = {}
        self._buf.clear()
        return channel.kill() if channel is not None else Death()

    @property
    def sid(self) -> int | None:
        """Session id of the live interpreter inside the sandbox (None when not running)."""
        sid = self.info.get("sid")
        return sid if self.channel is not None and isinstance(sid, int) else None

    # -- frames ------------------------------------------------------------------------
    def _read_frame(self, deadline: float, max_size: int,
                    cpu_check: Any = None) -> tuple[dict[str, Any], bytes, bytes]:
        assert self.channel is not None
        need = _HEAD.size
        size: int | None = None
        while True:
            if size is None and len(self._buf) >= _HEAD.size:
                magic, size = _HEAD.unpack(bytes(self._buf[:_HEAD.size]))
                if magic != _MAGIC:
                    raise ReplProtocolError("bad frame marker")
                if size > max_size or size < _SUB.size:
                    raise ReplProtocolError(f"frame of {size} bytes")
                need = _HEAD.size + size
            if len(self._buf) >= need and size is not None:
                break
            step = deadline if cpu_check is None else min(deadline,
                                                            time.monotonic() + _CPU_POLL_S)
            chunk = self.channel.recv(step)
            if chunk == b"":
                raise EOFError("the interpreter ended")
            if chunk is None:
                if time.monotonic() >= deadline:
                    raise TimeoutError("deadline")
                if cpu_check is not None:
                    cpu_check()
                continue
            self._buf += chunk
        body = bytes(self._buf[_HEAD.size:need])
        del self._buf[:need]
        (head_len,) = _SUB.unpack(body[:_SUB.size])
        try:
            header = json.loads(body[_SUB.size:_SUB.size + head_len])
        except ValueError as exc:
            raise ReplProtocolError("unreadable frame header") from exc
        if not isinstance(header, dict):
            raise ReplProtocolError("unreadable frame header")
        rest = body[_SUB.size + head_len:]
        try:
            n_out, n_err = int(header.get("stdout_len", 0)), int(header.get("stderr_len", 0))
        except (TypeError, ValueError) as exc:
            raise ReplProtocolError("bad lengths") from exc
        if n_out < 0 or n_err < 0 or n_out + n_err != len(rest):
            raise ReplProtocolError("lengths do not match the frame")
        return header, rest[:n_out], rest[n_out:]

    # -- one call ----------------------------------------------------------------------
    def run(self, code: str, timeout: float | None) -> PythonResult:
        """Run ``code`` in the REPL; see :meth:`Session.run_python`."""
        start = time.monotonic()
        lim = self.limits
        stale: str | None = None
        if self.channel is not None and (self._buf or self.channel.pending()):
            # Bytes after the last answer mean the code wrote to the channel (a forged
            # frame got through once): the interpreter is not trusted to serve again.
            death = self.kill()
            stale = ("the interpreter had died since the previous call" + _death_text(death)
                     + "; this call ran in a fresh one")
        if self.channel is None:
            self._launch()
        assert self.channel is not None
        channel = self.channel
        wall = timeout if timeout is not None else lim.wall_s
        deadline = time.monotonic() + wall
        request_id = secrets.token_hex(8)
        payload = json.dumps({"id": request_id, "code": code, "cap": lim.output_bytes}).encode()
        cpu0 = channel.cpu_ms()
        budget = lim.cpu_s * 1000

        def cpu_check() -> None:
            used = channel.cpu_ms()
            if used is not None and cpu0 is not None and used - cpu0 > budget:
                raise _CpuExceeded

        try:
            if not channel.send(_HEAD.pack(_MAGIC, len(payload)) + payload, deadline):
                raise EOFError("the interpreter stopped reading")
            max_size = 2 * lim.output_bytes + lim.output_bytes + (1 << 16)
            header, out, err = self._read_frame(deadline, max_size,
                                                cpu_check if cpu0 is not None else None)
            if header.get("id") != request_id:
                raise ReplProtocolError("a frame that does not answer this call")
        except TimeoutError:
            return self._failed(start, f"timed out after {wall:.3g} s", LIMIT_WALL, cpu0)
        except _CpuExceeded:
            return self._failed(start, f"CPU time limit of {lim.cpu_s:.3g} s exceeded",
                                LIMIT_CPU, cpu0)
        except EOFError:
            return self._failed(start, "the interpreter died", None, cpu0)
        except ReplProtocolError as exc:
            return self._failed(start, f"protocol violation ({exc}); the code wrote to the "
                                "REPL's channel", None, cpu0)
        cpu = channel.cpu_ms()
        cpu_ms = cpu - cpu0 if cpu is not None and cpu0 is not None else \
            float(header.get("cpu_ms") or 0.0)
        exit_code = header.get("exit_code")
        value = header.get("value")
        exception = header.get("exception")
        return PythonResult(
            exit_code=exit_code if isinstance(exit_code, int) else 1,
            stdout=out, stderr=err,
            stdout_truncated=_int(header.get("stdout_total")) > len(out),
            stderr_truncated=_int(header.get("stderr_total")) > len(err),
            wall_ms=(time.monotonic() - start) * 1000, cpu_ms=cpu_ms, backend=self.backend,
            restarted=stale is not None, restart_reason=stale,
            value=value if isinstance(value, str) else None,
            exception=exception if isinstance(exception, str) else None,
        )

    def _failed(self, start: float, reason: str, limit: str | None,
                cpu0: float | None) -> PythonResult:
        channel = self.channel
        cpu = channel.cpu_ms() if channel is not None else None
        death = self.kill()
        if limit is None and death.oom_killed:
            limit = LIMIT_MEMORY
            reason = "out of memory: the interpreter was killed"
        elif limit is None:
            reason += _death_text(death)
        killed = limit is not None or death.signal is not None or death.exit_code is None
        return PythonResult(
            exit_code=None if killed else death.exit_code,
            signal=(death.signal or 9) if killed else None,
            timed_out=limit in (LIMIT_WALL, LIMIT_CPU), oom_killed=death.oom_killed,
            limit=limit, wall_ms=(time.monotonic() - start) * 1000,
            cpu_ms=cpu - cpu0 if cpu is not None and cpu0 is not None else 0.0,
            backend=self.backend, restarted=True,
            restart_reason=reason + "; the next call starts a fresh interpreter",
        )


class _CpuExceeded(GymhubError):
    pass


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _death_text(death: Death) -> str:
    if death.oom_killed:
        return " (out of memory)"
    if death.signal is not None:
        return f" (signal {death.signal})"
    if death.exit_code is not None:
        return f" (exit status {death.exit_code})"
    return ""
