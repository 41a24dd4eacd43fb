"""One thread for all of a run's torch work: generation runs where the update runs.

Why: the rollout's episodes live on an event loop in a background thread, and the
engine used to generate in a worker thread of that loop while the update ran in the
caller's thread. On a CPU, torch parallelises an operator with OpenMP, and each thread
that enters a parallel region gets a team of OpenMP threads of its own. Once two
threads of one process have teams, every parallel region in it gets slower, on both
threads and for good: on this project's 2-core VMs (2026-12-03, torch 2.13.0) the tiny
test Llama's GRPO step took 2.3x the time with the engine on the loop's pool
(``bench_grpo_step.py --compare-threads``; README, "Learner"). Keeping every parallel
region on one thread avoids it without touching torch's thread count.

The one team busy-waits between operators, which is what makes it fast, and also what
makes it slow where its threads do not have the cores to themselves: with another
2-thread training on the same 2 cores, the tiny model's step took 2.6x the time of the
two-team way (``bench_grpo_step.py --compare-threads``, 2026-12-03). Runs that share a
machine should split its cores (``OMP_NUM_THREADS``), as OpenMP programs always should.

:class:`CallerExecutor` is a ``concurrent.futures.Executor`` whose calls run on the
thread that waits for a result in :meth:`CallerExecutor.run_until`: the trainer's
thread, which loaded the model and runs the update. The rollout hands engine calls to
it (``loop.run_in_executor``) instead of to the loop's default thread pool.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

__all__ = ["CallerExecutor"]

T = TypeVar("T")
_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class CallerExecutor(Executor):
    """Runs submitted calls on whichever thread is waiting in :meth:`run_until`.

    Calls are run one at a time, in the order submitted. A call submitted while no
    thread waits runs when one next does; one whose future was cancelled meanwhile
    (its awaiting task was cancelled) is skipped.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._shutdown = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Queue ``fn(*args, **kwargs)`` for the waiting thread."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to a CallerExecutor after shutdown")
            fut: Future[T] = Future()
            self._queue.put((fut, fn, args, kwargs))
        return fut

    def run_until(self, done: Future[Any]) -> None:
        """Run queued calls on this thread until ``done`` is done.

        An exception a call raises goes to its future; a ``BaseException`` that is not
        an ``Exception`` (a ``KeyboardInterrupt``) also propagates here, so the caller
        stops at once.
        """
        done.add_done_callback(lambda _: self._queue.put(None))  # wakes the wait below
        while not done.done():
            item = self._queue.get()
            if item is not None:
                self._call(item)

    @staticmethod
    def _call(item: _Item) -> None:
        fut, fn, args, kwargs = item
        if not fut.set_running_or_notify_cancel():
            return
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            fut.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new calls; cancel those still queued (nothing waits to run them)."""
        with self._lock:
            self._shutdown = True
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item[0].cancel()
