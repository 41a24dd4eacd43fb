"""What one request may cost the hub: body caps and rate limits, as ASGI middleware.

Most of the hub answers anyone, so its cost per request must be bounded before any route
runs. :class:`RequestLimits` sits in front of every route (the API, the index, the pages
and whatever else the app includes) and:

* **caps the body** before it is parsed: a declared ``Content-Length`` over the route's
  cap is a 413 before a byte is read; a chunked (or lying) body is counted while it
  streams and refused at the first byte past the cap, whatever route reads it. The
  upload route's cap is the hub's largest wheel, every other route's a few KiB; the
  upload still authenticates before it reads its body, since the body is only read
  when the route asks for it;
* **rate-limits** with token buckets: every request takes one token from its client
  address's bucket and, when it carries a hub token (``Authorization: Bearer
  ghub_<id>_...``), one from that token's bucket as well; so neither many addresses
  sharing a stolen token nor many made-up tokens from one address get past the rate.
  An empty bucket is a 429 with ``Retry-After``. The address is the ASGI client's:
  behind a reverse proxy, let uvicorn take it from ``X-Forwarded-For``
  (``FORWARDED_ALLOW_IPS``), or every client shares the proxy's bucket.

Buckets live in memory, per process, at most ``max_keys`` of them (the least recently
seen are forgotten first): the limit is a guard against floods, not an accounting.
The event loop is single-threaded and the middleware never awaits while it touches a
bucket, so no lock is needed.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException

from gymhub.errors import ConfigError

__all__ = ["BodyTooLarge", "RateLimit", "RequestLimits", "TokenBuckets"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_TOKEN_ID = re.compile(rb"bearer\s+ghub_([0-9a-f]{16})_", re.IGNORECASE)
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class RateLimit:
    """A token bucket's shape: ``rate`` requests a second on average, ``burst`` at once.

    Attributes:
        rate: tokens added per second.
        burst: the bucket's size (how many requests may arrive together).
    """

    rate: float
    burst: int

    def __post_init__(self) -> None:
        if not (self.rate > 0 and self.burst >= 1):
            raise ConfigError(f"a rate limit needs a positive rate and burst, not {self}")

    @classmethod
    def parse(cls, text: str) -> RateLimit | None:
        """``"20/s"``, ``"600/m"``, ``"20/s:200"`` (a burst of 200), or ``"off"`` (``None``).

        Without an explicit burst the bucket holds ten seconds' worth (at least 10).

        Raises:
            ConfigError: anything else.
        """
        spec = text.strip().lower()
        if spec in {"off", "0", "none", ""}:
            return None
        m = re.fullmatch(r"(\d+(?:\.\d+)?)/([smh])(?::(\d+))?", spec)
        if m is None:
            raise ConfigError(f"rate limit {text!r}: write N/s, N/m or N/h, optionally "
                              ":BURST (e.g. 20/s:200), or off")
        rate = float(m[1]) / _UNITS[m[2]]
        burst = int(m[3]) if m[3] else max(10, math.ceil(rate * 10))
        return cls(rate, burst)


class TokenBuckets:
    """One token bucket per key (an address, a token id), created full on first sight.

    Args:
        limit: every bucket's rate and size.
        max_keys: how many buckets to remember; the least recently used go first.
        clock: seconds, monotonic (replaceable in tests).
    """

    def __init__(self, limit: RateLimit, *, max_keys: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str) -> float:
        """Take a token for ``key``: ``0.0`` if there was one, else seconds until there is."""
        now = self._clock()
        tokens, last = self._buckets.pop(key, (float(self.limit.burst), now))
        tokens = min(float(self.limit.burst), tokens + (now - last) * self.limit.rate)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.limit.rate
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)
        return wait


class BodyTooLarge(HTTPException):
    """A body outgrew its cap while streaming (raised from ``receive``, answered 413).

    An ``HTTPException`` so that FastAPI's body parsing passes it on unchanged instead of
    calling it a malformed body.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is over {limit} bytes, the most this "
                              "route takes")


def _error(status: int, code: str, message: str,
           headers: list[tuple[bytes, bytes]] | None = None) -> tuple[Message, Message]:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    start = {"type": "http.response.start", "status": status,
             "headers": [(b"content-type", b"application/json"),
                         (b"content-length", str(len(body)).encode()), *(headers or [])]}
    return start, {"type": "http.response.body", "body": body}


class RequestLimits:
    """ASGI middleware: body caps for every route, then rate limits (see the module).

    Args:
        app: the application.
        body_cap: the largest body (bytes) a request to ``(method, path)`` may carry.
        rate_limit: the buckets' shape; ``None`` switches rate limiting off.
        exempt: paths never rate-limited (health checks).
        clock: for the buckets (tests).
    """

    def __init__(self, app: ASGIApp, *, body_cap: Callable[[str, str], int],
                 rate_limit: RateLimit | None = None, exempt: frozenset[str] = frozenset(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.body_cap = body_cap
        self.exempt = exempt
        self.buckets = None if rate_limit is None else TokenBuckets(rate_limit, clock=clock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse what is over a limit; pass everything else on with a counting ``receive``."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._rate_refusal(scope) or self._declared_refusal(scope)
        if refusal is not None:
            for message in refusal:
                await send(message)
            return
        limit = self.body_cap(scope["method"], scope["path"])
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge as exc:  # read outside a route's error handling
            if started:
                raise
            for message in _error(413, "payload_too_large", str(exc.detail)):
                await send(message)

    def _rate_refusal(self, scope: Scope) -> tuple[Message, Message] | None:
        if self.buckets is None or scope["path"] in self.exempt:
            return None
        client = scope.get("client")
        keys = [f"addr:{client[0] if client else 'unknown'}"]
        for name, value in scope.get("headers", []):
            if name == b"authorization" and (m := _TOKEN_ID.match(value)):
                keys.append(f"token:{m[1].decode()}")
        wait = max(self.buckets.take(k) for k in keys)
        if wait <= 0:
            return None
        seconds = max(1, math.ceil(wait))
        return _error(429, "rate_limited",
                      f"too many requests; this hub takes {self.buckets.limit.rate:g} a second "
                      f"(bursts of {self.buckets.limit.burst}) per client and per token: "
                      f"retry after {seconds} s", [(b"retry-after", str(seconds).encode())])

    def _declared_refusal(self, scope: Scope) -> tuple[Message, Message] | None:
        declared = next((v for k, v in scope.get("headers", []) if k == b"content-length"),
                        None)
        if declared is None:
            return None
        if not declared.isdigit():
            return _error(422, "invalid_request",
                          f"Content-Length {declared[:40].decode('latin-1')!r} is not a byte "
                          "count")
        limit = self.body_cap(scope["method"], scope["path"])
        if int(declared) > limit:
            return _error(413, "payload_too_large",
                          f"the request declares {int(declared)} bytes; this route takes at "
                          f"most {limit}")
        return None
