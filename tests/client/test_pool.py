"""EnvPool over several real server processes."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from gymhub.client.pool import EnvPool
from gymhub.errors import AtCapacity

from .conftest import run

FAST = {"backoff_s": 0.01, "max_backoff_s": 0.05, "timeout": 5, "retries": 2}


def test_pool_spreads_episodes_and_keeps_them_home(server_factory: Any) -> None:
    a = server_factory("echo-v0")
    b = server_factory("echo-v0", "--max-episodes", "3")

    async def body() -> None:
        async with EnvPool([a.url, b.url], open_timeout=0.5, **FAST) as pool:
            eps = [await pool.open("echo-v0", seed=i) for i in range(6)]
            homes = Counter(ep.client.config.base_url for ep in eps)
            assert homes == {a.url: 3, b.url: 3}
            for ep in eps:  # every step reaches the server that holds the episode
                await ep.step({"role": "assistant", "content": "x"})
            more = [await pool.open("echo-v0") for _ in range(3)]  # b is full: a takes them
            assert all(ep.client.config.base_url == a.url for ep in more)
            for ep in eps:
                if ep.client.config.base_url == b.url:
                    await ep.close()
            assert pool.live == [6, 0]
            health = await pool.health()
            assert [h["episodes_open"] for h in health] == [6, 0]

    run(body)


def test_pool_survives_a_dead_server_and_reports_full(server_factory: Any) -> None:
    a = server_factory("echo-v0", "--max-episodes", "2")
    b = server_factory("echo-v0")
    b.kill()

    async def body() -> None:
        async with EnvPool([b.url, a.url], open_timeout=0.3, **FAST) as pool:
            eps = [await pool.open("echo-v0") for _ in range(2)]
            assert all(ep.client.config.base_url == a.url for ep in eps)
            with pytest.raises(AtCapacity):
                await pool.open("echo-v0")
            assert (await pool.health())[0]["status"] == "unreachable"

    run(body)
