"""The worker pool: deadlines, cancellation, bursts, odd outcomes and shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from gymhub.errors import DeadlineExceeded, ServerDraining
from gymhub.server.workers import Workers

from .conftest import run, until


class Box:
    """A closable thing that records when (and in which thread) it was closed."""

    def __init__(self) -> None:
        self.closed_at: float | None = None

    def close(self) -> None:
        self.closed_at = time.monotonic()


def test_a_burst_of_calls_all_come_back_with_their_own_results() -> None:
    async def body() -> None:
        pool = Workers(4, timeout_s=5)
        results = await asyncio.gather(*(pool.run(lambda k=k: k * k) for k in range(2000)))
        assert results == [k * k for k in range(2000)]
        assert pool.inflight == 0
        pool.shutdown()

    run(body)


def test_odd_outcomes_reach_their_caller_and_spare_the_rest() -> None:
    def stop() -> None:
        raise StopIteration("empty")  # a future cannot hold this one

    def boom() -> None:
        raise KeyError("k")

    async def body() -> None:
        pool = Workers(2, timeout_s=5)
        outcomes = await asyncio.gather(pool.run(stop), pool.run(boom),
                                        *(pool.run(lambda k=k: k) for k in range(50)),
                                        return_exceptions=True)
        assert isinstance(outcomes[0], RuntimeError) and "StopIteration" in str(outcomes[0])
        assert isinstance(outcomes[1], KeyError)
        assert outcomes[2:] == list(range(50))
        pool.shutdown()

    run(body)


def test_deadline_answers_at_once_and_closes_after_the_call_returns() -> None:
    async def body() -> None:
        pool = Workers(1, timeout_s=0.1)
        box = Box()
        release = threading.Event()
        with pytest.raises(DeadlineExceeded):  # the call is still blocked: answered at once
            await pool.run(lambda: release.wait(30), on_timeout=box)
        assert box.closed_at is None  # not while the stuck call runs
        release.set()
        await until(lambda: box.closed_at is not None, what="the close after the call returned")
        pool.shutdown()

    run(body)


def test_a_cancelled_caller_never_starts_a_queued_call_and_closes_what_it_owned() -> None:
    async def body() -> None:
        pool = Workers(1, timeout_s=30)
        started: list[str] = []
        running = threading.Event()
        gate = threading.Event()

        def first() -> bool:
            started.append("a")
            running.set()
            return gate.wait(30)

        busy = asyncio.ensure_future(pool.run(first))
        box = Box()
        queued = asyncio.ensure_future(pool.run(lambda: started.append("b"), on_cancel=box))
        assert await asyncio.to_thread(running.wait, 30)  # the only thread is taken
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert box.closed_at is None  # closed in the pool, which is still busy
        gate.set()
        assert await busy is True
        await pool.run(lambda: None)  # the queue has moved past the dropped call
        assert started == ["a"]
        assert box.closed_at is not None  # never started, so closed without waiting on it
        pool.shutdown()

    run(body)


def test_a_cancelled_caller_of_a_running_call_closes_its_thing_when_the_call_ends() -> None:
    async def body() -> None:
        pool = Workers(1, timeout_s=30)
        running = threading.Event()
        gate = threading.Event()
        box = Box()

        def blocked() -> bool:
            running.set()
            return gate.wait(30)

        call = asyncio.ensure_future(pool.run(blocked, on_cancel=box))
        assert await asyncio.to_thread(running.wait, 30)  # now running
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert box.closed_at is None  # closing under a running call is not safe
        gate.set()
        await until(lambda: box.closed_at is not None, what="the close after the call ended")
        pool.shutdown()

    run(body)


def test_shutdown_answers_queued_calls_with_a_retryable_503() -> None:
    async def body() -> None:
        pool = Workers(1, timeout_s=30)
        running = threading.Event()
        gate = threading.Event()

        def blocked() -> bool:
            running.set()
            return gate.wait(30)

        first = asyncio.ensure_future(pool.run(blocked))
        queued = asyncio.ensure_future(pool.run(lambda: "never"))
        assert await asyncio.to_thread(running.wait, 30)  # the second call is queued
        pool.shutdown()
        with pytest.raises(ServerDraining):
            await queued
        gate.set()
        assert await first is True  # running work finishes on its own

    run(body)


def test_detach_reports_back_on_the_loop() -> None:
    async def body() -> None:
        pool = Workers(2, timeout_s=5)
        seen: list[Any] = []
        loop_thread = threading.get_ident()

        def note(what: str) -> None:
            seen.append((what, threading.get_ident() == loop_thread))

        def fail() -> None:
            raise OSError("disk gone")

        pool.detach(lambda: None, then=lambda: note("then"), otherwise=lambda: note("no"))
        pool.detach(fail, then=lambda: note("then2"), otherwise=lambda: note("otherwise"))
        await until(lambda: len(seen) == 2, what="both reports")
        assert sorted(seen) == [("otherwise", True), ("then", True)]
        pool.shutdown()

    run(body)


def test_close_all_does_not_wait_forever_for_a_stuck_close() -> None:
    release = threading.Event()

    class Stuck:
        def close(self) -> None:
            release.wait(30)  # stuck until the test lets it go

    async def body() -> None:
        pool = Workers(2, timeout_s=5)
        pool.start()
        boxes = [Box() for _ in range(5)]
        try:
            # The timeout is the input under test: the stuck close cannot finish before
            # close_all gives up on it, so the count does not depend on timing; the
            # five quick closes only need the other thread for well under a second.
            left = await pool.close_all([Stuck(), *boxes], timeout_s=1.0)
        finally:
            release.set()
        assert left == 1
        assert all(b.closed_at is not None for b in boxes)
        pool.shutdown()

    run(body)
