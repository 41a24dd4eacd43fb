"""Episode backends: where the learner's episodes actually run.

A rollout talks to environments only through :class:`EpisodeBackend`: create an
episode, step it with an assistant message, close it. :class:`InProcessBackend` runs
registered environments in this process (tests, small runs); the HTTP server's async
client plugs in through :class:`RemoteBackend`, which adapts any object with the same
three coroutines, so the rollout cannot tell them apart. Blocking environment work runs
in worker threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gymhub.types import Message, StepResult

__all__ = ["EpisodeBackend", "EpisodeStart", "InProcessBackend", "RemoteBackend"]


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


class InProcessBackend:
    """Environments made in this process, one instance per episode.

    Args:
        env_kwargs: per environment id, keyword arguments for ``gymhub.envs.make``.
        factory: builds an environment from an id (defaults to ``gymhub.envs.make``).
    """

    def __init__(
        self,
        env_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        factory: Callable[..., Any] | None = None,
    ) -> None:
        if factory is None:
            from gymhub.envs import make

            factory = make
        self._factory = factory
        self._kwargs = {k: dict(v) for k, v in (env_kwargs or {}).items()}
        self._episodes: dict[str, Any] = {}
        self._ids = itertools.count()
        self._task_cache: dict[str, list[str]] = {}

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

        env, obs, info = await asyncio.to_thread(_start)
        episode_id = f"ep-{next(self._ids)}"
        self._episodes[episode_id] = env
        return EpisodeStart(episode_id, list(obs), dict(info))

    async def step(self, episode_id: str, action: Message) -> StepResult:
        """Step the episode's environment in a worker thread."""
        env = self._episodes[episode_id]
        obs, reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
        return StepResult(list(obs), float(reward), bool(terminated), bool(truncated), dict(info))

    async def close(self, episode_id: str) -> None:
        """Close and forget the environment."""
        env = self._episodes.pop(episode_id, None)
        if env is not None:
            await asyncio.to_thread(env.close)

    async def task_ids(self, env_id: str) -> list[str]:
        """Task ids from a throwaway instance (cached)."""
        if env_id not in self._task_cache:
            env = await asyncio.to_thread(self._make, env_id)
            self._task_cache[env_id] = [t.id for t in env.tasks]
            await asyncio.to_thread(env.close)
        return list(self._task_cache[env_id])

    @property
    def open_episodes(self) -> int:
        """Episodes created and not yet closed (a leak shows here)."""
        return len(self._episodes)


class RemoteBackend:
    """Adapter for the HTTP client (``gymhub.server.client``).

    The client is duck-typed: it needs coroutines ``create_episode(env, seed=,
    task_id=)`` returning an object or dict with ``episode_id``, ``observation``,
    ``info``; ``step(episode_id, action)`` returning a ``StepResult`` (or its dict);
    ``close_episode(episode_id)``; and optionally ``list_tasks(env)``.
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    async def create(
        self, env_id: str, *, task_id: str | None = None, seed: int | None = None
    ) -> EpisodeStart:
        """Create a remote episode."""
        out = await self.client.create_episode(env_id, seed=seed, task_id=task_id)
        data = out if isinstance(out, Mapping) else vars(out)
        obs = [m if isinstance(m, Message) else Message.from_dict(m) for m in data["observation"]]
        return EpisodeStart(str(data["episode_id"]), obs, dict(data.get("info") or {}))

    async def step(self, episode_id: str, action: Message) -> StepResult:
        """Step a remote episode (the client handles retries and ``seq``)."""
        out = await self.client.step(episode_id, action)
        if isinstance(out, StepResult):
            return out
        data = out if isinstance(out, Mapping) else vars(out)
        obs = [m if isinstance(m, Message) else Message.from_dict(m) for m in data["observation"]]
        info = dict(data.get("info") or {})
        score = info.get("score")
        if isinstance(score, Mapping):
            from gymhub.types import Score

            info["score"] = Score.from_dict(score)
        return StepResult(
            obs, float(data["reward"]), bool(data["terminated"]), bool(data["truncated"]), info
        )

    async def close(self, episode_id: str) -> None:
        """Close a remote episode."""
        await self.client.close_episode(episode_id)

    async def task_ids(self, env_id: str) -> list[str]:
        """Task ids, when the client can list them.

        Raises:
            NotImplementedError: the client cannot list tasks.
        """
        lister = getattr(self.client, "list_tasks", None)
        if lister is None:
            raise NotImplementedError("this client cannot list tasks; set them in the config")
        return [str(t) for t in await lister(env_id)]
