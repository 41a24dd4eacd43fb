"""An event loop on a background thread, for blocking code that drives async clients.

Connections, semaphores and futures belong to one event loop. Blocking code that
called ``asyncio.run`` per call (or per training step) therefore rebuilt its
connection pool every time and paid a handshake per connection per call. A
:class:`LoopThread` keeps one loop alive for as long as its owner (a
:class:`~gymhub.client.EnvClient`, a training run) and runs coroutines on it from any
thread, including one that already runs a loop of its own (a notebook), where
``asyncio.run`` would refuse.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """One event loop running on a daemon thread until :meth:`close`.

    Args:
        name: the thread's name (shows in stack dumps).
    """

    def __init__(self, name: str = "gymhub-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._closed = False
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, for code that schedules on it directly."""
        return self._loop

    @property
    def closed(self) -> bool:
        """:meth:`close` was called."""
        return self._closed

    def run(
        self, coro: Coroutine[Any, Any, T], wait: Callable[[Future[T]], None] | None = None
    ) -> T:
        """Run ``coro`` on the loop and block until it returns (or raises).

        ``wait``, when given, is called with the coroutine's future and returns once it
        is done; the calling thread can do work for the coroutine meanwhile (the
        trainer runs its engine calls so, see ``gymhub.trainer.compute_thread``).

        Raises:
            RuntimeError: the loop was closed, or this is called from the loop's own
                thread (it would wait for itself forever).
        """
        if self._closed:
            coro.close()
            raise RuntimeError("this LoopThread is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LoopThread.run called from its own loop; await instead")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            if wait is not None:
                wait(future)
            return future.result()
        except BaseException:
            future.cancel()  # a KeyboardInterrupt in the caller must not leave it running
            raise

    def close(self) -> None:
        """Cancel what still runs, stop the loop and join its thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()

    async def _shutdown(self) -> None:
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._loop.shutdown_asyncgens()

    def __enter__(self) -> LoopThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
