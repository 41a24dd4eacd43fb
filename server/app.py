"""The FastAPI app: the HTTP face of an :class:`~gymhub.server.episodes.EpisodeManager`.

The app is a thin shell. Route handlers validate the request (pydantic, at the wire
only), hand the work to the manager, and return the bytes the manager produced, so a
step reply is serialised once, in a worker thread, and never re-validated on the way
out. In front of FastAPI sits :class:`~gymhub.server.request_guard.RequestGuard`, a
pure-ASGI layer that checks the bearer token and the body size before any body byte is
read. Open, step, close and batch are applied by one
:class:`~gymhub.server.dispatch.Dispatcher`, which the routes below call. Every failure
leaves as ``{"error": {"code", "message"}}`` with the status that
:func:`gymhub.server.error_replies.status_of` assigns to its code.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from gymhub.envs import Registry
from gymhub.envs import registry as default_registry
from gymhub.errors import GymhubError, InvalidRequest, ReferenceDisabled, error_from_code

from .dispatch import Dispatcher
from .episodes import EpisodeManager
from .error_replies import error_reply, internal_error, readable
from .metrics import CONTENT_TYPE
from .request_guard import RequestGuard
from .wire_models import (
    BatchReply,
    BatchRequest,
    CreateEpisode,
    EnvList,
    EpisodeClosed,
    EpisodeCreated,
    ErrorBody,
    Health,
    MessageModel,
    ScoreModel,
    StepReply,
    StepRequest,
    TaskList,
    VerifierCaseModel,
    VerifyRequest,
    dumps,
)

__all__ = ["API_VERSION", "create_app"]

log = logging.getLogger("gymhub.server")

API_VERSION = "v1"
_JSON = "application/json"


def create_app(
    env_ids: Sequence[str],
    *,
    registry: Registry | None = None,
    max_episodes: int = 1024,
    token: str | None = None,
    ttl_s: float | None = 600.0,
    step_timeout_s: float = 60.0,
    max_body_bytes: int = 1 << 20,
    workers: int | None = None,
    retry_after_s: float = 1.0,
    recycle: int = 64,
    idle_env_ttl_s: float | None = 60.0,
    expose_reference: bool = True,
    drain_timeout_s: float = 30.0,
    env_kwargs: dict[str, dict[str, Any]] | None = None,
) -> FastAPI:
    """Build the environment server.

    Args:
        env_ids: environments to serve; unknown ids raise ``EnvNotFound`` now, not at
            the first request.
        registry: where ids are looked up (tests pass their own); the default registry
            otherwise.
        max_episodes: cap on live episodes; beyond it, creation answers 429.
        token: if set, every ``/v1`` request needs ``Authorization: Bearer <token>``;
            ``/healthz`` and ``/metrics`` stay open for probes and scrapers.
        ttl_s: idle seconds before an episode is reaped (``None`` disables reaping).
        step_timeout_s: per-reset/step deadline; past it the reply is 504 and the
            episode is closed.
        max_body_bytes: largest request body accepted (413 beyond).
        workers: threads for environment code (default: ``min(32, cpus + 4)``).
        retry_after_s: the ``Retry-After`` a 429 carries.
        recycle: finished environments kept per id for reuse (0 disables).
        idle_env_ttl_s: idle seconds after which environments kept beyond ``recycle``
            (after a load peak) are closed; ``None`` keeps them.
        expose_reference: serve gold actions, verifier cases and ``/v1/verify`` (what
            ``check_env`` and ``--policy gold`` need); switch off on shared servers.
        drain_timeout_s: how long shutdown waits for in-flight steps.
        env_kwargs: constructor arguments per environment id.

    Returns:
        A FastAPI app; run it with uvicorn (see :mod:`gymhub.server.cli`).
    """
    manager = EpisodeManager(
        registry or default_registry, env_ids, max_episodes=max_episodes, ttl_s=ttl_s,
        step_timeout_s=step_timeout_s, workers=workers or min(32, (os.cpu_count() or 1) + 4),
        retry_after_s=retry_after_s, recycle=recycle, idle_env_ttl_s=idle_env_ttl_s,
        env_kwargs=env_kwargs,
    )
    metrics = manager.metrics
    dispatcher = Dispatcher(manager)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await manager.start()
        try:
            yield
        finally:
            await manager.drain(drain_timeout_s)

    app = ServerApp(
        title="gymhub environment server", version=API_VERSION, lifespan=lifespan,
        description="Stateful multi-turn episodes over HTTP. Errors are "
                    "{\"error\": {\"code\", \"message\"}} with stable codes.",
    )
    app.state.manager = manager

    def fail(exc: GymhubError) -> Response:
        status, body, headers = error_reply(metrics, exc)
        return Response(body, status, {k.decode(): v.decode() for k, v in headers},
                        media_type=_JSON)

    async def on_gymhub(_r: Request, exc: Exception) -> Response:
        assert isinstance(exc, GymhubError)
        return fail(exc)

    async def on_invalid(_r: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return fail(InvalidRequest(readable(list(exc.errors()))))

    async def on_http(_r: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        codes = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
        code = codes.get(exc.status_code, "invalid_request")
        status = exc.status_code if exc.status_code in codes else 422
        return fail(error_from_code(status, code, str(exc.detail)))  # the typed class, if any

    async def on_crash(_r: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc)
        return fail(internal_error(exc))

    app.add_exception_handler(GymhubError, on_gymhub)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_crash)
    app.front = RequestGuard(manager.metrics, functools.partial(FastAPI.__call__, app),
                             token=token, max_body_bytes=max_body_bytes)

    def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
        out: dict[int | str, dict[str, Any]] = {c: {"model": ErrorBody} for c in codes}
        if token is not None:
            out[401] = {"model": ErrorBody}
        return out

    def raw(body: bytes, status: int = 200) -> Response:
        return Response(body, status, media_type=_JSON)

    def reference_on() -> None:
        if not expose_reference:
            raise ReferenceDisabled("this server does not expose gold actions or verifiers")

    @app.get("/healthz", response_model=Health, tags=["ops"])
    async def healthz() -> Response:
        """Liveness, load and incarnation: 200 while serving, 503 once draining.

        A supervisor or client that sees the incarnation change knows the server
        restarted and every episode it held is lost.
        """
        body = {"status": "draining" if manager.draining else "ok",
                "episodes_open": manager.live, "max_episodes": manager.max_episodes,
                "draining": manager.draining, "incarnation": manager.incarnation}
        return raw(dumps(body), 503 if manager.draining else 200)

    @app.get("/metrics", tags=["ops"], response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
    async def prometheus() -> Response:
        """Prometheus text exposition."""
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/envs", response_model=EnvList, responses=errors(), tags=["envs"])
    async def list_envs() -> Response:
        """Served environments: ids, tool schemas, verifier ids and task counts."""
        return raw(dumps({"envs": manager.env_infos(), "incarnation": manager.incarnation}))

    @app.get("/v1/tasks", response_model=TaskList, responses=errors(404, 422), tags=["envs"])
    async def list_tasks(env: str = Query(max_length=200),
                         offset: int = Query(0, ge=0, le=10**9),
                         limit: int = Query(1000, ge=1, le=100_000)) -> Response:
        """Task ids and tags of one environment (never gold answers)."""
        return raw(dumps(await manager.tasks(env, offset, limit)))

    @app.get("/v1/verifier-cases", response_model=list[VerifierCaseModel],
             responses=errors(403, 404, 422, 504), tags=["reference"])
    async def verifier_cases(env: str = Query(max_length=200),
                             task_id: str = Query(max_length=500)) -> Response:
        """The verifier's golden cases for one task (reveals the gold answer)."""
        reference_on()
        return raw(dumps(await manager.verifier_cases(env, task_id)))

    @app.post("/v1/verify", response_model=ScoreModel, responses=errors(403, 404, 413, 422, 504),
              tags=["reference"])
    async def verify(req: VerifyRequest, env: str = Query(max_length=200)) -> Response:
        """Score a submission for a task outside any episode."""
        reference_on()
        return raw(dumps(await manager.verify(env, req.task_id, req.submission)))

    @app.post("/v1/episodes", status_code=201, response_model=EpisodeCreated,
              responses=errors(404, 413, 422, 429, 503, 504), tags=["episodes"])
    async def create_episode(req: CreateEpisode) -> Response:
        """Open an episode; the reply carries its id and first observation."""
        status, body = await dispatcher.create(req)
        return raw(body, status)

    @app.post("/v1/episodes/{episode_id}/step", response_model=StepReply,
              responses=errors(404, 409, 410, 413, 422, 504), tags=["episodes"])
    async def step(episode_id: str, req: StepRequest) -> Response:
        """Apply step ``seq``; the last ``seq`` again, with the same action, replays its reply.

        410 ``episode_lost``: the id names another server incarnation (a restart).
        """
        status, body = await dispatcher.step(episode_id, req)
        return raw(body, status)

    @app.post("/v1/batch", response_model=BatchReply, responses=errors(413, 422),
              tags=["episodes"])
    async def batch(req: BatchRequest) -> Response:
        """Many creations, steps and closes in one request; each answered as its own would be.

        A learner's client coalesces the operations of its concurrent episodes into
        one request. Statuses are per operation (``results[i].status``); the request
        itself fails only when it is malformed, too large or unauthorised.
        """
        status, body = await dispatcher.batch(req)
        return raw(body, status)

    @app.get("/v1/episodes/{episode_id}/gold", response_model=MessageModel,
             responses=errors(403, 404, 409, 410, 504), tags=["reference"])
    async def gold(episode_id: str) -> Response:
        """The reference policy's next action in this episode."""
        reference_on()
        return raw(dumps(await manager.gold(episode_id)))

    @app.get("/v1/episodes/{episode_id}/reference/{policy}", response_model=MessageModel,
             responses=errors(403, 404, 409, 410, 422, 504), tags=["reference"])
    async def reference(episode_id: str, policy: Literal["gold", "noop", "refuse", "random"],
                        seed: int = 0) -> Response:
        """A reference policy's next action (``random`` is seeded by ``seed``)."""
        reference_on()
        return raw(dumps(await manager.reference(episode_id, policy, seed)))

    @app.delete("/v1/episodes/{episode_id}", response_model=EpisodeClosed,
                responses=errors(404, 410), tags=["episodes"])
    async def close_episode(episode_id: str) -> Response:
        """Close an episode and release its environment."""
        status, body = await dispatcher.close(episode_id)
        return raw(body, status)

    if token is not None:
        _document_bearer(app)
    return app


def _document_bearer(app: FastAPI) -> None:
    """Declare the bearer scheme on every ``/v1`` operation of the OpenAPI schema."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()
        schema.setdefault("components", {}).setdefault("securitySchemes", {})["bearer"] = {
            "type": "http", "scheme": "bearer"}
        for path, ops in schema.get("paths", {}).items():
            if path.startswith("/v1/"):
                for op in ops.values():
                    op["security"] = [{"bearer": []}]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


class ServerApp(FastAPI):
    """FastAPI whose HTTP requests pass through a :class:`RequestGuard` first.

    Attributes:
        front: set by :func:`create_app`; until then requests go straight to FastAPI.
    """

    front: RequestGuard | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry: HTTP to the front door, lifespan (and anything else) to FastAPI."""
        front = self.front
        if front is not None and scope["type"] == "http":
            await front(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)
