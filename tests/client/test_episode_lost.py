"""A lost episode is loud: the client raises ``EpisodeLost``, never a hang or a bare error.

An episode lives in one server process's memory. When that process restarts, dies or
stops answering mid-episode, the episode is gone: the learner must mask and count the
trajectory, not score it 0 or wait forever. Opening an episode has nothing to lose, so
a server that is not there stays ``ServerUnreachable`` there.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from gymhub.client import AsyncEnvClient
from gymhub.errors import (
    EpisodeLost,
    RequestTimeout,
    SeqReused,
    ServerUnreachable,
)

from .conftest import ServerProcess, run, served

TEXT = {"role": "assistant", "content": "thinking"}
FAST: dict[str, Any] = {"backoff_s": 0.01, "max_backoff_s": 0.05}
STEP_OK = {"seq": 1, "observation": [{"role": "user", "content": "ok"}], "reward": 0.0,
           "terminated": False, "truncated": False, "info": {}, "score": None}


def port_of(server: ServerProcess) -> int:
    return int(server.url.rsplit(":", 1)[1])


def pid_of(server: ServerProcess) -> int:
    assert server.proc is not None
    return server.proc.pid


# ------------------------------------------------------------------ real servers
def test_a_restarted_server_answers_episode_lost(server_factory: Any) -> None:
    server: ServerProcess = server_factory("echo-v0")

    async def body() -> None:
        async with AsyncEnvClient(server.url, timeout=5, retries=3, **FAST) as client:
            before = (await client.health())["incarnation"]
            ep = await client.open("echo-v0", seed=0)
            await ep.step(TEXT)
            server.kill()
            # same port, a new start; in a thread, so this loop sees the old connection end
            await asyncio.to_thread(server_factory, "echo-v0", port=port_of(server))
            assert (await client.health())["incarnation"] != before
            with pytest.raises(EpisodeLost) as info:
                await ep.step(TEXT)
            assert info.value.status == 410 and ep.id in str(info.value)
            await ep.close()  # already gone: closing it is not an error
            fresh = await client.open("echo-v0", seed=0)
            assert fresh.observation == ep.observation  # same seed, same task, new id
            assert fresh.id != ep.id

    run(body)


def test_a_server_killed_mid_step_loses_the_episode_at_once(server_factory: Any) -> None:
    server: ServerProcess = server_factory("echo-v0")

    async def body() -> None:
        async with AsyncEnvClient(server.url, timeout=20, retries=3, **FAST) as client:
            ep = await client.open("echo-v0")
            await ep.step(TEXT)
            ended: list[bool] = []
            ep.on_end = lambda: ended.append(True)
            os.kill(pid_of(server), signal.SIGSTOP)  # the step below arrives, unanswered
            started = time.monotonic()
            step = asyncio.create_task(ep.step(TEXT))
            await asyncio.sleep(0.3)  # lets the step leave; had it not, the outcome is the same
            server.kill()  # the connection is reset under the waiting step
            with pytest.raises(EpisodeLost) as info:
                await step
            assert time.monotonic() - started < 10  # the retries, not the 20 s deadline
            assert isinstance(info.value.__cause__, ServerUnreachable)
            assert ended == [True]  # a pool stops counting it as live
            with pytest.raises(ServerUnreachable):  # opening has no episode to lose
                await client.open("echo-v0")
            await ep.close()  # best effort on a dead server: not an error either

    run(body)


def test_a_server_that_stops_answering_loses_the_episode_at_the_deadline(
        server_factory: Any) -> None:
    server: ServerProcess = server_factory("echo-v0")

    async def body() -> None:
        async with AsyncEnvClient(server.url, timeout=1.5, retries=3, **FAST) as client:
            ep = await client.open("echo-v0")
            os.kill(pid_of(server), signal.SIGSTOP)  # alive, accepting, never answering
            try:
                started = time.monotonic()
                with pytest.raises(EpisodeLost) as info:
                    await ep.step(TEXT)
                waited = time.monotonic() - started
                assert 1.4 < waited < 6, waited  # the call's deadline, not a hang
                assert isinstance(info.value.__cause__, RequestTimeout)
            finally:
                os.kill(pid_of(server), signal.SIGCONT)

    run(body)


# ------------------------------------------------------------- fakes, in process
def test_episode_lost_is_never_retried() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(410, json={"error": {"code": "episode_lost", "message": "gone"}})

    async def body() -> None:
        async with AsyncEnvClient("http://x", transport=httpx.MockTransport(handler),
                                  **FAST) as client:
            with pytest.raises(EpisodeLost):
                await client.step("e1", TEXT, 1)
            with pytest.raises(EpisodeLost):
                await client.gold_action("e1")
            await client.close_episode("e1", missing_ok=True)

    run(body)
    assert len(calls) == 3  # one attempt each


def test_transport_failures_lose_episode_operations_but_not_opens() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async def body() -> None:
        async with AsyncEnvClient("http://x", transport=httpx.MockTransport(refuse), retries=2,
                                  **FAST) as client:
            calls: list[Callable[[], Awaitable[Any]]] = [
                lambda: client.step("e1", TEXT, 3), lambda: client.gold_action("e1"),
                lambda: client.reference_action("e1", "noop"),
                lambda: client.close_episode("e1")]
            for call in calls:
                with pytest.raises(EpisodeLost, match="e1") as info:
                    await call()
                assert isinstance(info.value.__cause__, ServerUnreachable)
            await client.close_episode("e1", missing_ok=True)
            with pytest.raises(ServerUnreachable):
                await client.open("echo-v0")
            with pytest.raises(ServerUnreachable):
                await client.list_envs()

    run(body)


class DropFirstReplies(httpx.AsyncBaseTransport):
    """Delivers each request, then loses the first ``n`` step replies on the way back.

    That is a connection reset after the server applied the step: the retry must be
    the same ``seq`` with the same action, answered from the server's cache.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, n: int) -> None:
        self.inner = inner
        self.left = n
        self.sent: list[bytes] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        await response.aread()
        if request.url.path.endswith(("/step", "/batch")):
            self.sent.append(request.content)
            if self.left > 0:
                self.left -= 1
                raise httpx.ReadError("connection reset", request=request)
        return response


def test_a_retry_after_a_dropped_reply_replays_the_applied_step() -> None:
    async def body() -> None:
        async with served() as (app, _client, raw):
            lossy = DropFirstReplies(httpx.ASGITransport(app=app), n=1)
            async with AsyncEnvClient("http://test", transport=lossy, **FAST) as client:
                ep = await client.open("echo-v0", seed=1)
                result = await ep.step(TEXT)  # alone on its route: reply lost once
                assert result.info["turn"] == 1  # the cached reply, applied once
                assert lossy.sent[0] == lossy.sent[1]  # same seq, same action, same bytes
                others = [await client.open("echo-v0", seed=s) for s in (2, 3)]
                lossy.left = 1
                results = await asyncio.gather(*(o.step(TEXT) for o in others))  # batched
                assert [r.info["turn"] for r in results] == [1, 1]
                assert json.loads(lossy.sent[2])["ops"][0]["seq"] == 1
                with pytest.raises(SeqReused):  # the cache does not cover another action
                    await client.step(ep.id, {**TEXT, "content": "other"}, 1)
            metrics = (await raw.get("/metrics")).text
            assert "gymhub_step_replays_total 3.0" in metrics  # each lost reply replayed

    run(body)
