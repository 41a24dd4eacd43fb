"""The client's retry, timeout and error contract, against fakes and real processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from gymhub.client import AsyncEnvClient, EnvClient, encode_action
from gymhub.errors import (
    AtCapacity,
    EpisodeLost,
    EpisodeNotFound,
    RequestTimeout,
    ServerDraining,
    ServerUnreachable,
)
from gymhub.types import Message

from .conftest import ServerProcess, run

STEP_OK = {"seq": 1, "observation": [{"role": "user", "content": "ok"}], "reward": 0.0,
           "terminated": False, "truncated": False, "info": {}, "score": None}
FAST = {"backoff_s": 0.01, "max_backoff_s": 0.05}


def error(status: int, code: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": code}},
                          headers=headers)


def test_retry_after_is_honoured_and_bounded() -> None:
    seen: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(time.monotonic())
        if len(seen) < 3:
            return error(429, "at_capacity", {"retry-after": "0.2"})
        return httpx.Response(201, json={"episode_id": "e1", "env": "echo-v0",
                                         "observation": [], "info": {}})

    client = EnvClient("http://x", transport=httpx.MockTransport(handler), max_backoff_s=1)
    assert client.open("echo-v0").id == "e1"
    assert len(seen) == 3 and seen[1] - seen[0] >= 0.19 and seen[2] - seen[1] >= 0.19
    bodies: list[dict[str, Any]] = []

    def always_busy(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return error(503, "server_draining", {"retry-after": "0"})

    busy = EnvClient("http://x", transport=httpx.MockTransport(always_busy), retries=3, **FAST)
    with pytest.raises(ServerDraining):
        busy.open("echo-v0")
    assert len(bodies) == 4  # the first attempt and three retries, never more
    assert len({b["request_id"] for b in bodies}) == 1  # one creation, retried


def test_no_retry_on_client_errors() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return error(404, "episode_not_found")

    client = EnvClient("http://x", transport=httpx.MockTransport(handler), **FAST)
    with pytest.raises(EpisodeNotFound):
        client.step("e", Message(role="assistant", content="x"), 1)
    assert len(calls) == 1


def test_retried_step_reuses_seq() -> None:
    seqs: list[int] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seqs.append(json.loads(request.content)["seq"])
        if len(seqs) == 1:
            raise httpx.ReadError("connection reset", request=request)
        return httpx.Response(200, json=STEP_OK)

    async def body() -> None:
        async with AsyncEnvClient("http://x", transport=httpx.MockTransport(handler),
                                  **FAST) as client:
            result = await client.step("e1", {"role": "assistant", "content": "x"}, 5)
            assert result.observation == [Message(role="user", content="ok")]

    run(body)
    assert seqs == [5, 5]


def test_retried_batch_resends_every_step_with_its_seq() -> None:
    batches: list[list[tuple[str, int]]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        if request.url.path != "/v1/batch":  # a retry leaves alone after its own backoff
            batches.append([(request.url.path.split("/")[3], sent["seq"])])
            return httpx.Response(200, json=STEP_OK)
        batches.append([(op["episode_id"], op["seq"]) for op in sent["ops"]])
        if len(batches) == 1:
            raise httpx.ReadError("connection reset", request=request)
        return httpx.Response(200, json={"results": [{"status": 200, "body": STEP_OK}
                                                     for _ in sent["ops"]]})

    async def body() -> None:
        async with AsyncEnvClient("http://x", transport=httpx.MockTransport(handler),
                                  **FAST) as client:
            results = await asyncio.gather(
                client.step("e1", {"role": "assistant", "content": "x"}, 5),
                client.step("e2", {"role": "assistant", "content": "y"}, 2))
            assert all(r.observation == [Message(role="user", content="ok")] for r in results)

    run(body)
    assert batches[0] == [("e1", 5), ("e2", 2)]
    assert sorted(op for b in batches[1:] for op in b) == [("e1", 5), ("e2", 2)]


def test_unreachable_server_is_a_typed_error_within_the_timeout() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = EnvClient("http://x", transport=httpx.MockTransport(refuse), retries=3, **FAST)
    with pytest.raises(ServerUnreachable, match="4 attempt"):  # not a RequestTimeout
        client.list_envs()
    attempts: list[int] = []

    def hang(request: httpx.Request) -> httpx.Response:
        attempts.append(1)
        raise httpx.ReadTimeout("slow", request=request)

    slow = EnvClient("http://x", transport=httpx.MockTransport(hang), timeout=0.3, retries=100,
                     **FAST)
    with pytest.raises(RequestTimeout):
        slow.list_envs()
    assert len(attempts) < 101  # the deadline, not the retry count, bounds it


def test_encode_action_keeps_bad_actions_bad() -> None:
    assert encode_action(Message(role="assistant", content="hi")) == {
        "role": "assistant", "content": "hi"}
    assert encode_action(object()) == {"__unserializable__": "object"}
    assert encode_action("bad \udcff text") == "bad \udcff text"


def test_killed_server_loses_the_episode_and_restart_is_clean(
        server_factory: Any) -> None:
    server: ServerProcess = server_factory("echo-v0")
    client = EnvClient(server.url, timeout=3, retries=3, **FAST)
    opened = client.open("echo-v0", seed=0)
    client.step(opened.id, {"role": "assistant", "content": "x"}, 1)
    server.kill()
    with pytest.raises(EpisodeLost) as lost:  # refused at once: not a timeout
        client.step(opened.id, {"role": "assistant", "content": "x"}, 2)
    assert isinstance(lost.value.__cause__, ServerUnreachable)
    with pytest.raises(ServerUnreachable):  # opening has no episode to lose
        client.open("echo-v0")
    # a restarted server (same port) holds nothing of the old one, and says so
    server_factory("echo-v0", port=int(server.url.rsplit(":", 1)[1]))
    with pytest.raises(EpisodeLost, match="restarted"):
        client.step(opened.id, {"role": "assistant", "content": "x"}, 2)
    fresh = client.open("echo-v0", seed=0)
    assert fresh.id != opened.id
    assert fresh.observation == opened.observation  # same seed, same task
    client.close()


def test_capacity_error_from_a_real_server(server_factory: Any) -> None:
    server = server_factory("echo-v0", "--max-episodes", "1")
    client = EnvClient(server.url, retries=1, **FAST)
    client.open("echo-v0")
    with pytest.raises(AtCapacity) as info:
        client.open("echo-v0")
    assert info.value.retry_after == 1.0
    client.close()


def test_client_module_stays_light() -> None:
    code = ("import sys, gymhub.client; "
            "from gymhub.client import AsyncEnvClient, ClientConfig, EnvClient, "
            "RemoteEpisode, encode_action; "
            "bad = [m for m in ('fastapi', 'torch', 'gymhub.envs', 'starlette', 'pydantic_core')"
            " if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy = eval(out.stdout)
    assert "fastapi" not in heavy and "torch" not in heavy and "gymhub.envs" not in heavy, heavy


def test_retry_loop_decides_for_both_clients() -> None:
    from gymhub.client.retries import ClientConfig, RetryLoop, RetryPolicy
    from gymhub.errors import SeqConflict

    def answer(status: int, code: str, **headers: str) -> httpx.Response:
        return httpx.Response(status, json={"error": {"code": code, "message": code}},
                              headers=headers)

    policy = RetryPolicy(ClientConfig("http://x", retries=2, timeout=30, backoff_s=0.01,
                                      max_backoff_s=0.5))
    loop = RetryLoop(policy, "step 1 of e")
    assert 0 <= loop.next(httpx.ConnectError("refused")) <= 0.01
    assert loop.next(answer(503, "server_draining", **{"retry-after": "0.2"})) >= 0.2
    with pytest.raises(ServerDraining):  # the budget is spent: the server's last word
        loop.next(answer(503, "server_draining"))
    with pytest.raises(SeqConflict):  # never retried
        RetryLoop(policy, "step").next(answer(409, "seq_conflict"))
    with pytest.raises(AtCapacity):  # a pool fails over instead of waiting
        RetryLoop(policy, "open", busy_retry=False).next(answer(429, "at_capacity"))
    spent = RetryLoop(RetryPolicy(ClientConfig("http://x", retries=0)), "open echo-v0")
    with pytest.raises(ServerUnreachable, match="open echo-v0: cannot reach"):
        spent.next(httpx.ConnectError("refused"))
    assert 0.001 <= loop.time_left() <= 30
