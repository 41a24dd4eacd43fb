"""The server's front door: a pure-ASGI layer in front of FastAPI.

Why it exists: a trivial step through FastAPI's full stack (error middleware,
exception middleware, router, dependency solving, body parsing, endpoint wrapper)
cost more CPU than everything else in the request together. The routes every
episode uses (open, step, close, and their batch) are therefore answered here
directly, from the ASGI scope: the body is validated once by the same pydantic
models FastAPI uses (parsed from the raw bytes in pydantic-core, without a Python
dict in between), the same :class:`~gymhub.server.dispatch.Dispatcher` the FastAPI
routes call applies the operation, and its reply bytes are sent as they are. Every
other route, and any hot-route request this layer does not fully understand (an
unusual content type, a ``root_path``), falls through to FastAPI, so the OpenAPI
schema, the validation errors and the error codes stay those of the FastAPI app.

Authentication and the body-size limit are checked here for every request, before a
body byte is read, also with ``fast_routes=False`` (every route then goes to FastAPI:
``gymhub serve --no-fast-routes``, what ``benchmarks/bench_server.py
--compare-fast-routes`` measures this layer against).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.types import Message, Receive, Scope, Send

from gymhub.errors import GymhubError, InvalidRequest, PayloadTooLarge, Unauthorized

from .dispatch import Dispatcher, Reply
from .error_replies import Headers, error_reply, internal_error, readable
from .wire_models import BatchRequest, CreateEpisode, StepRequest

__all__ = ["AsgiFront"]

log = logging.getLogger("gymhub.server")

M = TypeVar("M", bound=BaseModel)
ASGICall = Callable[[Scope, Receive, Send], Awaitable[None]]

_BATCH = "/v1/batch"
_EPISODES = "/v1/episodes"
_PREFIX = "/v1/episodes/"
_STEP = "/step"
_JSON_TYPES = frozenset({b"application/json", b"application/json; charset=utf-8",
                         b"application/json;charset=utf-8"})
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


async def send_json(send: Send, status: int, body: bytes, headers: Headers | None = None) -> None:
    """Send a complete JSON response in two ASGI messages."""
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if headers:
        head.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


class AsgiFront:
    """Auth, body limit and the hot routes; everything else goes to ``fallback``.

    Args:
        dispatcher: applies the hot routes' operations (the FastAPI routes use it too).
        fallback: the FastAPI app's own ASGI entry.
        token: the bearer token ``/v1`` requires, if any.
        max_body_bytes: largest request body accepted (413 beyond).
        fast_routes: answer open, step, close and batch here; off, only auth and the
            body limit are checked here and FastAPI answers every route.
    """

    def __init__(self, dispatcher: Dispatcher, fallback: ASGICall, *, token: str | None,
                 max_body_bytes: int, fast_routes: bool = True) -> None:
        self.dispatcher = dispatcher
        self.metrics = dispatcher.manager.metrics
        self.fast_routes = fast_routes
        self.fallback = fallback
        self.expected = f"Bearer {token}".encode() if token is not None else None
        self.max_body = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one HTTP request (other scope types never reach here)."""
        path: str = scope["path"]
        method: str = scope["method"]
        auth = length = ctype = None
        for key, value in scope["headers"]:
            if key == b"authorization":
                auth = value
            elif key == b"content-length":
                length = value
            elif key == b"content-type":
                ctype = value
        if self.expected is not None and path.startswith("/v1/") and not hmac.compare_digest(
                auth or b"", self.expected):
            what = "a wrong" if auth else "no"
            await self._fail(send, Unauthorized(
                f"{what} bearer token; send 'Authorization: Bearer <token>'"))
            return
        if length is not None:
            try:
                size = int(length)
            except ValueError:
                size = 0
            if size > self.max_body:
                await self._fail(send, self._too_big())
                return
        route = None
        if self.fast_routes and (ctype is None or ctype.lower() in _JSON_TYPES) \
                and not scope.get("root_path"):
            route = self._route(method, path)
        if route is None:
            if length is None and method in _BODY_METHODS:
                body = await self._read(receive, send)
                if body is None:
                    return
                receive = _replay(body, receive)
            await self.fallback(scope, receive, send)
            return
        handler, episode_id = route
        body = await self._read(receive, send) if method in _BODY_METHODS else b""
        if body is None:
            return
        try:
            status, reply = await handler(episode_id, body)
        except GymhubError as exc:
            await self._fail(send, exc)
            return
        except ValidationError as exc:
            await self._fail(send, InvalidRequest(readable(exc.errors(), "body")))
            return
        except Exception as exc:
            log.exception("unhandled error", exc_info=exc)
            await self._fail(send, internal_error(exc))
            return
        await send_json(send, status, reply)

    def _route(self, method: str, path: str
               ) -> tuple[Callable[[str, bytes], Awaitable[Reply]], str] | None:
        if method == "POST":
            if path == _BATCH:
                return self._batch, ""
            if path == _EPISODES:
                return self._create, ""
            if path.startswith(_PREFIX) and path.endswith(_STEP):
                episode_id = path[len(_PREFIX):-len(_STEP)]
                if episode_id and "/" not in episode_id:
                    return self._step, episode_id
        elif method == "DELETE" and path.startswith(_PREFIX):
            episode_id = path[len(_PREFIX):]
            if episode_id and "/" not in episode_id:
                return self._close, episode_id
        return None

    async def _create(self, _episode_id: str, body: bytes) -> Reply:
        return await self.dispatcher.create(_parse(CreateEpisode, body))

    async def _step(self, episode_id: str, body: bytes) -> Reply:
        return await self.dispatcher.step(episode_id, _parse(StepRequest, body))

    async def _batch(self, _episode_id: str, body: bytes) -> Reply:
        return await self.dispatcher.batch(_parse(BatchRequest, body))

    async def _close(self, episode_id: str, _body: bytes) -> Reply:
        return await self.dispatcher.close(episode_id)

    def _too_big(self) -> PayloadTooLarge:
        return PayloadTooLarge(f"request body is larger than {self.max_body} bytes")

    async def _read(self, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or ``None`` once a 413 was sent or the client went away."""
        body = b""
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return None
            body += message.get("body", b"")
            if len(body) > self.max_body:
                await self._fail(send, self._too_big())
                return None
            more = message.get("more_body", False)
        return body

    async def _fail(self, send: Send, exc: GymhubError) -> None:
        status, body, headers = error_reply(self.metrics, exc)
        await send_json(send, status, body, headers)


def _parse(model: type[M], body: bytes) -> M:
    """Validate a JSON body with ``model``, straight from the bytes when possible.

    pydantic-core's parser refuses lone surrogate escapes (a backslash-u DCFF) that the
    standard library accepts; an agent's garbage must still reach the environment
    (which answers it as a malformed action), so such a body is parsed again by
    :func:`json.loads` before validation.
    """
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        if exc.errors()[0]["type"] != "json_invalid":
            raise
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise InvalidRequest(f"body: JSON decode error: {exc}") from None
    return model.model_validate(value)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields the already-read body once, then defers to the real one."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
