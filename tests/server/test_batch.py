"""``POST /v1/batch`` and the client's coalescing: each operation keeps its own contract."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from gymhub.client import AsyncEnvClient
from gymhub.client.coalesce import Coalescer
from gymhub.errors import (
    AtCapacity,
    EpisodeLost,
    InvalidRequest,
    RequestTimeout,
    SeqConflict,
    ServerUnreachable,
)
from gymhub.server.wire_models import MAX_BATCH_OPS
from gymhub.types import Message, ToolCall

from .conftest import GatedEnv, run, served, until

LOOK = Message(role="assistant", content="",
               tool_calls=(ToolCall("l", "look", {}),)).to_dict()
TEXT = {"role": "assistant", "content": "thinking"}
STEP_OK = {"seq": 1, "observation": [{"role": "user", "content": "ok"}], "reward": 0.0,
           "terminated": False, "truncated": False, "info": {}, "score": None}


def submit(word: str) -> dict[str, Any]:
    return Message(role="assistant", content="",
                   tool_calls=(ToolCall("s", "submit", {"answer": word}),)).to_dict()


async def batch(raw: httpx.AsyncClient, *ops: dict[str, Any]) -> list[dict[str, Any]]:
    r = await raw.post("/v1/batch", json={"ops": list(ops)})
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    assert len(results) == len(ops)
    return results


def test_each_operation_is_answered_as_its_own_request_would_be() -> None:
    async def body() -> None:
        async with served(max_episodes=2, retry_after_s=3) as (_app, _client, raw):
            a, b, full = await batch(raw, {"op": "create", "env": "echo-v0", "seed": 1},
                                     {"op": "create", "env": "echo-v0", "seed": 2},
                                     {"op": "create", "env": "echo-v0", "seed": 3})
            statuses = sorted([a["status"], b["status"], full["status"]])
            assert statuses == [201, 201, 429]  # which one loses the race is not fixed
            refused = next(r for r in (a, b, full) if r["status"] == 429)
            assert refused["retry_after"] == 3
            assert refused["body"]["error"]["code"] == "at_capacity"
            ok = [r["body"] for r in (a, b, full) if r["status"] == 201]
            e1, e2 = ok[0]["episode_id"], ok[1]["episode_id"]
            word = ok[0]["observation"][-1]["content"]

            step, other, stale, unknown = await batch(
                raw, {"op": "step", "episode_id": e1, "seq": 1, "action": LOOK},
                {"op": "step", "episode_id": e2, "seq": 1, "action": TEXT},
                {"op": "step", "episode_id": e2, "seq": 3, "action": TEXT},
                {"op": "step", "episode_id": "nope", "seq": 1, "action": TEXT})
            assert step["status"] == 200 and step["body"]["seq"] == 1
            assert other["status"] == 200
            assert stale["status"] == 409 and stale["body"]["error"]["expected_seq"] == 2
            assert unknown["status"] == 404
            assert unknown["body"]["error"]["code"] == "episode_not_found"
            (replay,) = await batch(raw, {"op": "step", "episode_id": e1, "seq": 1,
                                          "action": LOOK})
            assert replay == step  # the cached reply of step 1, not a new step

            # Operations on one episode apply in list order: step 2 (the submit), a
            # replay of step 2, then the close.
            done, again, closed = await batch(
                raw, {"op": "step", "episode_id": e1, "seq": 2, "action": submit(word)},
                {"op": "step", "episode_id": e1, "seq": 2, "action": submit(word)},
                {"op": "close", "episode_id": e1})
            assert done["body"]["terminated"] and done["body"]["score"]["value"] == 1.0
            assert again["body"] == done["body"]  # the cached reply, not a second step
            assert closed == {"status": 200, "body": {"episode_id": e1, "closed": True}}
            metrics = (await raw.get("/metrics")).text
            assert "gymhub_batch_ops_total 11.0" in metrics

    run(body)


@pytest.mark.parametrize(("payload", "field"), [
    ({"ops": []}, "body.ops"),
    ({"ops": [{"op": "jump"}]}, "body.ops.0"),
    ({"ops": [{"op": "step", "episode_id": "x", "seq": 0, "action": {}}]}, "body.ops.0.step.seq"),
    ({"ops": [{"op": "close", "episode_id": "x", "extra": 1}]}, "body.ops.0.close.extra"),
    ({"ops": [{"op": "close", "episode_id": "x"}] * (MAX_BATCH_OPS + 1)}, "body.ops"),
    ({"steps": []}, "body.ops"),
])
def test_malformed_batches_are_readable_422(payload: dict[str, Any], field: str) -> None:
    async def body() -> None:
        async with served() as (_app, _client, raw):
            r = await raw.post("/v1/batch", json=payload)
            assert r.status_code == 422
            error = r.json()["error"]
            assert error["code"] == "invalid_request" and field in error["message"]

    run(body)


def test_a_batch_needs_the_token_and_fits_the_body_limit() -> None:
    async def body() -> None:
        async with served(token="s3cret", max_body_bytes=2000) as (_app, client, raw):
            r = await raw.post("/v1/batch", json={"ops": [{"op": "close", "episode_id": "x"}]},
                               headers={"authorization": "Bearer wrong"})
            assert r.status_code == 401
            big = {"ops": [{"op": "create", "env": "echo-v0", "options": {"x": "y" * 3000}}]}
            assert (await raw.post("/v1/batch", json=big)).status_code == 413
            eps = await asyncio.gather(*(client.open("echo-v0", seed=k) for k in range(3)))
            assert len({ep.id for ep in eps}) == 3

    run(body)


def test_a_stuck_step_times_out_alone() -> None:
    async def body() -> None:
        GatedEnv.reset_gate()
        # The gated step is stuck until the gate opens, so it overruns any deadline; the
        # deadline is only generous enough for the quick creations and the echo step.
        async with served(["gated-v0", "echo-v0"], step_timeout_s=1.0) as (_app, _client, raw):
            try:
                slow, fast = await batch(raw, {"op": "create", "env": "gated-v0", "seed": 0},
                                         {"op": "create", "env": "echo-v0", "seed": 0})
                stuck, ok = await batch(
                    raw, {"op": "step", "episode_id": slow["body"]["episode_id"], "seq": 1,
                          "action": TEXT},
                    {"op": "step", "episode_id": fast["body"]["episode_id"], "seq": 1,
                     "action": LOOK})
                assert stuck["status"] == 504
                assert stuck["body"]["error"]["code"] == "deadline_exceeded"
                assert ok["status"] == 200 and not ok["body"]["terminated"]
                assert not GatedEnv.closed  # answered while the step was still stuck
            finally:
                GatedEnv.release.set()
            # the stuck step returns, then its environment is closed
            await until(lambda: len(GatedEnv.closed) == 1, what="the stuck env's close")

    run(body)


def test_concurrent_episodes_share_requests_and_keep_their_results() -> None:
    async def body() -> None:
        async with served(max_episodes=300) as (app, client, raw):
            async def one(k: int) -> float:
                ep = await client.open("echo-v0", seed=k)
                word = ep.observation[-1].content
                for _ in range(2):
                    await ep.step(LOOK)
                result = await ep.step(submit(word))
                await ep.close()
                return result.info["score"].value

            scores = await asyncio.gather(*(one(k) for k in range(200)))
            assert scores == [1.0] * 200
            text = (await raw.get("/metrics")).text
            counted = float(next(line.split()[1] for line in text.splitlines()
                                 if line.startswith("gymhub_batch_ops_total ")))
            assert counted >= 0.9 * 200 * 5  # nearly every operation travelled batched
            assert app.state.manager.live == 0

    run(body)


def test_a_server_without_batches_is_used_op_by_op() -> None:
    paths: list[str] = []
    created = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal created
        paths.append(request.url.path)
        if request.url.path == "/v1/batch":
            return httpx.Response(404, json={"detail": "Not Found"})
        created += 1
        return httpx.Response(201, json={"episode_id": f"e{created}", "env": "echo-v0",
                                         "observation": [], "info": {}})

    async def body() -> None:
        async with AsyncEnvClient("http://x", transport=httpx.MockTransport(handler),
                                  backoff_s=0.001) as client:
            eps = await asyncio.gather(*(client.open("echo-v0") for _ in range(3)))
            assert sorted(ep.id for ep in eps) == ["e1", "e2", "e3"]
            await asyncio.gather(*(client.open("echo-v0") for _ in range(2)))

    run(body)
    assert paths.count("/v1/batch") == 1 and paths.count("/v1/episodes") == 5


def test_a_refused_creation_is_retried_alone() -> None:
    calls: list[list[str]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        if request.url.path != "/v1/batch":
            calls.append([sent["request_id"]])
            return httpx.Response(201, json={"episode_id": "late", "env": "echo-v0",
                                             "observation": [], "info": {}})
        calls.append([op["request_id"] for op in sent["ops"]])
        return httpx.Response(200, json={"results": [
            {"status": 201, "body": {"episode_id": "first", "env": "echo-v0",
                                     "observation": [], "info": {}}},
            {"status": 429, "retry_after": 1, "body": {"error": {
                "code": "at_capacity", "message": "full"}}}]})

    async def body() -> None:
        async with AsyncEnvClient("http://x", transport=httpx.MockTransport(handler),
                                  backoff_s=0.001, max_backoff_s=0.01) as client:
            a, b = await asyncio.gather(client.open("echo-v0"), client.open("echo-v0"))
            assert (a.id, b.id) == ("first", "late")
            with pytest.raises(AtCapacity):  # without busy_retry the 429 is the answer
                await asyncio.gather(client.open("echo-v0", busy_retry=False),
                                     client.open("echo-v0", busy_retry=False))

    run(body)
    assert calls[1] == [calls[0][1]]  # the same request id, resent on its own


@pytest.mark.parametrize("reply", [{"results": []}, {"results": [1, 2]}, {"nope": 1},
                                   {"results": [{"status": "x", "body": {}}] * 2}])
def test_a_malformed_batch_reply_is_a_typed_transport_error(reply: Any) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/batch"
        return httpx.Response(200, json=reply)

    async def body() -> None:
        async with AsyncEnvClient("http://x", transport=httpx.MockTransport(handler),
                                  retries=2, backoff_s=0, max_backoff_s=0) as client:
            # Every retry finds its neighbour retrying in the same turn: always batched.
            outcomes = await asyncio.gather(client.step("a", TEXT, 1), client.step("b", TEXT, 1),
                                            return_exceptions=True)
            for outcome in outcomes:  # no usable answer: the episode is lost to the client
                assert isinstance(outcome, EpisodeLost), outcome
                assert isinstance(outcome.__cause__, ServerUnreachable)
                assert "malformed batch reply" in str(outcome)

    run(body)


def test_a_batch_refused_whole_is_resent_op_by_op() -> None:
    seen: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.url.path == "/v1/batch":
            return httpx.Response(422, json={"error": {"code": "invalid_request",
                                                       "message": "body.ops.1.seq: bad"}})
        if request.url.path == "/v1/episodes/bad/step":
            return httpx.Response(422, json={"error": {"code": "invalid_request",
                                                       "message": "body.seq: bad"}})
        return httpx.Response(200, json=STEP_OK)

    async def body() -> None:
        async with AsyncEnvClient("http://x", transport=httpx.MockTransport(handler),
                                  backoff_s=0.001) as client:
            good, bad = await asyncio.gather(client.step("good", TEXT, 1),
                                             client.step("bad", TEXT, 1),
                                             return_exceptions=True)
            assert not isinstance(good, Exception) and isinstance(bad, InvalidRequest)

    run(body)
    assert seen[0] == "/v1/batch"
    assert sorted(seen[1:]) == ["/v1/episodes/bad/step", "/v1/episodes/good/step"]


def test_each_operation_keeps_its_own_deadline_in_a_slow_batch() -> None:
    release = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        await asyncio.wait_for(release.wait(), 30)  # answers only when the test says so
        ops = json.loads(request.content)["ops"]
        return httpx.Response(200, json={"results": [{"status": 200, "body": STEP_OK}] * len(ops)})

    async def body() -> None:
        async with AsyncEnvClient("http://x", transport=httpx.MockTransport(handler),
                                  timeout=30, retries=0) as client:
            short = AsyncEnvClient("http://x", transport=httpx.MockTransport(handler),
                                   timeout=0.1, retries=0)
            short._batcher = client._batcher  # one batch, two deadlines
            slow = asyncio.ensure_future(client.step("a", TEXT, 1))
            fast = asyncio.ensure_future(short.step("b", TEXT, 1))
            with pytest.raises(EpisodeLost) as lost:
                await fast  # its deadline passed while the batch was still unanswered
            assert isinstance(lost.value.__cause__, (RequestTimeout, ServerUnreachable))
            assert not slow.done()  # the long one keeps waiting for the same batch
            release.set()
            assert not isinstance(await slow, Exception)
            await short.aclose()

    run(body)


def test_coalescer_splits_by_count_and_sends_big_operations_alone() -> None:
    bodies: list[int] = []

    async def send(body: bytes, _timeout: float) -> Any:
        ops = json.loads(body)["ops"]
        bodies.append(len(ops))
        return httpx.Response(200, json={"results": [{"status": 200, "body": {"i": i}}
                                                     for i in range(len(ops))]})

    async def send_one(*_args: Any) -> Any:
        raise AssertionError("more than one operation was ready")

    async def body() -> None:
        co = Coalescer(send, send_one, max_ops=4)
        small = [co.submit({"op": "close", "episode_id": str(k)}, ("DELETE", "/x", None), 5)
                 for k in range(9)]
        big = co.submit({"op": "close", "episode_id": "x" * 70_000}, ("DELETE", "/x", None), 5)
        answers = await asyncio.gather(*small, big)
        assert all(a.status_code == 200 for a in answers)
        await co.aclose()

    run(body)
    assert sorted(bodies) == [1, 1, 4, 4]


def test_seq_conflict_in_a_batch_raises_the_typed_error() -> None:
    async def body() -> None:
        async with served() as (_app, client, _raw):
            a, b = await asyncio.gather(client.open("echo-v0"), client.open("echo-v0"))
            with pytest.raises(SeqConflict):
                await asyncio.gather(client.step(a.id, TEXT, 1), client.step(b.id, TEXT, 7))

    run(body)
