"""Episode backends: where the learner's episodes actually run.

A rollout talks to environments only through :class:`EpisodeBackend`: create an
episode, step it with an assistant message, close it. :class:`InProcessBackend` runs
registered environments in this process (tests, small runs); :class:`RemoteBackend`
runs them on environment servers through the HTTP client's pool, so the rollout
cannot tell them apart. Blocking environment work runs
in worker threads, never on the event loop.

The one exception is work too small to block anything: a worker-thread hop costs the
loop ~0.1 ms (a queue put that wakes a worker and hands it the GIL, and the reply through
the loop's self-pipe), more than a step of a pure-Python environment such as echo-v0,
which holds the GIL in the worker anyway. So :class:`InProcessBackend` times each kind
of call (start, step, close) of each environment, and once such calls have all been
cheap for a while it makes them on the loop; the first one that is not cheap sends them
back to the threads for good (see :class:`_Placement`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from gymhub.types import Message, StepResult

__all__ = ["EpisodeBackend", "EpisodeStart", "InProcessBackend", "RemoteBackend"]

T = TypeVar("T")


@dataclass
class EpisodeStart:
    """A new episode: its id, the opening messages and the reset ``info``."""

    episode_id: str
    observation: list[Message]
    info: dict[str, Any]


class EpisodeBackend(Protocol):
    """Creates, steps and closes episodes (in-process or over HTTP)."""

    async def create(
        self, env_id: str, *, task_id: str | None = None, seed: int | None = None
    ) -> EpisodeStart:
        """Start an episode of ``env_id`` on a task."""
        ...

    async def step(self, episode_id: str, action: Message) -> StepResult:
        """Apply one assistant message."""
        ...

    async def close(self, episode_id: str) -> None:
        """Release the episode (idempotent)."""
        ...

    async def task_ids(self, env_id: str) -> list[str]:
        """Every task id of ``env_id``, in the environment's order."""
        ...


class _Placement:
    """Where one kind of call of one environment runs: worker threads, until cheap.

    ``proof`` calls in a row under ``cheap_s`` move them onto the loop; a call on the
    loop that takes over ``4 * cheap_s`` moves them back to the threads, and they stay
    there (an environment that can block is not trusted again).
    """

    def __init__(self, cheap_s: float, proof: int = 16) -> None:
        self.cheap_s = cheap_s
        self.proof = proof
        self.inline = False
        self.demoted = False
        self._cheap_in_a_row = 0

    def record(self, seconds: float) -> None:
        if self.inline:
            if seconds > 4 * self.cheap_s:
                self.inline, self.demoted = False, True
            return
        self._cheap_in_a_row = self._cheap_in_a_row + 1 if seconds < self.cheap_s else 0
        if not self.demoted and self._cheap_in_a_row >= self.proof:
            self.inline = True


def _timed(fn: Callable[..., T], *args: Any) -> tuple[T, float]:
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


class InProcessBackend:
    """Environments made in this process, one instance per episode.

    Args:
        env_kwargs: per environment id, keyword arguments for ``gymhub.envs.make``.
        factory: builds an environment from an id (defaults to ``gymhub.envs.make``).
        inline_below_ms: an environment's calls of one kind (make and reset, step,
            close) that keep under this many milliseconds are made on the event loop
            instead of a worker thread (see the module docstring); ``None`` always
            uses threads.
    """

    def __init__(
        self,
        env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        factory: Callable[..., Any] | None = None,
        inline_below_ms: float | None = 0.25,
    ) -> None:
        if factory is None:
            from gymhub.envs import make

            factory = make
        self._factory = factory
        self._kwargs = {k: dict(v) for k, v in (env_kwargs or {}).items()}
        self._episodes: dict[str, Any] = {}
        self._ids = itertools.count()
        self._task_cache: dict[str, list[dict[str, Any]]] = {}
        self._inline_s = None if inline_below_ms is None else inline_below_ms / 1000
        self._placements: dict[str, _Placement] = {}
        self._env_ids: dict[str, str] = {}  # episode id -> environment id

    @property
    def inline_envs(self) -> list[str]:
        """``env_id:call`` (``start``, ``step``, ``close``) of the calls now made on the loop."""
        return sorted(key for key, p in self._placements.items() if p.inline)

    async def _call(self, env_id: str, kind: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the loop or in a worker thread, as that kind of call earned.

        Each kind of call of each environment earns it on its own: an environment whose
        reset is cheap but whose steps run code still steps in worker threads.
        """
        if self._inline_s is None:
            return await asyncio.to_thread(fn, *args)
        key = f"{env_id}:{kind}"
        place = self._placements.get(key)
        if place is None:
            place = self._placements[key] = _Placement(self._inline_s)
        if place.inline:
            out, seconds = _timed(fn, *args)
        else:
            out, seconds = await asyncio.to_thread(_timed, fn, *args)
        place.record(seconds)
        return out

    def _make(self, env_id: str) -> Any:
        return self._factory(env_id, **self._kwargs.get(env_id, {}))

    async def create(
        self, env_id: str, *, task_id: str | None = None, seed: int | None = None
    ) -> EpisodeStart:
        """Make an environment and reset it."""

        def _start() -> tuple[Any, list[Message], dict[str, Any]]:
            env = self._make(env_id)
            options = {"task_id": task_id} if task_id is not None else None
            obs, info = env.reset(seed=seed, options=options)
            return env, obs, info

        env, obs, info = await self._call(env_id, "start", _start)
        episode_id = f"ep-{next(self._ids)}"
        self._episodes[episode_id] = env
        self._env_ids[episode_id] = env_id
        return EpisodeStart(episode_id, list(obs), dict(info))

    async def step(self, episode_id: str, action: Message) -> StepResult:
        """Step the episode's environment (in a worker thread unless it is cheap)."""
        env = self._episodes[episode_id]
        obs, reward, terminated, truncated, info = await self._call(
            self._env_ids[episode_id], "step", env.step, action)
        return StepResult(list(obs), float(reward), bool(terminated), bool(truncated), dict(info))

    async def close(self, episode_id: str) -> None:
        """Close and forget the environment."""
        env = self._episodes.pop(episode_id, None)
        env_id = self._env_ids.pop(episode_id, "")
        if env is not None:
            await self._call(env_id, "close", env.close)

    async def tasks(self, env_id: str) -> list[dict[str, Any]]:
        """``{"id", "meta"}`` of every task, from a throwaway instance (cached)."""
        if env_id not in self._task_cache:
            env = await asyncio.to_thread(self._make, env_id)
            self._task_cache[env_id] = [
                {"id": t.id, "meta": dict(getattr(t, "meta", None) or {})} for t in env.tasks
            ]
            await asyncio.to_thread(env.close)
        return [dict(t) for t in self._task_cache[env_id]]

    async def task_ids(self, env_id: str) -> list[str]:
        """Task ids, in the environment's order."""
        return [str(t["id"]) for t in await self.tasks(env_id)]

    @property
    def open_episodes(self) -> int:
        """Episodes created and not yet closed (a leak shows here)."""
        return len(self._episodes)


class RemoteBackend:
    """Episodes on environment servers, through :class:`gymhub.client.pool.EnvPool`.

    The pool spreads new episodes over ``urls`` and keeps each one on its server; the
    :class:`~gymhub.client.RemoteEpisode` it returns numbers the steps, so a
    retried step is never applied twice. Connections and asyncio semaphores belong to
    one event loop; the trainer keeps one loop for the whole run
    (:meth:`~gymhub.trainer.loop.GRPOTrainer.close` ends it), so the pool is made
    lazily in that loop, once, and :meth:`aclose` releases it at the end. Should a
    caller drive the backend from another loop, that loop gets a pool of its own.
    Task lists are cached across loops.

    Args:
        urls: ``http://host:port`` of each server (they serve the same environments).
        pool_factory: builds the pool from ``urls`` (tests; defaults to ``EnvPool``).
        **client_kwargs: :class:`~gymhub.client.ClientConfig` fields
            (``token``, ``timeout``, ``retries`` ...).
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        pool_factory: Callable[..., Any] | None = None,
        **client_kwargs: Any,
    ) -> None:
        if not urls:
            raise ValueError("RemoteBackend needs at least one server URL")
        self.urls = list(urls)
        self._factory = pool_factory
        self._client_kwargs = client_kwargs
        self._pool: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._episodes: dict[str, Any] = {}
        self._task_cache: dict[str, list[dict[str, Any]]] = {}

    def _current(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._loop is not loop:
            factory = self._factory
            if factory is None:
                from gymhub.client.pool import EnvPool

                factory = EnvPool
            self._pool, self._loop = factory(self.urls, **self._client_kwargs), loop
            self._episodes = {}
        return self._pool

    async def create(
        self, env_id: str, *, task_id: str | None = None, seed: int | None = None
    ) -> EpisodeStart:
        """Open an episode on the least-loaded server."""
        episode = await self._current().open(env_id, seed=seed, task_id=task_id)
        key = f"{id(episode.client)}/{episode.id}"  # ids are unique per server only
        self._episodes[key] = episode
        return EpisodeStart(key, list(episode.observation), dict(episode.info))

    async def step(self, episode_id: str, action: Message) -> StepResult:
        """Step the episode on the server that holds it."""
        result: StepResult = await self._episodes[episode_id].step(action)
        return result

    async def close(self, episode_id: str) -> None:
        """Close the episode on its server (idempotent)."""
        episode = self._episodes.pop(episode_id, None)
        if episode is not None:
            await episode.close()

    async def check(self, env_ids: Sequence[str], env_args: Mapping[str, Any]) -> None:
        """Fail before training if a server lacks an environment or runs it differently.

        A learner configured with ``show_schema = true`` against a server started
        without it would train on prompts nobody intended, and nothing would say so.

        An empty ``env_args`` accepts whatever arguments a server runs with; a
        non-empty one must equal them exactly.

        Raises:
            ConfigError: an environment is not served by every server, or a server's
                constructor arguments (``gymhub serve --env-arg``) differ from
                ``env_args``.
        """
        from gymhub.errors import ConfigError

        problems = []
        for url, client in zip(self.urls, self._current().clients, strict=True):
            served = {e["id"]: e for e in await client.list_envs()}
            for env_id in env_ids:
                info = served.get(env_id)
                if info is None:
                    problems.append(f"{url} does not serve {env_id} (it serves "
                                    f"{', '.join(sorted(served)) or 'nothing'})")
                    continue
                theirs = info.get("env_args") or {}
                if env_args and theirs != dict(env_args):
                    problems.append(f"{url} runs {env_id} with {theirs}, but the config asks "
                                    f"for exactly {dict(env_args)} (start it with "
                                    + " ".join(f"--env-arg {k}={json.dumps(v)}"
                                               for k, v in env_args.items()) + ")")
        if problems:
            raise ConfigError("; ".join(problems))

    async def tasks(self, env_id: str) -> list[dict[str, Any]]:
        """``{"id", "meta"}`` of every task of ``env_id`` (from the first server; cached)."""
        if env_id not in self._task_cache:
            self._task_cache[env_id] = list(await self._current().clients[0].tasks(env_id))
        return [dict(t) for t in self._task_cache[env_id]]

    async def task_ids(self, env_id: str) -> list[str]:
        """Every task id of ``env_id``, in the server's order."""
        return [str(t["id"]) for t in await self.tasks(env_id)]

    async def aclose(self) -> None:
        """Close open episodes and the pool of this event loop."""
        pool, self._pool, self._loop = self._pool, None, None
        episodes, self._episodes = list(self._episodes.values()), {}
        for episode in episodes:
            with contextlib.suppress(Exception):  # the server's TTL reaper is the backstop
                await episode.close()
        if pool is not None:
            await pool.aclose()
