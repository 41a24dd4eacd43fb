"""The bounded thread pool that runs blocking environment code, with deadlines.

Environment code (database copies, sandbox calls, plain Python) blocks; running it on
the event loop would stall every other episode. It runs here instead, in a fixed
number of threads, and each call has a deadline. A thread cannot be interrupted, so
when a call overruns, the caller gets :class:`~gymhub.errors.DeadlineExceeded`
at once and the environment is closed as soon as the stuck call returns, which still
releases its resources. In-flight calls are counted so that a drain can wait for them.

Why not :class:`concurrent.futures.ThreadPoolExecutor`: for a trivial step the hop
itself was the step's largest cost. Each executor call builds a future with its own
condition variable and wakes the event loop through its self-pipe once per call; at
hundreds of concurrent episodes the loop thread spent more time on those wake-ups
(and on re-taking the GIL after each) than on the requests. Here a call is one small
record on a :class:`queue.SimpleQueue`, and finished calls are handed back in bursts:
a worker wakes the loop only when the list of finished calls was empty, and the loop
settles everything on that list in one callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from gymhub.errors import DeadlineExceeded, ServerDraining

__all__ = ["Closable", "Workers", "close_quietly"]

log = logging.getLogger("gymhub.server")
T = TypeVar("T")

_QUEUED, _RUNNING, _DONE, _DROPPED = range(4)


class Closable(Protocol):
    """Anything with ``close()`` (an environment)."""

    def close(self) -> None:
        """Release resources."""


def close_quietly(env: Closable) -> None:
    """Close ``env``, logging (not raising) a failure: one bad close must not stop others."""
    try:
        env.close()
    except Exception:
        log.exception("closing an environment failed")


class _Call:
    """One unit of work: its function, the loop future that waits for it, its state."""

    __slots__ = ("fn", "fut", "loop", "owned", "state")

    def __init__(self, fn: Callable[[], Any], fut: asyncio.Future[Any] | None,
                 loop: asyncio.AbstractEventLoop | None) -> None:
        self.fn = fn
        self.fut = fut
        self.loop = loop
        self.state = _QUEUED
        self.owned: Closable | None = None  # closed by the worker once ``fn`` returns


class Workers:
    """A fixed-size thread pool with per-call deadlines and in-flight accounting.

    Args:
        size: threads.
        timeout_s: deadline of one call, queueing included (an overloaded server
            answers 504 rather than letting latency grow without bound).
    """

    def __init__(self, size: int, timeout_s: float) -> None:
        self.size = size
        self.timeout_s = timeout_s
        self.inflight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._queue: queue.SimpleQueue[_Call | None] | None = None
        self._threads: list[threading.Thread] = []
        self._mu = threading.Lock()  # guards call states and the finished list
        # Finished calls not yet handed to their loop, per loop (one in practice).
        self._finished: dict[asyncio.AbstractEventLoop, list[tuple[_Call, bool, Any]]] = {}

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`shutdown`."""
        return self._queue is not None

    def start(self) -> None:
        """Start the threads (idempotent).

        They are daemon threads: a call stuck in environment code must not keep the
        process alive after shutdown (the drain already waited for what could finish).
        """
        if self._queue is not None:
            return
        q: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._queue = q
        self._threads = [threading.Thread(target=self._work, args=(q,), daemon=True,
                                          name=f"gymhub-env_{i}") for i in range(self.size)]
        for t in self._threads:
            t.start()

    async def run(self, fn: Callable[[], T], *, on_timeout: Closable | None = None,
                  on_cancel: Closable | None = None) -> T:
        """Run ``fn`` in the pool under the deadline.

        Args:
            fn: the blocking work.
            on_timeout: closed once a call that overran its deadline finally returns.
            on_cancel: closed once the call returns (at once if it had not started) when
                the awaiting task is cancelled: what a cancelled creation took or built
                would otherwise belong to nobody. Closing waits for the call, because
                closing an environment under a running reset is not safe.

        Raises:
            DeadlineExceeded: the call did not finish in time.
            ServerDraining: the pool was shut down before the call started.
        """
        if self._queue is None:
            self.start()
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        call = _Call(fn, fut, loop)
        self._queue.put(call)
        timer = loop.call_later(self.timeout_s, _expire, fut)
        self.inflight += 1
        self._idle.clear()
        try:
            return await fut
        except DeadlineExceeded:
            self._drop(call, on_timeout)
            raise DeadlineExceeded(
                f"the environment did not answer within {self.timeout_s:g} s; "
                "the episode was closed") from None
        except asyncio.CancelledError:
            self._drop(call, on_cancel)  # nobody waits for it: do not start it
            raise
        finally:
            timer.cancel()
            self.inflight -= 1
            if self.inflight == 0:
                self._idle.set()

    def close_later(self, env: Closable) -> None:
        """Close ``env`` in the pool (or right here once the pool is gone)."""
        self.detach(functools.partial(close_quietly, env))

    def detach(self, fn: Callable[[], None], *, then: Callable[[], None] | None = None,
               otherwise: Callable[[], None] | None = None) -> None:
        """Run ``fn`` in the pool without waiting for it (right here once the pool is gone).

        Args:
            fn: the blocking work.
            then: called on the running event loop if ``fn`` returned.
            otherwise: called on the running event loop if ``fn`` raised (logged).
        """
        loop = asyncio.get_running_loop() if then or otherwise else None

        def work() -> None:
            try:
                fn()
                after = then
            except Exception:
                log.exception("background work in the pool failed")
                after = otherwise
            if loop is not None and after is not None:
                with contextlib.suppress(RuntimeError):  # the loop is gone: drop it
                    loop.call_soon_threadsafe(after)

        if self._queue is not None:
            self._queue.put(_Call(work, None, None))
            return
        work()

    async def wait_idle(self, timeout_s: float) -> None:
        """Wait until no call is in flight, at most ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_s)

    async def close_all(self, envs: list[Closable], timeout_s: float | None = None) -> int:
        """Close many environments concurrently in the pool; how many did not finish.

        ``timeout_s`` bounds the wait: a close stuck in environment code must not hold
        a shutdown forever (the threads are daemons; the process can still exit).
        """
        if self._queue is None:
            for env in envs:
                close_quietly(env)
            return 0
        loop = asyncio.get_running_loop()
        futs: list[asyncio.Future[Any]] = []
        for env in envs:
            fut: asyncio.Future[Any] = loop.create_future()
            self._queue.put(_Call(functools.partial(close_quietly, env), fut, loop))
            futs.append(fut)
        if not futs:
            return 0
        _done, pending = await asyncio.wait(futs, timeout=timeout_s)
        if pending:
            log.warning("%d environment close(s) still running after %.0f s; not waiting",
                        len(pending), timeout_s or 0)
        return len(pending)

    def shutdown(self) -> None:
        """Stop the threads; queued work is refused, running work finishes on its own."""
        q, self._queue = self._queue, None
        if q is None:
            return
        while True:
            try:
                call = q.get_nowait()
            except queue.Empty:
                break
            if call is None:
                continue
            with self._mu:
                queued = call.state == _QUEUED
                call.state = _DROPPED
            if queued and call.fut is not None and call.loop is not None:
                # A typed, retryable 503 for the caller; cancelling its future would
                # cancel the request's task and drop the connection instead.
                _post_one(call.loop, call.fut, False,
                          ServerDraining("the server shut down before this call ran"))
        for _ in self._threads:
            q.put(None)
        self._threads = []

    # ----------------------------------------------------------------- internals
    def _drop(self, call: _Call, owned: Closable | None) -> None:
        """The caller gave up on ``call``: skip it if queued; close ``owned`` after it.

        A call that never started has nothing running under ``owned``, so it is closed
        at once, in the pool (a slow close must not block the event loop).
        """
        with self._mu:
            state = call.state
            if state == _QUEUED:
                call.state = _DROPPED
            elif state == _RUNNING and owned is not None:
                call.owned = owned
                return
        if owned is not None:
            self.close_later(owned)

    def _work(self, q: queue.SimpleQueue[_Call | None]) -> None:
        while True:
            call = q.get()
            if call is None:
                return
            with self._mu:
                if call.state != _QUEUED:
                    continue
                call.state = _RUNNING
            try:
                value, ok = call.fn(), True
            except StopIteration as exc:  # a future cannot hold one; keep its meaning
                value, ok = RuntimeError(f"environment code raised StopIteration: {exc!r}"), False
            except BaseException as exc:  # handed to the awaiting caller, like a future
                value, ok = exc, False
            with self._mu:
                call.state = _DONE
                owned, call.owned = call.owned, None
            if owned is not None:
                close_quietly(owned)
            if call.fut is not None and call.loop is not None:
                self._hand_back(call, ok, value)

    def _hand_back(self, call: _Call, ok: bool, value: Any) -> None:
        """In a worker: queue the outcome; wake the loop only if nothing was queued."""
        loop = call.loop
        assert loop is not None
        with self._mu:
            batch = self._finished.setdefault(loop, [])
            batch.append((call, ok, value))
            first = len(batch) == 1
        if first:
            try:
                loop.call_soon_threadsafe(self._settle, loop)
            except RuntimeError:  # the loop closed while the call ran: nobody waits
                with self._mu:
                    self._finished.pop(loop, None)

    def _settle(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop``: copy every finished call's outcome into its future."""
        with self._mu:
            done = self._finished.pop(loop, [])
        for call, ok, value in done:
            try:
                _set(call.fut, ok, value)
            except Exception:  # one outcome a future refuses must not strand the rest
                log.exception("could not hand a worker result back")
                if call.fut is not None and not call.fut.done():
                    call.fut.set_exception(RuntimeError("the worker's outcome was unusable"))


def _post_one(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any] | None, ok: bool,
              value: Any) -> None:
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_set, fut, ok, value)


def _set(fut: asyncio.Future[Any] | None, ok: bool, value: Any) -> None:
    if fut is None or fut.done():  # the deadline passed, or the caller was cancelled
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(DeadlineExceeded("deadline"))
