"""``EnvClient``: the blocking face of :class:`~gymhub.client.AsyncEnvClient`.

Gymnasium code is synchronous, but the retry, timeout, batching and error contract
must not exist twice: two copies drift (the blocking twin once lacked the transport,
the batching and a timeout path the async client had). So :class:`EnvClient` holds an
:class:`AsyncEnvClient` and runs each call on a private :class:`LoopThread`; every
method returns exactly what its async namesake returns. The loop thread also keeps
the connections alive between calls, which per-call ``asyncio.run`` could not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from gymhub.types import Message, Score, StepResult

from .async_client import AsyncEnvClient, RemoteEpisode
from .loop_thread import LoopThread
from .retries import ClientConfig

__all__ = ["EnvClient"]


class EnvClient:
    """Blocking client of one environment server (what :class:`RemoteEnv` uses).

    Args:
        base_url: ``http://host:port``.
        transport: an async httpx transport (``httpx.MockTransport`` in tests,
            ``httpx.ASGITransport`` for an in-process app).
        loop: a :class:`LoopThread` to share with other clients; by default the client
            starts its own and stops it in :meth:`close`.
        **config: fields of :class:`ClientConfig`.
    """

    def __init__(self, base_url: str, *, transport: httpx.AsyncBaseTransport | None = None,
                 loop: LoopThread | None = None, **config: Any) -> None:
        self._own_loop = loop is None
        self._loop = loop or LoopThread("gymhub-env-client")
        self.aio = AsyncEnvClient(base_url, transport=transport, **config)

    @property
    def config(self) -> ClientConfig:
        """The settings of the underlying async client."""
        return self.aio.config

    def close(self) -> None:
        """Close the connections (and the loop thread, if this client started it)."""
        if self._loop.closed:
            return
        self._loop.run(self.aio.aclose())
        if self._own_loop:
            self._loop.close()

    def __enter__(self) -> EnvClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def health(self) -> dict[str, Any]:
        """See :meth:`AsyncEnvClient.health`."""
        return self._loop.run(self.aio.health())

    def list_envs(self) -> list[dict[str, Any]]:
        """See :meth:`AsyncEnvClient.list_envs`."""
        return self._loop.run(self.aio.list_envs())

    def open(self, env: str, *, seed: int | None = None, task_id: str | None = None,
             options: Mapping[str, Any] | None = None) -> RemoteEpisode:
        """See :meth:`AsyncEnvClient.open`.

        The returned episode's own ``step``/``close`` are coroutines of the async
        client; from blocking code step it with :meth:`step` and its ``id``.
        """
        return self._loop.run(self.aio.open(env, seed=seed, task_id=task_id, options=options))

    def step(self, episode_id: str, action: Any, seq: int) -> StepResult:
        """See :meth:`AsyncEnvClient.step`."""
        return self._loop.run(self.aio.step(episode_id, action, seq))

    def gold_action(self, episode_id: str) -> Message:
        """See :meth:`AsyncEnvClient.gold_action`."""
        return self._loop.run(self.aio.gold_action(episode_id))

    def reference_action(self, episode_id: str, policy: str, seed: int = 0) -> Message:
        """See :meth:`AsyncEnvClient.reference_action`."""
        return self._loop.run(self.aio.reference_action(episode_id, policy, seed))

    def close_episode(self, episode_id: str, *, missing_ok: bool = False) -> None:
        """See :meth:`AsyncEnvClient.close_episode`."""
        self._loop.run(self.aio.close_episode(episode_id, missing_ok=missing_ok))

    def tasks(self, env: str) -> list[dict[str, Any]]:
        """See :meth:`AsyncEnvClient.tasks`."""
        return self._loop.run(self.aio.tasks(env))

    def verifier_cases(self, env: str, task_id: str) -> list[dict[str, Any]]:
        """See :meth:`AsyncEnvClient.verifier_cases`."""
        return self._loop.run(self.aio.verifier_cases(env, task_id))

    def verify(self, env: str, task_id: str, submission: Any) -> Score:
        """See :meth:`AsyncEnvClient.verify`."""
        return self._loop.run(self.aio.verify(env, task_id, submission))
