"""In-process episodes: cheap environments move onto the event loop, slow ones never do."""

from __future__ import annotations

import asyncio
import threading
import time

from gymhub.trainer.backends import InProcessBackend, _Placement
from gymhub.types import Message

from .conftest import ParityEnv


class _Where(ParityEnv):
    """Records the thread of each step; ``pause`` seconds of work per step."""

    pause = 0.0

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    def step(self, action):
        self.log.append(threading.current_thread().name)
        if self.pause:
            time.sleep(self.pause)
        return super().step(action)


def _episodes(backend: InProcessBackend, n: int) -> list[float]:
    async def run() -> list[float]:
        out = []
        for i in range(n):
            start = await backend.create("where", task_id=f"t{i % 6}")
            result = await backend.step(start.episode_id, Message(role="assistant", content="ab"))
            await backend.close(start.episode_id)
            out.append(result.reward)
        return out

    return asyncio.run(run())


def test_a_cheap_environment_moves_onto_the_loop_with_the_same_results():
    log: list[str] = []
    # a generous bar: the test is about the moves, not this machine's speed
    backend = InProcessBackend(factory=lambda _id, **_: _Where(log), inline_below_ms=5.0)
    rewards = _episodes(backend, 20)
    assert backend.inline_envs == ["where:close", "where:start", "where:step"]
    assert log[0] != threading.current_thread().name  # first in a worker thread
    assert log[-1] == threading.current_thread().name  # then on the loop's own thread
    threaded = InProcessBackend(factory=lambda _id, **_: _Where([]), inline_below_ms=None)
    assert _episodes(threaded, 20) == rewards and threaded.inline_envs == []
    assert backend.open_episodes == 0


def test_a_slow_environment_stays_in_worker_threads():
    log: list[str] = []

    class Slow(_Where):
        pause = 0.02

    backend = InProcessBackend(factory=lambda _id, **_: Slow(log), inline_below_ms=5.0)
    _episodes(backend, 20)
    assert backend.inline_envs == ["where:close", "where:start"]  # cheap, unlike its steps
    assert threading.current_thread().name not in log


def test_one_slow_call_on_the_loop_sends_it_back_for_good():
    place = _Placement(cheap_s=0.001, proof=3)
    for _ in range(3):
        place.record(0.0001)
    assert place.inline
    place.record(0.002)  # cheap enough still (under four times the bar)
    assert place.inline
    place.record(0.01)
    assert not place.inline and place.demoted
    for _ in range(10):
        place.record(0.0001)
    assert not place.inline  # not trusted again
    restart = _Placement(cheap_s=0.001, proof=3)
    for seconds in (0.0001, 0.0001, 0.005, 0.0001, 0.0001):
        restart.record(seconds)  # a slow call in a worker restarts the count
    assert not restart.inline
    restart.record(0.0001)
    assert restart.inline
