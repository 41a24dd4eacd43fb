"""The server's front door: bearer token and body size, checked before FastAPI reads a byte.

Why a pure-ASGI layer and not FastAPI middleware or a dependency: both run after the
request has been routed and its body read, so an unauthenticated client could still make
the server buffer a body of any size. Here the token and ``Content-Length`` are checked
from the ASGI scope; a body sent without a length is read up to the limit and then
replayed to FastAPI. Every route, the episode routes included, is then answered by
FastAPI, through the one :class:`~gymhub.server.dispatch.Dispatcher`.

An earlier version also answered open/step/close/batch here, bypassing FastAPI. It was
removed: with the batching client it made no measurable difference on echo-v0, sql-v0
or code-v0 at 64-512 concurrent episodes, and at one episode only echo-v0's trivial step
gained (1.5x); a second request path was not worth that.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from starlette.types import Message, Receive, Scope, Send

from gymhub.errors import GymhubError, PayloadTooLarge, Unauthorized

from .error_replies import Headers, error_reply
from .metrics import Metrics

__all__ = ["RequestGuard"]

ASGICall = Callable[[Scope, Receive, Send], Awaitable[None]]
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


async def send_json(send: Send, status: int, body: bytes, headers: Headers | None = None) -> None:
    """Send a complete JSON response in two ASGI messages."""
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if headers:
        head.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    """Auth and the body limit; every request that passes goes on to ``fallback``.

    Args:
        metrics: the server's metrics (refusals are counted like any error reply).
        fallback: the FastAPI app's own ASGI entry.
        token: the bearer token ``/v1`` requires, if any.
        max_body_bytes: largest request body accepted (413 beyond).
    """

    def __init__(self, metrics: Metrics, fallback: ASGICall, *, token: str | None,
                 max_body_bytes: int) -> None:
        self.metrics = metrics
        self.fallback = fallback
        self.expected = f"Bearer {token}".encode() if token is not None else None
        self.max_body = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one HTTP request (other scope types never reach here)."""
        path: str = scope["path"]
        method: str = scope["method"]
        auth = length = None
        for key, value in scope["headers"]:
            if key == b"authorization":
                auth = value
            elif key == b"content-length":
                length = value
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
        if length is None and method in _BODY_METHODS:
            body = await self._read(receive, send)
            if body is None:
                return
            receive = _replay(body, receive)
        await self.fallback(scope, receive, send)

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
