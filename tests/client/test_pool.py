"""EnvPool over several real server processes."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from typing import Any

import httpx
import pytest

from gymhub.client.pool import EnvPool
from gymhub.client.url_file import UrlFile, parse_urls, write_urls_file
from gymhub.errors import AtCapacity, ConfigError, EpisodeLost, ServerUnreachable

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


# ------------------------------------------------------------------ a URL file
def test_a_url_list_ignores_blanks_comments_and_repeats(tmp_path: Any) -> None:
    text = "# servers\n\nhttp://a:1\n  http://b:2/  # the second\nhttp://a:1\n"
    assert parse_urls(text) == ["http://a:1", "http://b:2"]
    with pytest.raises(ConfigError, match=r"urls.txt:2: not a server URL: 'a:1'"):
        parse_urls("http://a:1\na:1\n", "urls.txt")
    listing = UrlFile(tmp_path / "u.txt", check_s=3600)
    assert not listing.refresh(force=True) and "does not exist" in listing.problem()
    write_urls_file(tmp_path / "u.txt", ["http://a:1"])
    assert not listing.refresh()  # looked less than check_s ago: not even a stat
    assert listing.refresh(force=True) and listing.urls == ["http://a:1"]
    assert not listing.refresh(force=True)  # unchanged: not re-parsed
    (tmp_path / "u.txt").write_text("# none yet\n")
    assert listing.refresh(force=True) and "lists no server" in listing.problem()


def test_pool_from_file_follows_the_file_and_finishes_episodes_where_they_are(
        server_factory: Any, tmp_path: Any) -> None:
    a = server_factory("echo-v0")
    b = server_factory("echo-v0")
    path = tmp_path / "urls.txt"
    path.write_text(f"# written by a launcher\n{a.url}\n\n")

    async def body() -> None:
        async with EnvPool.from_file(path, reload_s=0, open_timeout=2, **FAST) as pool:
            first = await pool.open("echo-v0", seed=0)
            assert first.client.config.base_url == a.url
            write_urls_file(path, [a.url, b.url])  # b joins
            homes = Counter([(await pool.open("echo-v0")).client.config.base_url
                             for _ in range(3)])
            assert homes == {b.url: 2, a.url: 1}  # the fewest live episodes first
            write_urls_file(path, [b.url])  # a leaves: no new episodes there ...
            assert {(await pool.open("echo-v0")).client.config.base_url
                    for _ in range(3)} == {b.url}
            assert pool.urls == [b.url]
            # ... while its live episodes still step on it and close there
            await first.step({"role": "assistant", "content": "x"})
            await first.close()
            assert (await pool.health())[0]["url"] == b.url

    run(body)


def test_pool_from_file_picks_up_a_replaced_server_without_a_restart(
        server_factory: Any, tmp_path: Any) -> None:
    a = server_factory("echo-v0")
    path = tmp_path / "urls.txt"
    write_urls_file(path, [a.url])

    async def body() -> None:
        async with EnvPool.from_file(path, reload_s=0, open_timeout=10, **FAST) as pool:
            held = await pool.open("echo-v0", seed=0)
            a.kill()
            with pytest.raises((EpisodeLost, ServerUnreachable)):  # its episode went with it
                await held.step({"role": "assistant", "content": "x"})

            async def replace() -> None:  # as a launcher would, a moment later
                await asyncio.sleep(0.3)
                c = await asyncio.to_thread(server_factory, "echo-v0")
                write_urls_file(path, [c.url])

            replacing = asyncio.create_task(replace())
            fresh = await pool.open("echo-v0", seed=0)  # waits, re-reading the file
            await replacing
            assert fresh.client.config.base_url != a.url
            assert fresh.observation == held.observation  # same seed, same task
            await fresh.close()

    run(body)


def test_wait_ready_waits_for_the_file_and_a_starting_server(
        server_factory: Any, tmp_path: Any) -> None:
    with socket.socket() as s:  # a port nobody listens on yet
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "urls.txt"
    said: list[str] = []

    async def body() -> None:
        pool = EnvPool.from_file(path, reload_s=0, **FAST)
        with pytest.raises(ConfigError, match=r"urls.txt does not exist after waiting 0.2 s"):
            await pool.wait_ready(0.2)
        path.write_text("")
        with pytest.raises(ConfigError, match="lists no server"):
            await pool.wait_ready(0)

        async def launch() -> None:  # the file first, the server a moment later
            await asyncio.sleep(0.2)
            write_urls_file(path, [f"http://127.0.0.1:{port}"])
            await asyncio.sleep(0.3)
            await asyncio.to_thread(server_factory, "echo-v0", port=port)

        launching = asyncio.create_task(launch())
        assert await pool.wait_ready(30, notify=said.append) == [f"http://127.0.0.1:{port}"]
        await launching
        await pool.aclose()

    run(body)
    assert len(said) == 1 and said[0].startswith("waiting up to 30 s for environment servers")


def test_wait_ready_names_each_server_that_is_not_there(server_factory: Any) -> None:
    a = server_factory("echo-v0")

    async def body() -> None:
        async with EnvPool([a.url, "http://127.0.0.1:1"], **FAST) as pool:
            with pytest.raises(ServerUnreachable) as info:
                await pool.wait_ready(0, hint="env_wait_s sets how long")
            message = str(info.value)
            assert message.startswith("1 of 2 environment servers not ready: "
                                      "http://127.0.0.1:1: ")
            assert a.url not in message and message.endswith("(env_wait_s sets how long)")

    run(body)


def test_wait_ready_waits_out_a_server_that_answers_starting() -> None:
    answers = [(503, "starting"), (503, "starting"), (200, "ok")]

    def healthz(request: httpx.Request) -> httpx.Response:
        status, word = answers.pop(0) if len(answers) > 1 else answers[0]
        return httpx.Response(status, json={"status": word, "episodes_open": 0})

    said: list[str] = []

    async def body() -> None:
        async with EnvPool(["http://warming:1"], transport=httpx.MockTransport(healthz),
                           **FAST) as pool:
            assert await pool.wait_ready(10, notify=said.append) == ["http://warming:1"]

    run(body)
    assert said == ["waiting up to 10 s for environment servers to start: "
                    "http://warming:1: status 'starting'"]
