"""Http11Transport framing and connection reuse, against raw servers (:mod:`.rawhttp`)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gymhub.client import AsyncEnvClient
from gymhub.client.http11 import Http11Transport

from .conftest import run, until
from .rawhttp import Handler, Request, answer, fixed, get, raw_server


# ------------------------------------------------------------------ framing
def test_content_length_bodies_reuse_one_connection() -> None:
    async def body() -> None:
        async with raw_server(fixed(answer(b"first", extra=b"x-a: 1\r\n"),
                                    answer(b"second!"))) as server:
            transport = Http11Transport()
            a = await get(transport, server)
            b = await get(transport, server)
            await transport.aclose()
        assert (a.status_code, a.content, a.headers["x-a"], a.keep_alive) == (
            200, b"first", "1", True)
        assert b.content == b"second!"
        assert server.connections == 1 and len(server.requests) == 2

    run(body)


CHUNKED = [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
           b"4\r\nWiki\r\n", b"5;name=value;quoted=\"a;b\"\r\npedia\r\n",
           b"e \r\n in\r\n\r\nchunks.\r\n", b"0\r\nx-trailer: t\r\nx-more: m\r\n\r\n"]


def test_chunked_bodies_in_pieces_with_extensions_and_trailers() -> None:
    async def handler(req: Request, writer: asyncio.StreamWriter) -> bool:
        if req.target == "/empty":
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
            return True
        for part in CHUNKED:  # every split point, including inside the CRLFs
            for i in range(0, len(part), 3):
                writer.write(part[i:i + 3])
                await writer.drain()
                await asyncio.sleep(0)
        return True

    async def body() -> None:
        async with raw_server(handler) as server:
            transport = Http11Transport()
            first = await get(transport, server)
            empty = await get(transport, server, "/empty")
            again = await get(transport, server)  # trailers were consumed: the framing holds
            await transport.aclose()
        assert first.content == again.content == b"Wikipedia in\r\n\r\nchunks."
        assert empty.content == b"" and empty.keep_alive
        assert server.connections == 1

    run(body)


def test_close_delimited_body_ends_the_connection() -> None:
    async def body() -> None:
        async with raw_server(fixed(b"HTTP/1.1 200 OK\r\nx: y\r\n\r\nuntil the end",
                                    keep=False)) as server:
            transport = Http11Transport()
            a = await get(transport, server)
            b = await get(transport, server)
            await transport.aclose()
        assert a.content == b.content == b"until the end"
        assert not a.keep_alive
        assert server.connections == 2

    run(body)


@pytest.mark.parametrize("value", [b"close", b"Keep-Alive, Close"])
def test_connection_close_from_the_server_opens_a_new_connection(value: bytes) -> None:
    async def body() -> None:
        async with raw_server(fixed(answer(extra=b"Connection: " + value + b"\r\n"))) as server:
            transport = Http11Transport()
            a = await get(transport, server)
            await get(transport, server)
            await transport.aclose()
        assert not a.keep_alive and server.connections == 2

    run(body)


def test_http10_reply_is_not_kept() -> None:
    async def body() -> None:
        async with raw_server(fixed(b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok")) as server:
            transport = Http11Transport()
            a = await get(transport, server)
            await get(transport, server)
            await transport.aclose()
        assert a.content == b"ok" and not a.keep_alive and server.connections == 2

    run(body)


def test_interim_100_head_and_204_have_no_body() -> None:
    async def handler(req: Request, writer: asyncio.StreamWriter) -> bool:
        if req.target == "/continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"real"))
        elif req.target == "/nocontent":
            writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
        else:  # HEAD: the length of the body a GET would get, and no body
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
        return True

    async def body() -> None:
        async with raw_server(handler) as server:
            transport = Http11Transport()
            cont = await get(transport, server, "/continue")
            nothing = await get(transport, server, "/nocontent")
            head = await get(transport, server, "/head", method="HEAD")
            after = await get(transport, server, "/continue")
            await transport.aclose()
        assert (cont.status_code, cont.content) == (200, b"real")
        assert (nothing.status_code, nothing.content) == (204, b"")
        assert (head.headers["content-length"], head.content) == ("1000", b"")
        assert after.content == b"real" and server.connections == 1

    run(body)


# ------------------------------------------------------ idle and stale connections
def test_server_closing_an_idle_connection_is_noticed_before_reuse() -> None:
    async def handler(req: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer())
        return False  # like a keep-alive timeout: closes without saying so

    async def body() -> None:
        async with raw_server(handler) as server:
            transport = Http11Transport()
            a = await get(transport, server)
            # the server's close (its FIN) has gone out while the connection is idle ...
            await until(lambda: server.closed == 1, what="the server's close")
            await asyncio.sleep(0)  # ... and one loop pass hands it to the idle connection
            b = await get(transport, server)
            await transport.aclose()
        assert a.keep_alive and b.content == b"ok"
        assert server.connections == 2

    run(body)


def stale_after_first(reply: bytes) -> Handler:
    """Answer the first request of connection 1; read its second and hang up on it.

    This is the race a keep-alive timeout can lose: the request is already on the wire
    when the server closes the connection.
    """
    seen: dict[int, int] = {}

    async def handler(req: Request, writer: asyncio.StreamWriter) -> bool:
        seen[req.conn] = seen.get(req.conn, 0) + 1
        if req.conn == 1 and seen[1] == 2:
            return False
        writer.write(reply)
        return True

    return handler


def test_stale_connection_is_a_retryable_error_and_the_client_retries() -> None:
    envs = b'{"envs": [{"id": "echo-v0"}]}'
    handler = stale_after_first(answer(envs, extra=b"content-type: application/json\r\n"))

    async def body() -> None:
        async with raw_server(handler) as server:
            transport = Http11Transport()
            await get(transport, server)
            with pytest.raises(httpx.RemoteProtocolError) as info:
                await get(transport, server)
            assert isinstance(info.value, httpx.TransportError)  # what the client retries
            await transport.aclose()

        async with raw_server(stale_after_first(answer(envs))) as server:
            async with AsyncEnvClient(server.url, backoff_s=0.001, max_backoff_s=0.01,
                                      timeout=5) as client:
                assert (await client.list_envs())[0]["id"] == "echo-v0"
                assert (await client.list_envs())[0]["id"] == "echo-v0"  # stale: retried
            assert server.connections == 2
            assert [r.target for r in server.requests] == ["/v1/envs"] * 3

    run(body)


def test_bytes_on_an_idle_connection_make_it_unusable() -> None:
    async def body() -> None:
        async with raw_server(fixed(answer() + b"HTTP/1.1 408 Request Timeout\r\n\r\n")
                              ) as server:
            transport = Http11Transport()
            await get(transport, server)
            # the server has written both replies (one write) before the reuse
            await until(lambda: server.active == 0 and len(server.requests) == 1,
                        what="the server's write")
            b = await get(transport, server)
            await transport.aclose()
        assert b.content == b"ok" and server.connections == 2

    run(body)


def test_keepalive_expiry_closes_old_idle_connections() -> None:
    async def body() -> None:
        async with raw_server(fixed(answer())) as server:
            transport = Http11Transport(keepalive_s=0.05)
            await get(transport, server)
            await asyncio.sleep(0.1)  # a lower bound: sleep never wakes early, so it expired
            await get(transport, server)
            await transport.aclose()
        assert server.connections == 2

    run(body)
