"""The bounded thread pool that runs blocking environment code, with deadlines.

Environment code (database copies, sandbox calls, plain Python) blocks; running it on
the event loop would stall every other episode. It runs here instead, in a fixed
number of threads, and each call has a deadline. A thread cannot be interrupted, so
when a call overruns, the caller gets :class:`~gymhub.server.errors.DeadlineExceeded`
at once and the environment is closed as soon as the stuck call returns, which still
releases its resources. In-flight calls are counted so that a drain can wait for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from .errors import DeadlineExceeded, ServerDraining

__all__ = ["Closable", "Workers", "close_quietly"]

log = logging.getLogger("gymhub.server")
T = TypeVar("T")


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
        self._executor: ThreadPoolExecutor | None = None

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`shutdown`."""
        return self._executor is not None

    def start(self) -> None:
        """Create the threads' pool (idempotent)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="gymhub-env")

    async def run(self, fn: Callable[[], T], *, on_timeout: Closable | None = None,
                  on_cancel: Closable | None = None) -> T:
        """Run ``fn`` in the pool under the deadline.

        The hop is built from the cheapest parts asyncio has: one loop future, one
        thread-safe callback when the work finishes and one timer for the deadline
        (``wait_for`` + ``shield`` + ``wrap_future`` cost three futures and a task per
        call, which for a trivial step was more than the step itself).

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
        if self._executor is None:
            self.start()
        assert self._executor is not None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        cfut = self._executor.submit(fn)
        cfut.add_done_callback(functools.partial(_post, loop, fut))
        timer = loop.call_later(self.timeout_s, _expire, fut)
        self.inflight += 1
        self._idle.clear()
        try:
            return await fut
        except DeadlineExceeded:
            cfut.cancel()
            if on_timeout is not None:
                target = on_timeout
                cfut.add_done_callback(lambda _f: close_quietly(target))
            raise DeadlineExceeded(
                f"the environment did not answer within {self.timeout_s:g} s; "
                "the episode was closed") from None
        except asyncio.CancelledError:
            cfut.cancel()  # nobody waits for it: do not start it
            if on_cancel is not None:
                owned = on_cancel
                cfut.add_done_callback(lambda _f: close_quietly(owned))
            raise
        finally:
            timer.cancel()
            self.inflight -= 1
            if self.inflight == 0:
                self._idle.set()

    def close_later(self, env: Closable) -> None:
        """Close ``env`` in the pool (or right here once the pool is gone)."""
        if self._executor is not None:
            try:
                self._executor.submit(close_quietly, env)
                return
            except RuntimeError:  # shut down meanwhile
                pass
        close_quietly(env)

    async def wait_idle(self, timeout_s: float) -> None:
        """Wait until no call is in flight, at most ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_s)

    async def close_all(self, envs: list[Closable]) -> None:
        """Close many environments concurrently in the pool."""
        if self._executor is None:
            for env in envs:
                close_quietly(env)
            return
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._executor, close_quietly, e)
                               for e in envs))

    def shutdown(self) -> None:
        """Stop the threads; queued work is cancelled, running work finishes on its own."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _post(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[T], done: Future[T]) -> None:
    """In the worker thread: hand the outcome to the loop (unless the loop is gone)."""
    with contextlib.suppress(RuntimeError):  # the loop closed while a stuck call ran
        loop.call_soon_threadsafe(_settle, fut, done)


def _settle(fut: asyncio.Future[T], done: Future[T]) -> None:
    """Copy a finished pool call's outcome into the loop's future (on the loop)."""
    if fut.done():  # the deadline passed, or the awaiting request was cancelled
        return
    if done.cancelled():
        # Only shutdown(cancel_futures=True) cancels a queued call (a cancelled caller
        # settled ``fut`` first). Cancelling ``fut`` would cancel the request's task, and
        # a CancelledError gets past every ``except Exception``: the client would see a
        # dropped connection instead of a typed, retryable 503.
        fut.set_exception(ServerDraining("the server shut down before this call ran"))
        return
    exc = done.exception()
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(done.result())


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(DeadlineExceeded("deadline"))
