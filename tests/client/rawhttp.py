"""A raw HTTP/1.1 server for transport tests: it writes exactly the bytes under test.

Each test starts one on 127.0.0.1 whose handler writes crafted responses, so
framing, keep-alive, caps and failures are checked byte for byte, and the server
counts the connections a transport really opened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from gymhub.client.http11 import Http11Transport, Reply


@dataclass
class Request:
    """One request as the raw server read it."""

    head: bytes
    body: bytes
    conn: int  # which connection (1-based, in accept order) carried it

    @property
    def target(self) -> str:
        return self.head.split(b" ", 2)[1].decode()

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.encode():
                return value.strip().decode()
        return None


#: Writes the answer to one request; returns False to close the connection after it.
Handler = Callable[[Request, asyncio.StreamWriter], Awaitable[bool]]


@dataclass
class RawServer:
    """An HTTP/1.1 server reduced to reading requests and running ``handler``."""

    handler: Handler
    connections: int = 0
    closed: int = 0  # connections this server has finished closing
    active: int = 0
    peak_active: int = 0
    requests: list[Request] = field(default_factory=list)
    port: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn = self.connections
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                req = Request(head[:-4], b"", conn)
                length = req.header("content-length")
                if length is not None:
                    req.body = await reader.readexactly(int(length))
                self.requests.append(req)
                self.active += 1
                self.peak_active = max(self.peak_active, self.active)
                try:
                    keep = await self.handler(req, writer)
                    await writer.drain()
                finally:
                    self.active -= 1
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self.closed += 1


@contextlib.asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[RawServer]:
    """Serve ``handler`` on a free loopback port for the duration of the block."""
    state = RawServer(handler)
    server = await asyncio.start_server(state.serve, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.close()
        await close_writers(state.writers)
        await server.wait_closed()


async def close_writers(writers: list[asyncio.StreamWriter]) -> None:
    """Close the server's side of every connection and wait until each close has run."""
    for w in writers:
        w.close()
    for w in writers:
        with contextlib.suppress(ConnectionError):
            await w.wait_closed()


def answer(body: bytes = b"ok", status: str = "200 OK", extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 %s\r\ncontent-length: %d\r\n%s\r\n%s"
            % (status.encode(), len(body), extra, body))


def fixed(*replies: bytes, keep: bool = True) -> Handler:
    """A handler answering the n-th request with ``replies[n]`` (the last one repeats)."""
    count = [0]

    async def handler(req: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(replies[min(count[0], len(replies) - 1)])
        count[0] += 1
        return keep

    return handler


async def get(transport: Http11Transport, server: RawServer, target: str = "/x",
              timeout: float | None = 2.0, method: str = "GET", body: bytes | None = None,
              headers: bytes = b"") -> Reply:
    return await transport.exchange(transport.origin(server.url), method, target, headers,
                                    body, timeout)
