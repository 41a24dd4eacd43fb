"""Recycling of environment instances: reuse after a normal end, trimming after a peak."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gymhub.envs import Registry
from gymhub.envs.echo import EchoEnv
from gymhub.errors import ConfigError
from gymhub.server.instance_pool import InstancePool

from .conftest import run, served, until

SUBMIT = {"role": "assistant", "content": "", "tool_calls": [
    {"id": "c1", "name": "submit", "arguments": {"answer": "x"}}]}


class Closes(EchoEnv):
    """Echo that counts its closes."""

    closed = 0

    def close(self) -> None:
        Closes.closed += 1
        super().close()


def test_idle_envs_left_by_a_peak_are_trimmed_down_to_recycle() -> None:
    async def body() -> None:
        async with served(max_episodes=50, recycle=2, idle_env_ttl_s=60) as (app, client, _r):
            manager = app.state.manager
            peak = [await client.open("echo-v0") for _ in range(10)]
            for ep in peak:
                await ep.step(SUBMIT)  # a normal end: the instance is kept for reuse
            assert manager.live == 0 and manager.instance_pool.count("echo-v0") == 10
            reused = await client.open("echo-v0")  # the hot top of the stack is reused
            assert manager.instance_pool.count("echo-v0") == 9
            assert manager.instance_pool.trim(time.monotonic() + 30) == 0  # not idle long enough
            assert manager.instance_pool.trim(time.monotonic() + 61) == 7  # `recycle` stay
            assert manager.instance_pool.count("echo-v0") == 2
            assert manager.instance_pool.trim(time.monotonic() + 1000) == 0
            await reused.step(SUBMIT)  # the kept ones still serve episodes
            assert (await (await client.open("echo-v0")).step(SUBMIT)).terminated

    run(body)


def test_the_reaper_trims_idle_envs_and_they_are_closed() -> None:
    reg = Registry()
    reg.register("echo-v0", Closes, max_turns=4, description="echo that counts closes")

    async def body() -> None:
        async with served(registry=reg, max_episodes=20, recycle=1,
                          idle_env_ttl_s=0.2) as (app, client, _r):
            manager = app.state.manager
            for ep in [await client.open("echo-v0") for _ in range(6)]:
                await ep.step(SUBMIT)
            assert manager.instance_pool.count("echo-v0") == 6
            before = Closes.closed
            await until(lambda: (manager.instance_pool.count("echo-v0") == 1
                                  and Closes.closed - before == 5),
                        what="the reaper (it runs every ttl/4) to trim and close")
            assert manager.instance_pool.count("echo-v0") == 1
            assert Closes.closed - before == 5  # closed, not just forgotten

    run(body)


def test_recycler_keeps_the_hot_top_and_closes_the_old_bottom() -> None:
    disposed: list[Any] = []
    envs: list[Any] = [object() for _ in range(5)]
    rec = InstancePool(["a", "b"], recycle=1, idle_ttl_s=10, dispose=disposed.append)
    for env in envs[:4]:
        rec.give_back("a", env, live=0, max_episodes=100)
    rec.give_back("b", envs[4], live=0, max_episodes=100)
    assert len(rec) == 5
    now = time.monotonic()
    assert rec.trim(now + 11) == 3 and disposed == envs[:3]  # oldest first; b keeps its one
    assert rec.take("a") is envs[3] and rec.take("a") is None
    rec.give_back("a", envs[0], live=99, max_episodes=100)
    rec.give_back("a", envs[1], live=99, max_episodes=100)
    assert disposed[-1] is envs[1]  # over the memory bound, beyond `recycle`: closed
    assert sorted(map(id, rec.drain())) == sorted(map(id, [envs[0], envs[4]]))
    assert len(rec) == 0
    never = InstancePool(["a"], recycle=0, idle_ttl_s=None, dispose=disposed.append)
    never.give_back("a", envs[2], live=0, max_episodes=100)
    assert disposed[-1] is envs[2] and never.trim(now + 1e9) == 0


def test_idle_env_ttl_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="idle_env_ttl_s"):
        run(lambda: _open_app(idle_env_ttl_s=0))


async def _open_app(**kwargs: Any) -> None:
    async with served(**kwargs):
        pass


def test_an_episode_closed_early_ends_its_env_and_the_instance_is_reused() -> None:
    async def body() -> None:
        reg = Registry()
        reg.register("closes-v0", Closes, max_turns=4)
        Closes.closed = 0
        async with served(["closes-v0"], registry=reg) as (app, client, _raw):
            manager = app.state.manager
            ep = await client.open("closes-v0", seed=0)
            first = manager.episodes[ep.id].env
            await ep.close()  # mid-episode: its resources must go now, not at reuse
            await until(lambda: len(manager.instance_pool) == 1, what="the instance back")
            assert first.done and Closes.closed == 0  # ended, not closed: close() is final
            again = await client.open("closes-v0", seed=1)
            assert manager.episodes[again.id].env is first  # reset, not rebuilt
            assert not first.done

    run(body)
