"""``EnvPool``: spread episodes over several servers, keep each episode on its own.

Scale-out is several independent ``gymhub serve`` processes (one per core, or per
machine) rather than one server with shared state: episodes live in a process's
memory, so the only thing that must be routed is the *first* request of an episode.
The pool picks the server with the fewest live episodes it has opened there (ties
round-robin), and the returned :class:`~gymhub.client.async_client.RemoteEpisode` holds
that server's client, so every later step goes to the same server by construction.

A server that refuses (429 at capacity, 503 draining) or cannot be reached is
skipped for a cool-down and the next one is tried at once, so one full or dead
server does not stall the learner; only when every server refuses does the pool
wait (honouring the smallest ``Retry-After``) until its deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from gymhub.errors import AtCapacity, ServerDraining, ServerError, ServerUnreachable

from .async_client import AsyncEnvClient, RemoteEpisode

__all__ = ["EnvPool"]


class EnvPool:
    """A set of servers serving the same environments.

    Args:
        urls: ``http://host:port`` of each server.
        cooldown_s: how long an unreachable server is skipped.
        open_timeout: how long :meth:`open` may wait when every server is full.
        **client_kwargs: :class:`~gymhub.client.async_client.ClientConfig` fields for every
            client (``token``, ``max_connections`` per server ...).
    """

    def __init__(self, urls: Sequence[str], *, cooldown_s: float = 5.0,
                 open_timeout: float = 120.0,
                 **client_kwargs: Any) -> None:
        if not urls:
            raise ValueError("an EnvPool needs at least one server URL")
        self.clients = [AsyncEnvClient(u, **client_kwargs) for u in urls]
        self.cooldown_s = cooldown_s
        self.open_timeout = open_timeout
        self.live = [0] * len(self.clients)
        self._skip_until = [0.0] * len(self.clients)
        self._next = 0

    async def __aenter__(self) -> EnvPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every client's connection pool."""
        await asyncio.gather(*(c.aclose() for c in self.clients))

    def _order(self) -> list[int]:
        now = time.monotonic()
        n = len(self.clients)
        start, self._next = self._next, (self._next + 1) % n
        rotated = [(start + k) % n for k in range(n)]
        ready = [i for i in rotated if self._skip_until[i] <= now]
        cooling = [i for i in rotated if self._skip_until[i] > now]
        return sorted(ready, key=lambda i: self.live[i]) + cooling

    async def open(self, env: str, *, seed: int | None = None, task_id: str | None = None,
                   options: Mapping[str, Any] | None = None) -> RemoteEpisode:
        """Open an episode on the least-loaded server that accepts it.

        Raises:
            AtCapacity: every server stayed full until ``open_timeout``.
            ServerUnreachable: no server could be reached.
        """
        deadline = time.monotonic() + self.open_timeout
        while True:
            wait: float | None = None
            last: ServerError | None = None
            full: ServerError | None = None
            for i in self._order():
                try:
                    ep = await self.clients[i].open(env, seed=seed, task_id=task_id,
                                                    options=options, busy_retry=False)
                except (AtCapacity, ServerDraining) as exc:
                    full = exc
                    pause = exc.retry_after if exc.retry_after is not None else 1.0
                    self._skip_until[i] = time.monotonic() + pause
                    wait = pause if wait is None else min(wait, pause)
                    continue
                except ServerUnreachable as exc:
                    last = exc
                    self._skip_until[i] = time.monotonic() + self.cooldown_s
                    continue
                self.live[i] += 1
                ep.on_end = lambda i=i: self._ended(i)
                return ep
            if wait is None or time.monotonic() + wait > deadline:
                error = full or last
                assert error is not None
                raise error  # "full" wins: it says retrying later will work
            await asyncio.sleep(wait)

    def _ended(self, i: int) -> None:
        self.live[i] = max(0, self.live[i] - 1)

    async def health(self) -> list[dict[str, Any]]:
        """Each server's ``/healthz`` (or the error reaching it), in ``urls`` order."""

        async def one(c: AsyncEnvClient) -> dict[str, Any]:
            try:
                return {"url": c.config.base_url, **await c.health()}
            except ServerError as exc:
                return {"url": c.config.base_url, "status": "unreachable", "error": str(exc)}

        return list(await asyncio.gather(*(one(c) for c in self.clients)))
