"""Incarnations: an episode of another server start is ``episode_lost`` (410), never a 404.

A restarted server holds none of its predecessor's episodes. The learner must tell
that infrastructure failure (mask and count the trajectory) from its own mistake (an
id it closed or never had), so every episode id carries the incarnation that issued it
and each server start draws a new one.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from gymhub.errors import EpisodeLost, EpisodeNotFound
from gymhub.json_codec import loads
from gymhub.server.episodes import EpisodeManager

from .conftest import local_registry, run, served

TEXT = {"role": "assistant", "content": "thinking"}
INCARNATION = re.compile(r"[0-9a-f]{8}")
EPISODE_ID = re.compile(r"([0-9a-f]{8})-[A-Za-z0-9_-]{16}")


def test_health_envs_and_episode_ids_carry_the_incarnation() -> None:
    async def body() -> None:
        async with served() as (_a, client_a, raw_a), served() as (_b, _client_b, raw_b):
            health = (await raw_a.get("/healthz")).json()
            incarnation = health["incarnation"]
            assert INCARNATION.fullmatch(incarnation)
            assert (await raw_a.get("/v1/envs")).json()["incarnation"] == incarnation
            assert (await client_a.health())["incarnation"] == incarnation
            other = (await raw_b.get("/healthz")).json()["incarnation"]
            assert other != incarnation  # every start draws its own
            ids = {(await client_a.open("echo-v0")).id for _ in range(20)}
            assert len(ids) == 20
            for episode_id in ids:  # URL-safe, bounded, and naming who issued it
                match = EPISODE_ID.fullmatch(episode_id)
                assert match is not None and match.group(1) == incarnation, episode_id

    run(body)


def test_an_episode_of_another_incarnation_is_lost_on_every_route() -> None:
    async def body() -> None:
        async with served() as (_a, client_a, _raw_a), served() as (_b, client_b, raw_b):
            ep = await client_a.open("echo-v0")
            foreign = ep.id
            answers = [
                await raw_b.post(f"/v1/episodes/{foreign}/step",
                                 json={"action": TEXT, "seq": 1}),
                await raw_b.get(f"/v1/episodes/{foreign}/gold"),
                await raw_b.get(f"/v1/episodes/{foreign}/reference/noop"),
                await raw_b.delete(f"/v1/episodes/{foreign}"),
            ]
            for r in answers:
                assert r.status_code == 410, r.text
                error = r.json()["error"]
                assert error["code"] == "episode_lost"
                assert foreign in error["message"] and "restarted" in error["message"]
            step, close = (await raw_b.post("/v1/batch", json={"ops": [
                {"op": "step", "episode_id": foreign, "seq": 1, "action": TEXT},
                {"op": "close", "episode_id": foreign}]})).json()["results"]
            assert step["status"] == close["status"] == 410
            assert step["body"]["error"]["code"] == close["body"]["error"]["code"] == "episode_lost"
            with pytest.raises(EpisodeLost):  # typed on the client, batched or not
                await client_b.step(foreign, TEXT, 1)
            await client_b.close_episode(foreign, missing_ok=True)  # already gone: fine
            with pytest.raises(EpisodeLost):
                await client_b.close_episode(foreign)
            assert (await client_a.step(foreign, TEXT, 1)).info["turn"] == 1  # A still has it
            text = (await raw_b.get("/metrics")).text
            assert 'gymhub_errors_total{code="episode_lost"}' in text

    run(body)


def test_unknown_ids_of_this_incarnation_and_malformed_ids_stay_not_found() -> None:
    async def body() -> None:
        async with served() as (_app, client, raw):
            incarnation = (await raw.get("/healthz")).json()["incarnation"]
            never = f"{incarnation}-AAAAAAAAAAAAAAAA"
            for episode_id in (never, "nope", "0123abcd", f"{incarnation}-short", "x" * 300):
                r = await raw.post(f"/v1/episodes/{episode_id}/step",
                                   json={"action": TEXT, "seq": 1})
                assert r.status_code == 404, (episode_id, r.text)
                assert r.json()["error"]["code"] == "episode_not_found"
            ep = await client.open("echo-v0")
            await ep.close()
            with pytest.raises(EpisodeNotFound, match="closed by the client"):
                await client.step(ep.id, TEXT, 1)
            (closed,) = (await raw.post("/v1/batch", json={"ops": [
                {"op": "step", "episode_id": ep.id, "seq": 1, "action": TEXT}]})).json()[
                "results"]
            assert closed["status"] == 404

    run(body)


def test_a_manager_restarted_in_process_draws_a_new_incarnation() -> None:
    async def body() -> None:
        manager = EpisodeManager(local_registry(), ["echo-v0"], workers=2)
        await manager.start()
        first = manager.incarnation
        created: dict[str, Any] = loads(await manager.create("echo-v0"))
        await manager.drain(5)
        # between the drain and a restart the episode was closed by the shutdown: lost
        with pytest.raises(EpisodeLost, match="shut down"):
            await manager.step(created["episode_id"], TEXT, 1)
        await manager.start()
        try:
            assert manager.incarnation != first
            with pytest.raises(EpisodeLost):
                await manager.step(created["episode_id"], TEXT, 1)
        finally:
            await manager.drain(5)

    run(body)
