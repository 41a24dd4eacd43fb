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

The server list may come from a file that launchers keep current
(:meth:`EnvPool.from_file`, format in :mod:`gymhub.client.url_file`). The pool re-reads
it (at most every ``reload_s``) whenever it opens an episode: a new URL joins at once;
a removed one gets no new episodes, while its live episodes finish where they are
(their :class:`RemoteEpisode` holds the client), so a server replaced under a new URL
is picked up without restarting the learner. Launchers start servers concurrently, so
:meth:`EnvPool.wait_ready` waits, up to a deadline, for the listed servers to answer.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gymhub.errors import AtCapacity, ConfigError, ServerDraining, ServerError, ServerUnreachable

from .async_client import AsyncEnvClient, RemoteEpisode
from .url_file import UrlFile

__all__ = ["EnvPool"]

#: Longest a readiness probe waits for one ``/healthz`` answer.
_PROBE_S = 5.0


@dataclass
class _Server:
    """One server the pool knows: its client and the episodes it opened there."""

    url: str
    client: AsyncEnvClient
    live: int = 0
    skip_until: float = 0.0


class EnvPool:
    """A set of servers serving the same environments.

    Args:
        urls: ``http://host:port`` of each server (or ``urls_file``).
        urls_file: a file listing them, re-read while the pool runs (see
            :meth:`from_file`).
        reload_s: look at ``urls_file`` at most this often.
        cooldown_s: how long an unreachable server is skipped.
        open_timeout: how long :meth:`open` may wait when every server is full (or,
            with ``urls_file``, unreachable or not listed yet).
        **client_kwargs: :class:`~gymhub.client.async_client.ClientConfig` fields for every
            client (``token``, ``max_connections`` per server ...).

    Raises:
        ValueError: neither ``urls`` nor ``urls_file``, or both.
        ConfigError: ``urls_file`` has a line that is not a URL.
    """

    def __init__(self, urls: Sequence[str] = (), *,
                 urls_file: str | os.PathLike[str] | None = None, reload_s: float = 1.0,
                 cooldown_s: float = 5.0, open_timeout: float = 120.0,
                 **client_kwargs: Any) -> None:
        if urls_file is None and not urls:
            raise ValueError("an EnvPool needs at least one server URL")
        if urls_file is not None and urls:
            raise ValueError("give an EnvPool its servers as urls or as urls_file, not both")
        self.cooldown_s = cooldown_s
        self.open_timeout = open_timeout
        self._client_kwargs = client_kwargs
        self._servers: list[_Server] = []  # listed now: they get new episodes
        self._known: dict[str, _Server] = {}  # every server ever listed, by URL
        self._next = 0
        self._file = UrlFile(urls_file, check_s=reload_s) if urls_file is not None else None
        if self._file is not None:
            self._file.refresh(force=True)
            urls = self._file.urls
        self._use(urls)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **kwargs: Any) -> EnvPool:
        """A pool over the servers listed in ``path``, kept current as the file changes.

        The file may be missing or empty at first (its launcher has not written it):
        :meth:`open` and :meth:`wait_ready` wait for it up to their deadlines, then fail
        naming the file. ``kwargs`` are those of :class:`EnvPool`.
        """
        return cls(urls_file=path, **kwargs)

    # ------------------------------------------------------------ the server list
    @property
    def urls(self) -> list[str]:
        """The servers that receive new episodes, in the list's order."""
        return [s.url for s in self._servers]

    @property
    def clients(self) -> list[AsyncEnvClient]:
        """Their clients, in the same order."""
        return [s.client for s in self._servers]

    @property
    def live(self) -> list[int]:
        """Episodes this pool opened on each of them and that have not ended."""
        return [s.live for s in self._servers]

    def _use(self, urls: Sequence[str]) -> None:
        """Make ``urls`` the servers for new episodes; a removed one keeps its client.

        Its live episodes still step through that client, and a URL that comes back
        gets it again; every client is closed with the pool.
        """
        servers = []
        for url in dict.fromkeys(u.rstrip("/") for u in urls):
            server = self._known.get(url)
            if server is None:
                server = self._known[url] = _Server(url, AsyncEnvClient(url,
                                                                        **self._client_kwargs))
            servers.append(server)
        self._servers = servers

    def reload(self) -> bool:
        """Re-read the URL file if it changed (at most every ``reload_s``).

        Returns whether the list changed. Called by :meth:`open`, :meth:`health` and
        :meth:`wait_ready`; a pool built from ``urls`` never changes.

        Raises:
            ConfigError: the file has a line that is not a URL.
        """
        if self._file is None or not self._file.refresh():
            return False
        self._use(self._file.urls)
        return True

    def _no_server(self) -> str:
        return self._file.problem() if self._file is not None else "no server URL"

    # --------------------------------------------------------------- lifecycle
    async def __aenter__(self) -> EnvPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every client's connection pool (of servers listed once, too)."""
        await asyncio.gather(*(s.client.aclose() for s in self._known.values()))

    # ---------------------------------------------------------------- routing
    def _order(self) -> list[_Server]:
        now = time.monotonic()
        n = len(self._servers)
        if n == 0:
            return []
        start, self._next = self._next % n, (self._next + 1) % n
        rotated = [self._servers[(start + k) % n] for k in range(n)]
        ready = [s for s in rotated if s.skip_until <= now]
        cooling = [s for s in rotated if s.skip_until > now]
        return sorted(ready, key=lambda s: s.live) + cooling

    async def open(self, env: str, *, seed: int | None = None, task_id: str | None = None,
                   options: Mapping[str, Any] | None = None) -> RemoteEpisode:
        """Open an episode on the least-loaded server that accepts it.

        Raises:
            AtCapacity: every server stayed full until ``open_timeout``.
            ServerUnreachable: no server could be reached (with a URL file: until
                ``open_timeout``, re-reading the file meanwhile), or the file lists
                none.
        """
        deadline = time.monotonic() + self.open_timeout
        while True:
            self.reload()
            wait: float | None = None
            last: ServerError | None = None
            full: ServerError | None = None
            for server in self._order():
                try:
                    ep = await server.client.open(env, seed=seed, task_id=task_id,
                                                  options=options, busy_retry=False)
                except (AtCapacity, ServerDraining) as exc:
                    full = exc
                    pause = exc.retry_after if exc.retry_after is not None else 1.0
                    server.skip_until = time.monotonic() + pause
                    wait = pause if wait is None else min(wait, pause)
                    continue
                except ServerUnreachable as exc:
                    last = exc
                    server.skip_until = time.monotonic() + self.cooldown_s
                    continue
                server.live += 1
                ep.on_end = lambda s=server: self._ended(s)
                return ep
            if self._file is not None and full is None:
                # a launcher may be replacing the servers: look at the list again
                wait = max(self._file.check_s, 0.05)
                last = last or ServerUnreachable(f"cannot open {env}: {self._no_server()}")
            if wait is None or time.monotonic() + wait > deadline:
                error = full or last or ServerUnreachable(f"cannot open {env}: no server")
                raise error  # "full" wins: it says retrying later will work
            await asyncio.sleep(wait)

    def _ended(self, server: _Server) -> None:
        server.live = max(0, server.live - 1)

    # ------------------------------------------------------------------ health
    async def health(self) -> list[dict[str, Any]]:
        """Each listed server's ``/healthz`` (or the error reaching it), in list order."""
        self.reload()

        async def one(c: AsyncEnvClient) -> dict[str, Any]:
            try:
                return {"url": c.config.base_url, **await c.health()}
            except ServerError as exc:
                return {"url": c.config.base_url, "status": "unreachable", "error": str(exc)}

        return list(await asyncio.gather(*(one(c) for c in self.clients)))

    async def _not_ready(self, probe_s: float) -> dict[str, str]:
        """Why each listed server is not ready to serve, by URL (empty: all are)."""

        async def why(server: _Server) -> str:
            try:
                body = await asyncio.wait_for(server.client.health(), probe_s)
            except ServerError as exc:  # the transport's own words say it best
                return str(exc.__cause__ or exc)
            except TimeoutError:
                return f"no /healthz answer within {probe_s:g} s"
            status = str(body.get("status", "?"))
            return "" if status == "ok" else f"status {status!r}"

        reasons = await asyncio.gather(*(why(s) for s in self._servers))
        return {s.url: r for s, r in zip(self._servers, reasons, strict=True) if r}

    async def wait_ready(self, timeout_s: float, *,
                         notify: Callable[[str], None] | None = None,
                         hint: str = "") -> list[str]:
        """Wait until every listed server answers ``/healthz`` with status ``ok``.

        Launchers bring servers up concurrently with the learner, so a refused
        connection, a 503 (starting or draining) and a missing or empty URL file are
        waited out, up to ``timeout_s``; ``notify`` is told once, with why, when the
        first look finds the fleet not ready. Returns the ready servers' URLs.

        Raises:
            ConfigError: the URL file was still missing or empty at the deadline.
            ServerUnreachable: listed servers were still not ready at the deadline
                (the message names each, and why).
        """
        deadline = time.monotonic() + timeout_s
        pause = 0.05
        told = False
        while True:
            self.reload()
            left = deadline - time.monotonic()
            if not self._servers:
                problems = {"": self._no_server()}
            else:
                problems = await self._not_ready(min(_PROBE_S, max(left, 0.5)))
                if not problems:
                    return self.urls
            if time.monotonic() >= deadline:
                self._give_up(problems, timeout_s, hint)
            if not told and notify is not None:
                told = True
                notify(f"waiting up to {timeout_s:g} s for environment servers to start: "
                       + _reasons(problems))
            pause = min(pause * 2, 1.0)
            await asyncio.sleep(max(0.0, min(pause, deadline - time.monotonic())))

    def _give_up(self, problems: Mapping[str, str], timeout_s: float, hint: str) -> None:
        after = f" after waiting {timeout_s:g} s" if timeout_s > 0 else ""
        tail = f" ({hint})" if hint else ""
        if "" in problems:
            raise ConfigError(f"{problems['']}{after}{tail}")
        raise ServerUnreachable(
            f"{len(problems)} of {len(self._servers)} environment servers not ready{after}: "
            f"{_reasons(problems)}{tail}")


def _reasons(problems: Mapping[str, str]) -> str:
    return "; ".join(f"{url}: {why}" if url else why for url, why in problems.items())
