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

An episode can also be *lost*: its server restarted (the server answers
``episode_lost``) or stopped answering (:data:`LOST_ERRORS`). That is the
infrastructure's failure, not the policy's: the rollout marks such a trajectory lost,
and the learner masks and counts it instead of scoring it 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gymhub.errors import EpisodeLost, ServerUnreachable
from gymhub.types import Message, StepResult

if TYPE_CHECKING:
    from .config import GRPOConfig

__all__ = ["LOST_ERRORS", "EpisodeBackend", "EpisodeStart", "InProcessBackend",
           "RemoteBackend", "make_backend"]

T = TypeVar("T")

#: A backend failure that means the episode is gone through no fault of the policy: its
#: server restarted (``episode_lost``) or gave no answer within the client's retries and
#: deadline (``ServerUnreachable``, ``RequestTimeout``).
LOST_ERRORS: tuple[type[Exception], ...] = (EpisodeLost, ServerUnreachable)


def make_backend(cfg: GRPOConfig) -> EpisodeBackend:
    """The backend a config asks for: servers from a URL file or list, else in-process."""
    if cfg.env_urls_file:
        return RemoteBackend(urls_file=cfg.env_urls_file)
    if cfg.env_urls:
        return RemoteBackend(cfg.env_urls)
    return InProcessBackend({env_id: cfg.env_args for env_id in cfg.env_ids})


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

    An episode whose server lost it (:class:`~gymhub.errors.EpisodeLost`, or no answer
    at all: :data:`LOST_ERRORS`) is forgotten here at once: the pool stops counting it
    against that server, and there is nothing left on the server to close.

    Args:
        urls: ``http://host:port`` of each server (they serve the same environments).
        urls_file: instead of ``urls``, a file listing them, re-read while training
            (see :meth:`gymhub.client.pool.EnvPool.from_file`).
        pool_factory: builds the pool from ``urls`` (tests; defaults to ``EnvPool``).
        **client_kwargs: :class:`~gymhub.client.ClientConfig` fields
            (``token``, ``timeout``, ``retries`` ...).
    """

    def __init__(
        self,
        urls: Sequence[str] = (),
        *,
        urls_file: str | None = None,
        pool_factory: Callable[..., Any] | None = None,
        **client_kwargs: Any,
    ) -> None:
        if not urls and urls_file is None:
            raise ValueError("RemoteBackend needs at least one server URL or a URL file")
        self.urls = list(urls)
        self.urls_file = urls_file
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
            if self.urls_file is not None:
                pool = factory(urls_file=self.urls_file, **self._client_kwargs)
            else:
                pool = factory(self.urls, **self._client_kwargs)
            self._pool, self._loop = pool, loop
            self._episodes = {}
        return self._pool

    async def wait_ready(self, wait_s: float, notify: Callable[[str], None] | None = None
                         ) -> None:
        """Wait up to ``wait_s`` for the servers to start (see ``EnvPool.wait_ready``).

        Raises:
            ServerUnreachable: a server was still not ready at the deadline.
            ConfigError: the URL file was still missing or empty then.
        """
        waiter = getattr(self._current(), "wait_ready", None)
        if waiter is not None:
            await waiter(wait_s, notify=notify, hint="env_wait_s sets how long to wait")

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
        episode = self._episodes[episode_id]
        try:
            result: StepResult = await episode.step(action)
        except LOST_ERRORS:
            self._episodes.pop(episode_id, None)
            ended, episode.on_end = episode.on_end, None
            if ended is not None:
                ended()  # the pool stops counting it on that server
            raise
        return result

    async def close(self, episode_id: str) -> None:
        """Close the episode on its server (idempotent; a lost one is already gone)."""
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
        for client in self._current().clients:
            url = client.config.base_url
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
            clients = self._current().clients
            if not clients:
                from gymhub.errors import ServerUnreachable

                raise ServerUnreachable(f"no environment server to list the tasks of {env_id}"
                                        + (f" ({self.urls_file} lists none)"
                                           if self.urls_file else ""))
            self._task_cache[env_id] = list(await clients[0].tasks(env_id))
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
