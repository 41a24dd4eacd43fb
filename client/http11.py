"""A small keep-alive HTTP/1.1 transport for httpx, on plain asyncio.

Why not httpx's default transport: per request it runs httpcore's pool (which scans
every connection and, through anyio, builds a dict of socket attributes to ask each
idle one whether it is readable), anyio cancel scopes around every read and write,
and h11's pure-Python parser. Measured on the benchmark machine, that was ~950 us of
client CPU for a request the server answers in ~200 us, so the learner, not the
server, capped throughput. This transport does what an environment client needs
and no more: a LIFO stack of idle keep-alive connections per origin, a semaphore for
the connection limit (waiters are served in order, never scanned), one
:class:`asyncio.Protocol` per connection that frames responses by
``Content-Length``, chunked encoding or connection close, and one deadline per
exchange. It speaks plain HTTP/1.1 and HTTPS; it does not do proxies, HTTP/2 or
``Expect: 100-continue``.

It is a real :class:`httpx.AsyncBaseTransport`, so ``httpx.AsyncClient(transport=...)``
works with it; :class:`~gymhub.client.async_client.AsyncEnvClient` calls :meth:`exchange`
directly to skip building :class:`httpx.Request` and :class:`httpx.Response` objects.
Failures are raised as httpx's own exceptions (``ConnectError``, ``ReadTimeout``,
``RemoteProtocolError`` ...), so callers handle them exactly as with httpx.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from dataclasses import dataclass

import httpx

__all__ = ["MAX_RESPONSE_BYTES", "Http11Transport", "Reply"]

#: Largest response head accepted (status line and headers), and largest chunked trailer.
_MAX_HEAD = 64 * 1024
#: Default cap on one response body: far above any episode reply, far below a machine.
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
_NO_BODY = frozenset({204, 304})
_HEX = frozenset(b"0123456789abcdefABCDEF")
#: A header name (RFC 9110 token): no spaces, no separators.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


@dataclass(slots=True)
class Reply:
    """A complete response: the parts of :class:`httpx.Response` the client reads.

    Attributes:
        status_code: the HTTP status.
        headers: header names in lower case (repeated headers: the last one wins).
        content: the whole body.
        keep_alive: the connection may carry another request.
    """

    status_code: int
    headers: dict[str, str]
    content: bytes
    keep_alive: bool = True


class _Connection(asyncio.Protocol):
    """One TCP connection carrying one request at a time.

    Framing is strict on purpose: a length or chunk size this parser would have to
    guess at (``-1``, ``0x10``, ``1_0``) is how a response gets misframed, and a
    misframed response either hangs until the deadline or hands the next request
    someone else's bytes. Each is a :class:`httpx.RemoteProtocolError` at once instead.

    Args:
        max_body: largest body accepted; a bigger one is refused as soon as it is
            announced (``Content-Length``) or has outgrown the cap (chunked, or
            delimited by the end of the connection), so memory stays bounded.
    """

    def __init__(self, max_body: int = MAX_RESPONSE_BYTES) -> None:
        self.transport: asyncio.Transport | None = None
        self.max_body = max_body
        self.buf = bytearray()
        self.body = bytearray()  # chunked bodies, assembled as chunks complete
        self.waiter: asyncio.Future[Reply] | None = None
        self.closed = False
        self.idle_since = 0.0
        self.head: tuple[int, dict[str, str], bool] | None = None
        self.length = -1  # -1: until close; -2: chunked
        self.head_only = False

    # asyncio.Protocol -----------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():
            # bytes nobody asked for (a 408 before an idle close, or the rest of a
            # reply that timed out) are not ours to read: the connection is done
            self.abort()
            return
        self.buf += data
        try:
            reply = self._parse(eof=False)
        except httpx.RemoteProtocolError as exc:
            self.waiter = None
            waiter.set_exception(exc)
            self.abort()
            return
        if reply is not None:
            self.waiter = None
            waiter.set_result(reply)

    def eof_received(self) -> bool | None:
        self._finish_at_eof()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish_at_eof()

    # use ------------------------------------------------------------------------
    def send(self, payload: bytes, head_only: bool) -> asyncio.Future[Reply]:
        """Write one request; the future resolves with its complete reply."""
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.head, self.length, self.head_only = None, -1, head_only
        self.body.clear()
        self.transport.write(payload)
        return self.waiter

    def abort(self) -> None:
        """Drop the connection at once (after a timeout its next bytes would be stale)."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        """Close politely."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # framing --------------------------------------------------------------------
    def _finish_at_eof(self) -> None:
        self.closed = True
        waiter, self.waiter = self.waiter, None
        if waiter is None or waiter.done():
            return
        try:
            reply = self._parse(eof=True)
        except httpx.RemoteProtocolError as exc:
            waiter.set_exception(exc)
            return
        if reply is not None:
            waiter.set_result(reply)
        elif self.head is None and not self.buf:
            waiter.set_exception(httpx.RemoteProtocolError(
                "Server disconnected without sending a response."))
        else:
            waiter.set_exception(httpx.ReadError("connection closed mid-response"))

    def _parse(self, eof: bool) -> Reply | None:
        while self.head is None:
            end = self.buf.find(b"\r\n\r\n")
            if end > _MAX_HEAD or (end < 0 and len(self.buf) > _MAX_HEAD):
                raise httpx.RemoteProtocolError(f"response head larger than {_MAX_HEAD} bytes")
            if end < 0:
                return None
            self._parse_head(bytes(self.buf[:end]))
            del self.buf[:end + 4]
        status, headers, keep_alive = self.head
        if self.length >= 0:
            if len(self.buf) < self.length:
                return None
            body = bytes(self.buf[:self.length])
            del self.buf[:self.length]
        elif self.length == -2:
            chunked = self._dechunk()
            if chunked is None:
                return None
            body = chunked
        else:  # delimited by the end of the connection
            self._check_size(len(self.buf))
            if not eof:
                return None
            body, keep_alive = bytes(self.buf), False
            self.buf.clear()
        return Reply(status, headers, body, keep_alive and not self.closed)

    def _check_size(self, size: int) -> None:
        if size > self.max_body:
            raise httpx.RemoteProtocolError(
                f"response body larger than the transport's cap of {self.max_body} bytes")

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if (len(parts) < 2 or parts[0] not in (b"HTTP/1.1", b"HTTP/1.0")
                or len(parts[1]) != 3 or not parts[1].isdigit()):
            raise httpx.RemoteProtocolError(f"malformed status line {lines[0][:100]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or _TOKEN.fullmatch(name) is None:
                raise httpx.RemoteProtocolError(f"malformed header line {line[:100]!r}")
            headers[name.lower().decode("latin-1")] = value.strip().decode("latin-1")
        if 100 <= status < 200:  # an interim answer: the real one follows
            return
        connection = headers.get("connection")
        keep_alive = parts[0] == b"HTTP/1.1" and (
            connection is None
            or "close" not in {t.strip() for t in connection.lower().split(",")})
        if self.head_only or status in _NO_BODY:
            self.length = 0
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self.length = -2
        elif "content-length" in headers:
            declared = headers["content-length"]
            if not (declared.isascii() and declared.isdigit()):  # int() takes -1, +1, 1_0
                raise httpx.RemoteProtocolError(f"malformed Content-Length {declared[:40]!r}")
            self.length = int(declared)
            self._check_size(self.length)
        else:
            self.length = -1
        self.head = (status, headers, keep_alive)

    def _dechunk(self) -> bytes | None:
        """The whole chunked body once all of it has arrived.

        Complete chunks move from the buffer to :attr:`body` as they arrive, so a
        large body in many segments costs linear time, not a rescan per segment.
        """
        buf = self.buf
        while True:
            eol = buf.find(b"\r\n")
            if eol < 0:
                if len(buf) > _MAX_HEAD:
                    raise httpx.RemoteProtocolError("chunk size line too long")
                return None
            size = _chunk_size(bytes(buf[:eol]))
            if size == 0:  # the last chunk: optional trailers, then a blank line
                if buf[eol:eol + 4] == b"\r\n\r\n":
                    end = eol
                else:
                    end = buf.find(b"\r\n\r\n", eol)
                    if end < 0:
                        if len(buf) > _MAX_HEAD:
                            raise httpx.RemoteProtocolError("chunked trailer too large")
                        return None
                del buf[:end + 4]
                body = bytes(self.body)
                self.body.clear()
                return body
            self._check_size(len(self.body) + size)
            start = eol + 2
            if len(buf) < start + size + 2:
                return None
            if buf[start + size:start + size + 2] != b"\r\n":
                raise httpx.RemoteProtocolError("chunk data longer than its size")
            self.body += buf[start:start + size]
            del buf[:start + size + 2]


def _chunk_size(line: bytes) -> int:
    """The size on a chunk line, extensions dropped; hex digits only (no sign, no 0x)."""
    digits = line.split(b";", 1)[0].strip(b" \t")
    if not digits or len(digits) > 16 or not _HEX.issuperset(digits):
        raise httpx.RemoteProtocolError(f"malformed chunk size {line[:40]!r}")
    return int(digits, 16)


class _Origin:
    """The connections to one ``scheme://host:port``."""

    def __init__(self, scheme: str, host: str, port: int, limit: int,
                 tls: ssl.SSLContext | None) -> None:
        self.host, self.port = host, port
        self.tls = tls if scheme == "https" else None
        name = f"[{host}]" if ":" in host else host
        default = port == (443 if scheme == "https" else 80)
        self.host_header = (name if default else f"{name}:{port}").encode("idna")
        self.idle: list[_Connection] = []
        self.slots = asyncio.Semaphore(limit)
        self.loop = asyncio.get_running_loop()


class Http11Transport(httpx.AsyncBaseTransport):
    """Keep-alive HTTP/1.1 connections per origin, at most ``max_connections`` each.

    Args:
        max_connections: concurrent requests (= open connections) per origin; more
            requests wait in arrival order.
        keepalive_s: idle connections older than this are closed rather than reused
            (keep it below the server's keep-alive timeout: uvicorn's is 30 s under
            ``gymhub serve``, 5 s by default).
        timeout: deadline of one exchange when the caller gives none.
        ssl_context: for ``https`` origins (default: httpx's, which verifies).
        max_response_bytes: largest response body accepted; a bigger one fails with
            :class:`httpx.RemoteProtocolError` instead of filling memory.
        uds: connect every origin through this Unix domain socket instead of TCP. A
            server in a sandbox without a network (the hub's check) is reachable only
            through a socket file in the directory it shares with the host.

    Connections and waiters belong to the event loop that made them. A transport used
    from a new loop (a learner running each rollout in its own ``asyncio.run``) starts
    afresh there; call :meth:`aclose` before a loop ends to close its connections.
    """

    def __init__(self, *, max_connections: int = 256, keepalive_s: float = 4.0,
                 timeout: float = 60.0, ssl_context: ssl.SSLContext | None = None,
                 max_response_bytes: int = MAX_RESPONSE_BYTES, uds: str | None = None) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        if max_response_bytes < 0:
            raise ValueError("max_response_bytes must be >= 0")
        self.max_connections = max_connections
        self.keepalive_s = keepalive_s
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.uds = uds
        self._tls = ssl_context
        self._origins: dict[tuple[str, str, int], _Origin] = {}

    def origin(self, url: str | httpx.URL) -> tuple[str, str, int]:
        """The ``(scheme, host, port)`` key of a URL (default ports filled in)."""
        u = httpx.URL(url)
        if u.scheme not in ("http", "https"):
            raise httpx.UnsupportedProtocol(f"unsupported scheme {u.scheme!r}")
        return u.scheme, u.host, u.port or (443 if u.scheme == "https" else 80)

    async def exchange(self, origin: tuple[str, str, int], method: str, target: str,
                       headers: bytes = b"", body: bytes | None = None,
                       timeout: float | None = None) -> Reply:
        """Send one request and read its whole reply.

        Args:
            origin: from :meth:`origin`.
            method: ``GET``, ``POST`` ...
            target: path and query, already encoded (``/v1/episodes?x=1``).
            headers: extra header lines, each ending in CRLF.
            body: the request body, if any.
            timeout: deadline in seconds for everything (waiting for a connection,
                connecting, sending and reading).

        Raises:
            httpx.PoolTimeout, httpx.ConnectTimeout, httpx.ReadTimeout: the deadline
                passed while waiting, connecting or reading.
            httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError: the
                connection failed.
        """
        pool = self._origins.get(origin)
        if pool is None or pool.loop is not asyncio.get_running_loop():
            pool = self._origins[origin] = _Origin(*origin, self.max_connections,
                                                   self._ssl() if origin[0] == "https" else None)
        head = b"%s %s HTTP/1.1\r\nhost: %s\r\n%s" % (
            method.encode(), target.encode(), pool.host_header, headers)
        if body is not None:
            payload = b"%scontent-length: %d\r\n\r\n%s" % (head, len(body), body)
        else:
            payload = head + b"\r\n"
        stage = "pool"
        try:
            async with asyncio.timeout(self.timeout if timeout is None else timeout):
                await pool.slots.acquire()
                conn: _Connection | None = None
                try:
                    stage = "connect"
                    conn = self._checkout(pool) or await self._connect(pool)
                    stage = "read"
                    reply = await conn.send(payload, method == "HEAD")
                except BaseException:
                    if conn is not None:
                        conn.abort()
                    pool.slots.release()
                    raise
                if reply.keep_alive and not conn.closed:  # back before the slot is freed
                    conn.idle_since = time.monotonic()
                    pool.idle.append(conn)
                else:
                    conn.close()
                pool.slots.release()
        except TimeoutError:
            kind = {"pool": httpx.PoolTimeout, "connect": httpx.ConnectTimeout}.get(
                stage, httpx.ReadTimeout)
            raise kind(f"no {stage if stage != 'read' else 'reply'} within the deadline "
                       f"({method} {target})") from None
        return reply

    def _checkout(self, pool: _Origin) -> _Connection | None:
        now = time.monotonic()
        while pool.idle:
            conn = pool.idle.pop()
            # bytes on an idle connection are not ours to read: never reuse it then
            if not conn.closed and not conn.buf and now - conn.idle_since < self.keepalive_s:
                return conn
            conn.close()
        return None

    async def _connect(self, pool: _Origin) -> _Connection:
        loop = asyncio.get_running_loop()
        if self.uds is not None:
            try:
                _u, unix_conn = await loop.create_unix_connection(
                    lambda: _Connection(self.max_response_bytes), self.uds)
            except OSError as exc:
                raise httpx.ConnectError(f"cannot connect to {self.uds}: {exc}") from exc
            return unix_conn
        try:
            _t, conn = await loop.create_connection(
                lambda: _Connection(self.max_response_bytes), pool.host, pool.port, ssl=pool.tls,
                server_hostname=pool.host if pool.tls is not None else None)
        except OSError as exc:
            raise httpx.ConnectError(f"cannot connect to {pool.host}:{pool.port}: {exc}") from exc
        return conn

    def _ssl(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = httpx.create_ssl_context()
        return self._tls

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """The :class:`httpx.AsyncBaseTransport` interface over :meth:`exchange`."""
        body = await request.aread()
        lines = b"".join(b"%s: %s\r\n" % (k, v) for k, v in request.headers.raw
                         if k.lower() not in (b"host", b"content-length", b"transfer-encoding"))
        timeouts = request.extensions.get("timeout") or {}
        limit = max((v for v in timeouts.values() if v is not None), default=self.timeout)
        reply = await self.exchange(self.origin(request.url), request.method,
                                    request.url.raw_path.decode("ascii"), lines,
                                    body if body or request.method in ("POST", "PUT", "PATCH")
                                    else None, limit)
        return httpx.Response(reply.status_code, headers=list(reply.headers.items()),
                              content=reply.content, request=request,
                              extensions={"http_version": b"HTTP/1.1"})

    async def aclose(self) -> None:
        """Close every idle connection (busy ones close when their request ends)."""
        for pool in self._origins.values():
            while pool.idle:
                pool.idle.pop().close()
