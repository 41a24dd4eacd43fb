"""A small pool of killable worker processes for ``math_equiv`` (see :mod:`.math_worker`).

Why processes and not threads: SymPy can run for ever on a hostile answer, and only a
process can be stopped at a deadline. Why a *persistent* pool: a worker's start (an
interpreter plus SymPy and math-verify) costs about a second, a warm request a few
milliseconds. Workers start lazily, one per concurrent caller up to ``size``, and are
reused; a worker that misses its deadline is killed, reaped and replaced in the
background; one that dies is reaped, and the next request that needs one starts it.

The host side only does pipe I/O with ``select``, so it works from any thread (the
reason math-verify cannot be called in-process from a server's worker threads). The
pool is per process: after a ``fork`` the child builds its own instead of sharing the
parent's pipes. :func:`shutdown` runs at interpreter exit; a worker whose host dies
anyway exits by itself (stdin closes, and a watchdog notices the new parent).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gymhub.errors import GymhubError

__all__ = ["MathPool", "WorkerFailed", "WorkerTimeout", "pool", "shutdown"]

_WORKER = Path(__file__).with_name("math_worker.py")
#: Seconds a fresh worker may take to import SymPy and math-verify and say "ready".
STARTUP_TIMEOUT_S = 60.0
#: Default address-space limit of a worker (MiB); math-verify needs about 200.
DEFAULT_MEMORY_MB = 2048


class WorkerFailed(GymhubError):
    """A worker could not start, died, or broke the protocol: the judge failed."""


class WorkerTimeout(WorkerFailed):
    """A worker missed its deadline and was killed."""


class _Worker:
    """One worker process and its line-buffered reply channel."""

    def __init__(self, memory_mb: int) -> None:
        self.started = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-P", str(_WORKER), str(memory_mb)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                close_fds=True)
        except OSError as exc:
            raise WorkerFailed(f"cannot start a math worker: {exc}") from exc
        self._buf = b""
        try:
            hello = self.read(time.monotonic() + STARTUP_TIMEOUT_S)
        except WorkerFailed as exc:
            self.kill()
            raise WorkerFailed(f"math worker did not start: {exc}") from exc
        if hello.get("status") != "ready":
            self.kill()
            raise WorkerFailed(f"math worker did not start: {hello.get('message', hello)}")

    @property
    def pid(self) -> int:
        """The worker's process id."""
        return self.proc.pid

    def send(self, request: dict[str, Any]) -> None:
        """Write one request line (raises :class:`WorkerFailed` if the worker is gone)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerFailed(f"math worker {self.pid} is gone: {exc}") from exc

    def read(self, deadline: float) -> dict[str, Any]:
        """One reply line, waiting no later than ``deadline`` (``time.monotonic``)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerTimeout("math worker missed its deadline")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                code = self.proc.poll()
                raise WorkerFailed(f"math worker {self.pid} died (exit status {code})")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError as exc:
            raise WorkerFailed(f"math worker sent a malformed reply: {line[:80]!r}") from exc
        if not isinstance(reply, dict):
            raise WorkerFailed(f"math worker sent a malformed reply: {line[:80]!r}")
        return reply

    def kill(self) -> None:
        """Stop the process now and reap it (no zombie is left behind)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def close(self, grace_s: float = 1.0) -> None:
        """Ask the worker to exit (stdin EOF); kill it if it does not within ``grace_s``."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=grace_s)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class MathPool:
    """Up to ``size`` warm workers shared by every ``math_equiv`` verifier of the process.

    Args:
        size: most workers alive at once (and so most requests in flight).
        memory_mb: address-space limit of each worker (0: none).
    """

    def __init__(self, size: int = 2, memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        if size < 1:
            raise ValueError("a math pool needs at least one worker")
        self.size = size
        self.memory_mb = memory_mb
        self.pid = os.getpid()
        self._idle: list[_Worker] = []
        self._alive = 0
        self._closed = False
        self._cond = threading.Condition()
        #: Counters for tests and benchmarks: workers started, killed at a deadline.
        self.started = 0
        self.killed = 0

    def pids(self) -> list[int]:
        """Process ids of the idle workers (busy ones are held by their callers)."""
        with self._cond:
            return [w.pid for w in self._idle]

    def _acquire(self) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise WorkerFailed("the math worker pool is shut down")
                while self._idle:
                    worker = self._idle.pop()
                    if worker.proc.poll() is None:
                        return worker
                    worker.kill()  # died while idle (OOM killer, a stray signal): not this
                    self._alive -= 1  # request's fault, so it gets a fresh worker instead
                if self._alive < self.size:
                    self._alive += 1
                    break
                self._cond.wait()
        try:  # start outside the lock: other callers keep using the warm workers
            worker = _Worker(self.memory_mb)
        except BaseException:
            self._forget()
            raise
        with self._cond:
            self.started += 1
        return worker

    def _forget(self) -> None:
        with self._cond:
            self._alive -= 1
            self._cond.notify()

    def _release(self, worker: _Worker) -> None:
        with self._cond:
            if not self._closed:
                self._idle.append(worker)
                self._cond.notify()
                return
        worker.close()
        self._forget()

    def request(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request to a worker and return its reply.

        Raises:
            WorkerTimeout: no reply within ``timeout_s`` (the worker was killed).
            WorkerFailed: the worker could not start, died or broke the protocol.
        """
        worker = self._acquire()
        try:
            worker.send(payload)
            reply = worker.read(time.monotonic() + timeout_s)
        except WorkerTimeout:
            worker.kill()
            with self._cond:
                self.killed += 1
            self._forget()
            self._replace_soon()
            raise WorkerTimeout(
                f"no answer within {timeout_s:g} s; the worker was killed") from None
        except BaseException:
            worker.kill()
            self._forget()
            raise
        self._release(worker)
        return reply

    def _replace_soon(self) -> None:
        """Start a worker in the background for the one just killed.

        Runaway answers come in bursts during training; without this, the request after
        each kill would wait for a cold start (about a second) instead of the deadline
        alone. A replacement that cannot start is dropped: the next request starts one
        itself and reports the failure.
        """
        with self._cond:
            if self._closed or self._alive >= self.size:
                return
            self._alive += 1

        def start() -> None:
            try:
                worker = _Worker(self.memory_mb)
            except Exception:
                self._forget()
                return
            with self._cond:
                self.started += 1
            self._release(worker)

        threading.Thread(target=start, name="math-worker-replace", daemon=True).start()

    def warm(self, n: int | None = None) -> None:
        """Start workers now (up to ``n``, default ``size``) so the first requests are warm."""
        workers = [self._acquire() for _ in range(min(n or self.size, self.size))]
        for w in workers:
            self._release(w)

    def shutdown(self) -> None:
        """Close every idle worker; busy ones are closed when their request ends."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
        for w in idle:
            w.close()
            self._forget()


_lock = threading.Lock()
_pool: MathPool | None = None


def pool() -> MathPool:
    """The process-wide pool (a fresh one after ``fork`` or :func:`shutdown`).

    Its size is ``$GYMHUB_MATH_WORKERS`` (default 2).
    """
    global _pool
    with _lock:
        if _pool is None or _pool.pid != os.getpid() or _pool._closed:
            _pool = MathPool(size=_size_from_env())
        return _pool


def _size_from_env() -> int:
    raw = os.environ.get("GYMHUB_MATH_WORKERS", "").strip()
    try:
        return max(1, int(raw)) if raw else 2
    except ValueError:
        raise WorkerFailed(f"GYMHUB_MATH_WORKERS must be a whole number, got {raw!r}") from None


def shutdown() -> None:
    """Stop the process-wide pool's workers (run at interpreter exit)."""
    global _pool
    with _lock:
        current, _pool = _pool, None
    if current is not None and current.pid == os.getpid():
        current.shutdown()


atexit.register(shutdown)
