"""Environment code that overruns, raises or is abandoned never leaves a broken episode open.

Each test drives the server with a test-local environment that fails in one way, and
checks what the client is told and that the server no longer holds the episode (so
its capacity slot and its environment are released at once, not by the TTL reaper).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, ClassVar

import httpx
import pytest

from gymhub.envs import Registry
from gymhub.envs.echo import EchoEnv
from gymhub.errors import (
    BackendError,
    DeadlineExceeded,
    EnvCrashed,
    EpisodeNotFound,
    InternalServerError,
    ServerDraining,
)
from gymhub.server.error_replies import internal_error
from gymhub.server.workers import Workers
from gymhub.types import Message, StepResult

from .conftest import run, served, until

TEXT = {"role": "assistant", "content": "thinking"}


class SlowGold(EchoEnv):
    """Echo whose gold action outlives any test deadline: it waits for the test."""

    release: ClassVar[threading.Event] = threading.Event()

    def gold_action(self) -> Message:
        SlowGold.release.wait(30)  # a bound against a hang
        message: Message = super().gold_action()
        return message


class CrashingGold(EchoEnv):
    """Echo whose gold action has a bug."""

    def gold_action(self) -> Message:
        raise RuntimeError("gold bug")


class LostBackend(EchoEnv):
    """Echo whose database connection dies on the first step."""

    def _step(self, action: Message) -> StepResult:
        raise BackendError("server closed the connection unexpectedly")


class BlockingReset(EchoEnv):
    """Echo whose reset waits for the test; records its closes."""

    started: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()
    closed: ClassVar[list[int]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[list[Message], dict[str, Any]]:
        BlockingReset.started.set()
        BlockingReset.release.wait(5)
        out: tuple[list[Message], dict[str, Any]] = super().reset(seed=seed, options=options)
        return out

    def close(self) -> None:
        BlockingReset.closed.append(id(self))
        super().close()


def _registry() -> Registry:
    reg = Registry()
    for env_id, klass in [("slow-gold-v0", SlowGold), ("crash-gold-v0", CrashingGold),
                          ("lost-backend-v0", LostBackend), ("blocking-v0", BlockingReset)]:
        reg.register(env_id, klass, max_turns=4, description=env_id)
    return reg


def test_gold_past_the_deadline_closes_the_episode() -> None:
    async def body() -> None:
        SlowGold.release.clear()
        # The gold action is stuck until released, so it overruns any deadline; the
        # deadline is only generous enough for the quick creation.
        async with served(["slow-gold-v0"], registry=_registry(),
                          step_timeout_s=1.0) as (app, client, _raw):
            ep = await client.open("slow-gold-v0", seed=0)
            try:
                with pytest.raises(DeadlineExceeded):
                    await ep.gold_action()
                assert app.state.manager.live == 0  # the capacity slot is free at once
                with pytest.raises(EpisodeNotFound, match="gold action ran past"):
                    await client.step(ep.id, TEXT, 1)  # 404, not a 409 on a kept episode
            finally:
                SlowGold.release.set()

    run(body)


def test_gold_that_raises_is_env_error_and_closes_the_episode() -> None:
    async def body() -> None:
        async with served(["crash-gold-v0"], registry=_registry()) as (app, client, raw):
            ep = await client.open("crash-gold-v0", seed=0)
            r = await raw.get(f"/v1/episodes/{ep.id}/gold")
            assert r.status_code == 500 and r.json()["error"]["code"] == "env_error"
            assert app.state.manager.live == 0
            with pytest.raises(EpisodeNotFound, match="crashed in the gold action"):
                await client.step(ep.id, TEXT, 1)

    run(body)


def test_backend_error_in_step_closes_the_episode_with_a_stable_code() -> None:
    async def body() -> None:
        async with served(["lost-backend-v0"], registry=_registry()) as (app, client, raw):
            ep = await client.open("lost-backend-v0", seed=0)
            r = await raw.post(f"/v1/episodes/{ep.id}/step", json={"action": TEXT, "seq": 1})
            assert r.status_code == 500
            error = r.json()["error"]
            assert error["code"] == "env_error" and "BackendError" in error["message"]
            assert app.state.manager.live == 0
            with pytest.raises(EpisodeNotFound, match="crashed in step 1"):
                await client.step(ep.id, TEXT, 1)
            assert 'reason="env_error"' in (await raw.get("/metrics")).text
            other = await client.open("lost-backend-v0", seed=0)
            with pytest.raises(EnvCrashed):  # the typed error on the client side
                await other.step(TEXT)

    run(body)


def test_creation_cancelled_mid_reset_closes_the_env_it_built() -> None:
    async def body() -> None:
        BlockingReset.started.clear()
        BlockingReset.release.clear()
        BlockingReset.closed.clear()
        async with served(["blocking-v0"], registry=_registry(), recycle=0) as (app, _c, _r):
            manager = app.state.manager
            task = asyncio.create_task(manager.create("blocking-v0", seed=0))
            assert await asyncio.to_thread(BlockingReset.started.wait, 5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert manager.live == 0 and not manager.episodes
            BlockingReset.release.set()  # the reset returns: its env is closed, not leaked
            await until(lambda: len(BlockingReset.closed) >= 1, what="the built env's close")
            assert len(BlockingReset.closed) == 1

    run(body)


def test_work_cancelled_by_shutdown_is_a_typed_503_not_a_cancelled_request() -> None:
    async def body() -> None:
        pool = Workers(1, timeout_s=30)
        running = threading.Event()
        gate = threading.Event()

        def blocked() -> bool:
            running.set()
            return gate.wait(30)

        busy = asyncio.create_task(pool.run(blocked))
        queued = asyncio.create_task(pool.run(lambda: "never runs"))
        assert await asyncio.to_thread(running.wait, 30)  # the second call is queued
        pool.shutdown()  # cancels the queued call
        gate.set()
        assert await busy is True
        with pytest.raises(ServerDraining):
            await queued

    run(body)


def test_unanticipated_errors_are_one_typed_internal_error() -> None:
    err = internal_error(KeyError("secret"))
    assert isinstance(err, InternalServerError)
    assert (err.code, err.status) == ("internal_error", 500)
    assert "secret" not in str(err) and "KeyError" in str(err)

    async def body() -> None:
        async with served() as (app, client, _raw):
            manager = app.state.manager
            # Starlette re-raises a crash after answering it; read the answer instead.
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            raw = httpx.AsyncClient(transport=transport, base_url="http://test")

            def broken(*_a: Any, **_k: Any) -> Any:
                raise KeyError("secret")

            manager.env_infos = broken  # answered by the FastAPI app
            manager.step = broken  # answered by the fast front
            ep = await client.open("echo-v0")
            for r in [await raw.get("/v1/envs"),
                      await raw.post(f"/v1/episodes/{ep.id}/step",
                                     json={"action": TEXT, "seq": 1})]:
                assert r.status_code == 500
                assert r.json()["error"]["code"] == "internal_error"
            await raw.aclose()

    run(body)
