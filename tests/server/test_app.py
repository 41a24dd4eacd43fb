"""The HTTP protocol, in process (httpx.ASGITransport with the app's lifespan running)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gymhub.envs import registry
from gymhub.envs.echo import EchoEnv
from gymhub.errors import (
    AtCapacity,
    DeadlineExceeded,
    EnvNotFound,
    EpisodeFinished,
    EpisodeNotFound,
    SeqConflict,
    ServerDraining,
    TaskNotFound,
)
from gymhub.types import Message, Score, ToolCall

from .conftest import GatedEnv, local_registry, registered_params, run, served, until


def submit(word: str) -> dict[str, Any]:
    call = ToolCall(id="c1", name="submit", arguments={"answer": word})
    return Message(role="assistant", content="", tool_calls=(call,)).to_dict()


TEXT = {"role": "assistant", "content": "thinking"}


@pytest.mark.parametrize("env_id", registered_params())
def test_gold_round_trip_every_registered_env(env_id: str) -> None:
    async def body() -> None:
        async with served([env_id], registry=registry) as (_app, client, _raw):
            envs = await client.list_envs()
            assert envs[0]["id"] == env_id and envs[0]["task_count"] > 0
            ep = await client.open(env_id, seed=0)
            assert ep.observation and all(isinstance(m, Message) for m in ep.observation)
            result = None
            while not ep.done:
                result = await ep.step(await ep.gold_action())
            assert result is not None
            score = result.info["score"]
            assert isinstance(score, Score) and score.ok and score.value == 1.0
            await ep.close()

    run(body)


def test_list_envs_describes_tools_and_verifier() -> None:
    async def body() -> None:
        async with served(["echo-v0", "slow-v0"]) as (_app, client, raw):
            envs = {e["id"]: e for e in await client.list_envs()}
            assert set(envs) == {"echo-v0", "slow-v0"}
            echo = envs["echo-v0"]
            assert echo["task_count"] == 100 and echo["verifier_id"].startswith("echo@")
            assert {t["function"]["name"] for t in echo["tools"]} == {"look", "submit"}
            assert (await raw.get("/openapi.json")).json()["paths"]["/v1/episodes"]

    run(body)


def test_step_retry_is_idempotent_and_stale_seq_is_409() -> None:
    async def body() -> None:
        async with served() as (_app, client, raw):
            ep = await client.open("echo-v0", seed=1)
            url = f"/v1/episodes/{ep.id}/step"
            first = await raw.post(url, json={"action": TEXT, "seq": 1})
            again = await raw.post(url, json={"action": TEXT, "seq": 1})
            assert first.status_code == again.status_code == 200
            assert first.content == again.content  # replayed, not re-applied
            nxt = await raw.post(url, json={"action": TEXT, "seq": 2})
            assert nxt.json()["info"]["turn"] == 2  # the retry did not cost a turn
            for stale in (1, 4):
                r = await raw.post(url, json={"action": TEXT, "seq": stale})
                assert r.status_code == 409 and r.json()["error"]["code"] == "seq_conflict"
                assert r.json()["error"]["expected_seq"] == 3
            with pytest.raises(SeqConflict) as info:
                await client.step(ep.id, TEXT, 7)
            assert info.value.expected == 3

    run(body)


def test_concurrent_duplicate_steps_are_serialised() -> None:
    async def body() -> None:
        async with served(["slow-v0"]) as (_app, client, _raw):
            ep = await client.open("slow-v0", seed=1, options=None)
            a, b = await asyncio.gather(client.step(ep.id, TEXT, 1), client.step(ep.id, TEXT, 1))
            assert a == b and a.info["turn"] == 1

    run(body)


def test_finished_episode_and_unknown_ids() -> None:
    async def body() -> None:
        async with served() as (_app, client, raw):
            ep = await client.open("echo-v0", task_id="echo-0003")
            assert ep.info["task_id"] == "echo-0003"
            result = await ep.step(submit("cloud-3"))
            assert result.terminated and result.info["score"].value == 1.0
            with pytest.raises(EpisodeFinished):
                await client.step(ep.id, TEXT, 2)
            replay = await client.step(ep.id, submit("cloud-3"), 1)
            assert replay == result  # the last reply is still replayable
            with pytest.raises(EnvNotFound, match="Did you mean 'echo-v0'"):
                await client.open("echo-v9")
            with pytest.raises(TaskNotFound):
                await client.open("echo-v0", task_id="nope")
            with pytest.raises(EpisodeNotFound, match="never opened"):
                await client.step("nope", TEXT, 1)
            await ep.close()
            with pytest.raises(EpisodeNotFound, match="closed by the client"):
                await client.step(ep.id, TEXT, 2)
            r = await raw.delete(f"/v1/episodes/{ep.id}")
            assert r.status_code == 404 and r.json()["error"]["code"] == "episode_not_found"

    run(body)


@pytest.mark.parametrize("action", [42, "plain text", {"foo": [1, 2]}, [1, 2], None,
                                    {"role": "user", "content": "hi"},
                                    {"role": "assistant", "tool_calls": "x"}])
def test_malformed_actions_are_answered_not_500(action: Any) -> None:
    async def body() -> None:
        async with served() as (_app, _client, raw):
            created = (await raw.post("/v1/episodes", json={"env": "echo-v0"})).json()
            r = await raw.post(f"/v1/episodes/{created['episode_id']}/step",
                               json={"action": action, "seq": 1})
            assert r.status_code == 200, r.text
            assert r.json()["observation"] and not r.json()["terminated"]

    run(body)


@pytest.mark.parametrize(("payload", "field"), [
    ({"env": "echo-v0", "seed": -1}, "body.seed"),
    ({"env": "echo-v0", "bogus": 1}, "body.bogus"),
    ({}, "body.env"),
])
def test_bad_requests_are_readable_422(payload: dict[str, Any], field: str) -> None:
    async def body() -> None:
        async with served() as (_app, _client, raw):
            r = await raw.post("/v1/episodes", json=payload)
            assert r.status_code == 422
            assert r.json()["error"]["code"] == "invalid_request"
            assert field in r.json()["error"]["message"]
            r = await raw.post("/v1/episodes", content=b"{not json",
                               headers={"content-type": "application/json"})
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"

    run(body)


def test_capacity_429_with_retry_after() -> None:
    async def body() -> None:
        async with served(max_episodes=2, retry_after_s=3) as (_app, client, raw):
            a = await client.open("echo-v0")
            await client.open("echo-v0")
            r = await raw.post("/v1/episodes", json={"env": "echo-v0"})
            assert r.status_code == 429 and r.headers["retry-after"] == "3"
            assert r.json()["error"]["code"] == "at_capacity"
            with pytest.raises(AtCapacity) as info:
                await client.open("echo-v0", busy_retry=False)
            assert info.value.retry_after == 3
            await a.step(submit("nothing"))  # a finished episode frees its slot
            await client.open("echo-v0")
            metrics = (await raw.get("/metrics")).text
            assert "gymhub_capacity_rejections_total 2.0" in metrics

    run(body)


def test_deadline_504_closes_the_episode() -> None:
    async def body() -> None:
        GatedEnv.reset_gate()
        # The gated step is stuck until the gate opens, so it overruns any deadline; the
        # deadline is only generous enough for the quick creation.
        async with served(["gated-v0"], step_timeout_s=1.0) as (app, client, raw):
            manager = app.state.manager
            ep = await client.open("gated-v0", seed=0)
            try:
                with pytest.raises(DeadlineExceeded):
                    await client.step(ep.id, TEXT, 1)
                assert not GatedEnv.closed  # answered while the step was still stuck
                assert manager.live == 0
                with pytest.raises(EpisodeNotFound, match="deadline"):
                    await client.step(ep.id, TEXT, 1)
            finally:
                GatedEnv.release.set()
            # the stuck step returns, then its env is closed
            await until(lambda: len(GatedEnv.closed) == 1, what="the stuck env's close")
            assert 'reason="deadline"' in (await raw.get("/metrics")).text

    run(body)


def test_idle_episodes_are_reaped() -> None:
    reg = local_registry()
    reg.register("long-echo-v0", EchoEnv, max_turns=100_000, description="echo, no turn cap")

    async def body() -> None:
        async with served(["long-echo-v0"], registry=reg, ttl_s=1.0) as (app, client, _raw):
            manager = app.state.manager
            ep = await client.open("long-echo-v0")
            busy = await client.open("long-echo-v0")
            deadline = time.monotonic() + 30  # a bound against a hang, not a window
            while ep.id in manager.episodes:  # wait for the reaper; `busy` keeps stepping
                assert time.monotonic() < deadline, "the idle episode was never reaped"
                await busy.step(TEXT)  # keeps this one alive
                await asyncio.sleep(0.01)  # pacing the steps, far inside the ttl
            with pytest.raises(EpisodeNotFound, match="reaped"):
                await ep.step(TEXT)
            assert busy.id in manager.episodes  # active within its ttl: never reaped
            await busy.close()
            assert app.state.manager.live == 0

    run(body)


def test_reap_uses_last_activity() -> None:
    async def body() -> None:
        async with served(ttl_s=100) as (app, client, _raw):
            manager = app.state.manager
            ep = await client.open("echo-v0")
            assert manager.reap(time.monotonic() + 50) == 0
            assert manager.reap(time.monotonic() + 101) == 1
            with pytest.raises(EpisodeNotFound):
                await ep.step(TEXT)

    run(body)


def test_bearer_token() -> None:
    async def body() -> None:
        async with served(token="s3cret") as (_app, client, raw):
            assert (await client.list_envs())[0]["id"] == "echo-v0"
            for headers in ({"authorization": ""}, {"authorization": "Bearer wrong"}):
                r = await raw.get("/v1/envs", headers=headers)
                assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
            assert (await raw.get("/healthz", headers={"authorization": ""})).status_code == 200
            schema = (await raw.get("/openapi.json")).json()
            assert schema["paths"]["/v1/episodes"]["post"]["security"] == [{"bearer": []}]

    run(body)


def test_body_limit_413() -> None:
    async def body() -> None:
        async with served(max_body_bytes=1000) as (_app, _client, raw):
            big = {"env": "echo-v0", "options": {"x": "y" * 2000}}
            r = await raw.post("/v1/episodes", json=big)
            assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"

            async def chunks() -> Any:
                for _ in range(5):
                    yield b" " * 400

            r = await raw.post("/v1/episodes", content=chunks(),
                               headers={"content-type": "application/json"})
            assert r.status_code == 413
            ok = await raw.post("/v1/episodes", json={"env": "echo-v0"})
            assert ok.status_code == 201

    run(body)


def test_idempotent_create_with_request_id() -> None:
    async def body() -> None:
        async with served() as (app, _client, raw):
            req = {"env": "echo-v0", "request_id": "abc"}
            a, b = await asyncio.gather(raw.post("/v1/episodes", json=req),
                                        raw.post("/v1/episodes", json=req))
            assert a.json()["episode_id"] == b.json()["episode_id"]
            assert app.state.manager.live == 1

    run(body)


def test_reference_endpoints_can_be_disabled() -> None:
    async def body() -> None:
        async with served(expose_reference=False) as (_app, client, raw):
            ep = await client.open("echo-v0")
            r = await raw.get(f"/v1/episodes/{ep.id}/gold")
            assert r.status_code == 403 and r.json()["error"]["code"] == "reference_disabled"
            assert (await raw.get("/v1/tasks", params={"env": "echo-v0"})).status_code == 200

    run(body)


def test_verify_and_cases() -> None:
    async def body() -> None:
        async with served() as (_app, client, raw):
            score = await client.verify("echo-v0", "echo-0001", "river-1")
            assert score.value == 1.0
            cases = (await raw.get("/v1/verifier-cases",
                                   params={"env": "echo-v0", "task_id": "echo-0001"})).json()
            assert {c["expect"] for c in cases} == {"pass", "fail", "malformed"}
            tasks = await client.tasks("echo-v0")
            assert len(tasks) == 100 and tasks[0] == {"id": "echo-0000",
                                                      "meta": {"difficulty": "easy"}}

    run(body)


def test_graceful_drain_closes_every_episode() -> None:
    async def body() -> None:
        GatedEnv.reset_gate()
        async with served(["gated-v0"]) as (app, client, _raw):
            manager = app.state.manager
            eps = [await client.open("gated-v0") for _ in range(3)]
            inflight = asyncio.create_task(client.step(eps[0].id, TEXT, 1))
            try:
                assert await asyncio.to_thread(GatedEnv.entered.wait, 30)  # step running
                drain = asyncio.create_task(manager.drain(30))
                await until(lambda: manager.draining, what="the drain to start")
                with pytest.raises(ServerDraining):
                    await client.open("gated-v0", busy_retry=False)
            finally:
                GatedEnv.release.set()
            result = await inflight  # the in-flight step finished
            assert result.info["turn"] == 1
            await drain
            assert manager.live == 0 and not manager.episodes
        # three episodes, the probe and nothing else: every environment was closed
        assert len(GatedEnv.closed) >= 4

    run(body)


def test_metrics_count_what_happened() -> None:
    async def body() -> None:
        async with served() as (_app, client, raw):
            ep = await client.open("echo-v0")
            await ep.step(submit("x"))
            with pytest.raises(EpisodeNotFound):
                await client.step("missing", TEXT, 1)
            text = (await raw.get("/metrics")).text
            assert 'gymhub_episodes_created_total{env="echo-v0"} 1.0' in text
            assert 'gymhub_episodes_finished_total{env="echo-v0",reason="terminated"} 1.0' in text
            assert 'gymhub_errors_total{code="episode_not_found"} 1.0' in text
            assert 'gymhub_step_seconds_count{env="echo-v0"} 1.0' in text
            assert "gymhub_episodes_open 0.0" in text
            health = (await raw.get("/healthz")).json()
            assert health == {"status": "ok", "episodes_open": 0, "max_episodes": 1024,
                              "draining": False, "incarnation": health["incarnation"]}
            assert ep.id.startswith(health["incarnation"] + "-")

    run(body)
