"""Clients of the environment server: async for learners, sync for Gymnasium code.

What this client promises, because the anchors broke each of these promises:

* **It never retries forever and never hangs.** Every call has one deadline
  (``timeout``) that covers all of its attempts and the sleeps between them; when it
  passes, the call raises :class:`~gymhub.errors.RequestTimeout`. A server that
  is gone gives :class:`~gymhub.errors.ServerUnreachable` once the bounded retries
  (``retries``) are used up.
* **A lost episode is loud.** An episode lives in one server process's memory, so
  when an operation on an open episode (step, close, gold or reference action) ends
  in ``ServerUnreachable`` or ``RequestTimeout`` (the server died, was restarted or
  stopped answering past the deadline) the episode is gone with it, and the call
  raises :class:`~gymhub.errors.EpisodeLost`, chained to that cause; so does a
  server's own ``episode_lost`` answer (a restarted server names the incarnation
  that held it), which is never retried. A learner masks and counts such a rollout
  as an infrastructure failure instead of scoring it 0 or waiting on it. Opening an
  episode has nothing to lose: there a missing server stays ``ServerUnreachable``
  (a pool tries another).
* **A retried step is never applied twice.** Steps carry ``seq``; a retry sends the
  same ``seq`` with the same action (the request is encoded once, before the first
  attempt) and the server replays its cached reply; the server refuses a used
  ``seq`` with another action (``seq_reused``), so this matters. Creations carry a
  ``request_id`` for the same reason.
* **Backoff is jittered and honours ``Retry-After``** (429 at capacity, 503 while a
  server drains), so a fleet of clients does not retry in lockstep.
* **The request path is short.** httpx's default transport (httpcore, anyio, h11)
  cost ~950 us of CPU per request on the benchmark machine, and httpcore's pool
  rescans every connection on each change (the O(n^2) queue NeMo Gym hit at 16k
  requests). The async client therefore talks to a server through
  :class:`~gymhub.client.http11.Http11Transport`, an httpx transport of our own:
  keep-alive connections on a LIFO stack, ``max_connections`` enforced by one
  semaphore whose waiters queue in order, responses framed by a small
  :class:`asyncio.Protocol`. Any other httpx transport (``httpx.ASGITransport`` for
  in-process use, ``httpx.MockTransport`` in tests) can still be passed in.
* **Errors are typed.** Each server error code comes back as its own exception
  (:func:`gymhub.errors.error_from_code`), e.g.
  :class:`~gymhub.errors.EpisodeFinished` exactly as a local environment raises it.

The settings (:class:`ClientConfig`) and the retry arithmetic both clients share
live in :mod:`gymhub.client.retries`; :class:`ClientConfig` is re-exported here.

This module imports only :mod:`gymhub.types`, :mod:`gymhub.errors`, the server's
error, retry and transport modules and httpx: a learner can use it without FastAPI
or the environments.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

import httpx

from gymhub.errors import EpisodeLost, RequestTimeout, ServerError, ServerUnreachable
from gymhub.json_codec import dumps_lenient, loads
from gymhub.types import Message, Score, StepResult

from .coalesce import Coalescer, OpAnswer
from .http11 import Http11Transport
from .retries import (
    RETRY_EXC,
    Answer,
    ClientConfig,
    RetryLoop,
    RetryPolicy,
    decode_error,
)

__all__ = ["AsyncEnvClient", "ClientConfig", "RemoteEpisode", "encode_action"]

#: What :meth:`AsyncEnvClient._retrying` returns when an operation must go alone.
_UNBATCHED: Any = object()
#: Codes saying the server holds no such episode (closing one is then already done).
_GONE = frozenset({"episode_not_found", "episode_lost"})
#: Codes after which the server no longer holds an episode it held.
_ENDED = frozenset({"deadline_exceeded", "episode_not_found", "episode_lost", "env_error"})
T = TypeVar("T")


def encode_action(action: Any) -> Any:
    """Put an action on the wire: messages as dicts, everything else as JSON allows.

    An object JSON cannot hold is sent as ``{"__unserializable__": "<type>"}`` so the
    environment answers it as a malformed action, exactly as it would locally.
    """
    if isinstance(action, Message):
        return action.to_dict()
    return json.loads(_dumps(action))


def _dumps(value: Any) -> bytes:
    return dumps_lenient(value)


def _step_result(body: Mapping[str, Any]) -> StepResult:
    info = dict(body.get("info") or {})
    if body.get("score") is not None:
        info["score"] = Score.from_dict(body["score"])
    return StepResult(
        observation=[Message.from_dict(m) for m in body["observation"]],
        reward=float(body["reward"]), terminated=bool(body["terminated"]),
        truncated=bool(body["truncated"]), info=info,
    )


@dataclass
class RemoteEpisode:
    """An open episode on one server; steps number themselves.

    Attributes:
        id: the server's episode id.
        env: the environment id.
        observation: the opening messages.
        info: the opening info (task id, tools, ...).
        seq: the last step applied (0 before the first).
        done: the episode has ended.
    """

    client: AsyncEnvClient
    id: str
    env: str
    observation: list[Message]
    info: dict[str, Any]
    seq: int = 0
    done: bool = False
    on_end: Callable[[], None] | None = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)

    async def step(self, action: Any) -> StepResult:
        """Apply one action (a :class:`Message`, or a message dict).

        Raises:
            EpisodeLost: the server restarted, died or stopped answering (see
                :meth:`AsyncEnvClient.step`); ``on_end`` has run, as for every error
                after which the server no longer holds the episode.
        """
        try:
            result = await self.client.step(self.id, action, self.seq + 1)
        except ServerError as exc:
            if exc.code in _ENDED:
                self._ended()  # the server no longer holds this episode
            raise
        self.seq += 1
        if result.terminated or result.truncated:
            self.done = True
            self._ended()
        return result

    def _ended(self) -> None:
        callback, self.on_end = self.on_end, None
        if callback is not None:
            callback()

    async def gold_action(self) -> Message:
        """The server's reference action for the current state."""
        return await self.client.gold_action(self.id)

    async def close(self) -> None:
        """Close the episode on the server (idempotent)."""
        if not self._closed:
            self._closed = True
            self._ended()
            await self.client.close_episode(self.id, missing_ok=True)


class AsyncEnvClient:
    """Async client of one environment server.

    Args:
        base_url: ``http://host:port``.
        transport: an httpx transport (``httpx.ASGITransport(app)`` for in-process use).
        **config: fields of :class:`ClientConfig` (``token``, ``timeout``, ``retries`` ...).
    """

    def __init__(self, base_url: str, *, transport: httpx.AsyncBaseTransport | None = None,
                 **config: Any) -> None:
        self.config = ClientConfig(base_url=base_url, **config)
        self._policy = RetryPolicy(self.config)
        self._own = Http11Transport(max_connections=self.config.max_connections,
                                    keepalive_s=self.config.keepalive_s,
                                    timeout=self.config.timeout, uds=self.config.uds,
                                    max_response_bytes=self.config.max_response_bytes)
        self._transport = transport  # None: the built-in transport, called directly
        self._origin = self._own.origin(self.config.base_url)
        self._prefix = urlsplit(self.config.base_url).path.rstrip("/")
        self._headers = self.config.headers()
        self._header_lines = b"".join(f"{k}: {v}\r\n".encode("latin-1")
                                      for k, v in self._headers.items() if k != "content-type")
        self._json_line = b"content-type: application/json\r\n"
        self._batcher = Coalescer(self._send_batch, self._send_one,
                                  max_ops=self.config.batch_max_ops) \
            if self.config.batch else None

    async def __aenter__(self) -> AsyncEnvClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections (after the batches in flight)."""
        if self._batcher is not None:
            await self._batcher.aclose()
        await self._own.aclose()

    def _send_batch(self, body: bytes, timeout: float) -> Awaitable[Answer]:
        return self._send("POST", "/v1/batch", body, timeout)

    def _send_one(self, method: str, path: str, body: Any, timeout: float) -> Awaitable[Answer]:
        return self._send(method, "/v1" + path, _dumps(body) if body is not None else None,
                          timeout)

    async def _send(self, method: str, path: str, content: bytes | None, timeout: float
                    ) -> Answer:
        """One attempt: ``path`` is relative to the server's root (query included)."""
        if self._transport is None:
            headers = self._header_lines + self._json_line if content is not None \
                else self._header_lines
            return await self._own.exchange(self._origin, method, self._prefix + path, headers,
                                            content, timeout)
        request = httpx.Request(method, self.config.base_url.rstrip("/") + path,
                                headers=self._headers, content=content,
                                extensions={"timeout": {"connect": timeout, "read": timeout,
                                                        "write": timeout, "pool": timeout}})
        response = await self._transport.handle_async_request(request)
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response

    async def _call(self, method: str, path: str, body: Any = None, *,
                    params: Mapping[str, Any] | None = None, what: str = "",
                    busy_retry: bool = True) -> Any:
        content = _dumps(body) if body is not None else None
        target = "/v1" + path + ("?" + urlencode(params) if params else "")
        return await self._retrying(
            lambda left: self._send(method, target, content, left),
            what or f"{method} {path}", busy_retry)

    async def _op(self, op: dict[str, Any], method: str, path: str, body: Any, *, what: str,
                  busy_retry: bool = True) -> Any:
        """An episode operation: batched with its neighbours when the server allows."""
        batcher = self._batcher
        if batcher is not None and batcher.supported:
            route = (method, path, body)
            value = await self._retrying(lambda left: batcher.submit(op, route, left),
                                         what, busy_retry)
            if value is not _UNBATCHED:
                return value
            # an older server without /v1/batch: nothing was applied, send it alone
        return await self._call(method, path, body, what=what, busy_retry=busy_retry)

    async def _retrying(self, attempt: Callable[[float], Awaitable[Answer | None]], what: str,
                        busy_retry: bool) -> Any:
        """The retry contract of every call (:class:`RetryLoop`) around ``attempt``.

        ``attempt`` gets the seconds left of the call's deadline; it answers ``None``
        when the server has no batch endpoint, and then this returns ``_UNBATCHED``.
        """
        loop = RetryLoop(self._policy, what, busy_retry=busy_retry)
        while True:
            try:
                resp = await attempt(loop.time_left())
            except RETRY_EXC as e:
                await asyncio.sleep(loop.next(e))
                continue
            except TimeoutError:  # this call's own deadline passed while its batch ran
                await asyncio.sleep(loop.next(httpx.ReadTimeout(f"{what}: no answer in time")))
                continue
            if resp is None:
                return _UNBATCHED
            if resp.status_code < 400:
                return resp.value if isinstance(resp, OpAnswer) else loads(resp.content)
            await asyncio.sleep(loop.next(resp))

    async def health(self) -> dict[str, Any]:
        """``GET /healthz``: status, open episodes, capacity and the server's incarnation.

        The incarnation changes at every server start: a supervisor that sees it change
        knows every episode the server held is lost.
        """
        started = time.monotonic()
        try:
            resp = await self._send("GET", "/healthz", None, self.config.timeout)
        except RETRY_EXC as e:
            raise self._policy.give_up(e, None, "health", started, 1) from e
        if resp.status_code >= 400 and resp.status_code != 503:
            raise decode_error(resp)
        out: dict[str, Any] = loads(resp.content)
        return out

    async def list_envs(self) -> list[dict[str, Any]]:
        """Served environments with tool schemas, verifier ids and task counts."""
        body = await self._call("GET", "/envs")
        envs: list[dict[str, Any]] = body["envs"]
        return envs

    async def open(self, env: str, *, seed: int | None = None, task_id: str | None = None,
                   options: Mapping[str, Any] | None = None,
                   busy_retry: bool = True) -> RemoteEpisode:
        """Open an episode of ``env`` (retried safely: a request id makes it idempotent).

        Args:
            env: the environment id.
            seed: picks the task deterministically.
            task_id: picks a task by id.
            options: passed to the environment's reset.
            busy_retry: wait and retry on 429/503; a pool turns this off to fail over
                to another server at once.
        """
        create = _create_body(env, seed, task_id, options)
        body = await self._op({"op": "create", **create}, "POST", "/episodes", create,
                              what=f"open {env}", busy_retry=busy_retry)
        return RemoteEpisode(self, body["episode_id"], env,
                             [Message.from_dict(m) for m in body["observation"]], body["info"])

    async def _on_episode(self, episode_id: str, call: Awaitable[T]) -> T:
        """Run an operation on an open episode; a server gone with it is :class:`EpisodeLost`.

        The bounded retries have already run (a dropped connection was resent with the
        same ``seq`` and action): a server still unreachable, or silent past the call's
        deadline, no longer holds the episode for this client, whatever it did with the
        last request. That is an infrastructure failure of this one episode, not of
        the run, so it gets the episode's error rather than the server's.
        """
        try:
            return await call
        except (ServerUnreachable, RequestTimeout) as exc:
            raise EpisodeLost(f"{exc}; the server holding episode {episode_id} stopped "
                              "answering, so the episode is lost") from exc

    async def step(self, episode_id: str, action: Any, seq: int) -> StepResult:
        """Apply step ``seq`` (prefer :meth:`RemoteEpisode.step`, which counts for you).

        The request is encoded once, so every retry after a dropped connection resends
        the same ``seq`` with the same action, and a step the server had applied is
        answered from its cache rather than refused as ``seq_reused``.

        Raises:
            EpisodeLost: the server answered ``episode_lost`` (it restarted: never
                retried), or it stayed unreachable or silent through the retries and
                the deadline (see :meth:`_on_episode`).
            SeqReused: ``seq`` was already applied with another action.
        """
        req = {"action": encode_action(action), "seq": seq}
        body = await self._on_episode(episode_id, self._op(
            {"op": "step", "episode_id": episode_id, **req},
            "POST", f"/episodes/{episode_id}/step", req, what=f"step {seq} of {episode_id}"))
        return _step_result(body)

    async def gold_action(self, episode_id: str) -> Message:
        """The reference action for an episode's current state (errors as for :meth:`step`)."""
        return Message.from_dict(await self._on_episode(
            episode_id, self._call("GET", f"/episodes/{episode_id}/gold")))

    async def reference_action(self, episode_id: str, policy: str, seed: int = 0) -> Message:
        """A reference policy's next action: ``gold``, ``noop``, ``refuse`` or ``random``."""
        return Message.from_dict(await self._on_episode(episode_id, self._call(
            "GET", f"/episodes/{episode_id}/reference/{policy}?seed={int(seed)}")))

    async def close_episode(self, episode_id: str, *, missing_ok: bool = False) -> None:
        """Close an episode.

        Args:
            episode_id: the episode.
            missing_ok: an episode the server no longer holds (``episode_not_found``,
                or ``episode_lost``: a restarted or vanished server) is already
                closed, so that is not an error.
        """
        try:
            await self._on_episode(episode_id, self._op(
                {"op": "close", "episode_id": episode_id}, "DELETE",
                f"/episodes/{episode_id}", None, what=f"close {episode_id}"))
        except ServerError as exc:
            if not (missing_ok and exc.code in _GONE):
                raise

    async def tasks(self, env: str) -> list[dict[str, Any]]:
        """Task ids and tags of ``env``."""
        body = await self._call("GET", "/tasks", params={"env": env, "limit": 100_000})
        tasks: list[dict[str, Any]] = body["tasks"]
        return tasks

    async def verifier_cases(self, env: str, task_id: str) -> list[dict[str, Any]]:
        """Golden verifier cases of one task (needs the server's reference endpoints)."""
        cases: list[dict[str, Any]] = await self._call(
            "GET", "/verifier-cases", params={"env": env, "task_id": task_id})
        return cases

    async def verify(self, env: str, task_id: str, submission: Any) -> Score:
        """Score ``submission`` for a task outside any episode."""
        body = await self._call("POST", "/verify", {"task_id": task_id, "submission": submission},
                                params={"env": env})
        return Score.from_dict(body)


def _create_body(env: str, seed: int | None, task_id: str | None,
                 options: Mapping[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"env": env, "request_id": uuid.uuid4().hex}
    if seed is not None:
        body["seed"] = seed
    if task_id is not None:
        body["task_id"] = task_id
    if options:
        body["options"] = dict(options)
    return body
