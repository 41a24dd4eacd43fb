"""Http11Transport failures, caps, deadlines, request bodies and connection limits."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from gymhub.client.http11 import Http11Transport

from .conftest import run, until
from .rawhttp import RawServer, Request, answer, close_writers, fixed, get, raw_server

# ------------------------------------------------------------ malformed replies
MALFORMED = {
    "status-not-a-number": b"HTTP/1.1 abc OK\r\n\r\n",
    "status-four-digits": b"HTTP/1.1 2000 OK\r\ncontent-length: 0\r\n\r\n",
    "not-http": b"SPDY/9 200 OK\r\ncontent-length: 0\r\n\r\n",
    "header-without-colon": b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    "header-name-with-space": b"HTTP/1.1 200 OK\r\nbad name: x\r\ncontent-length: 0\r\n\r\n",
    "length-not-a-number": b"HTTP/1.1 200 OK\r\ncontent-length: ten\r\n\r\n",
    "length-negative": b"HTTP/1.1 200 OK\r\ncontent-length: -2\r\n\r\n",
    "length-underscore": b"HTTP/1.1 200 OK\r\ncontent-length: 1_0\r\n\r\nabcdefghij",
    "lengths-differ": b"HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\nab",
    "chunk-size-not-hex": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    "chunk-size-negative": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n-1\r\nab",
    "chunk-size-0x": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0x2\r\nab\r\n0\r\n\r\n",
    "chunk-size-empty": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\r\nab",
    "chunk-data-overruns": (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                            b"2\r\nabcd\r\n0\r\n\r\n"),
}


@pytest.mark.parametrize("reply", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_replies_fail_fast_with_a_protocol_error(reply: bytes) -> None:
    async def body() -> None:
        # the server keeps the connection open: only the parser can end the wait
        async with raw_server(fixed(reply)) as server:
            transport = Http11Transport()
            with pytest.raises(httpx.RemoteProtocolError):  # not the deadline's ReadTimeout
                await get(transport, server, timeout=30)
            await transport.aclose()

    run(body)


def test_truncated_bodies_are_read_errors() -> None:
    cases = [b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc",
             b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab",
             b"HTTP/1.1 200 OK\r\ncontent-le"]

    async def body() -> None:
        for reply in cases:
            async with raw_server(fixed(reply, keep=False)) as server:
                transport = Http11Transport()
                with pytest.raises((httpx.ReadError, httpx.RemoteProtocolError)):
                    await get(transport, server)
                await transport.aclose()

    run(body)


# --------------------------------------------------------------------- caps
def test_oversized_head_is_refused() -> None:
    big = b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"a" * (70 * 1024) + b"\r\ncontent-length: 0\r\n\r\n"

    async def body() -> None:
        async with raw_server(fixed(big)) as server:
            transport = Http11Transport()
            with pytest.raises(httpx.RemoteProtocolError, match="head"):
                await get(transport, server)
            await transport.aclose()

    run(body)


def test_bodies_over_the_cap_are_refused_in_every_framing() -> None:
    cap = 1000
    too_big = b"b" * (cap + 1)
    framings = {
        "/length": answer(too_big),
        "/chunked": (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                     + b"".join(b"64\r\n" + b"c" * 100 + b"\r\n" for _ in range(20))),
        "/close": b"HTTP/1.1 200 OK\r\n\r\n" + too_big,
        "/fits": answer(b"f" * cap),
    }

    async def handler(req: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(framings[req.target])
        return True  # never closes: the cap, not the end, must stop the read

    async def body() -> None:
        async with raw_server(handler) as server:
            transport = Http11Transport(max_response_bytes=cap)
            for target in ("/length", "/chunked", "/close"):
                with pytest.raises(httpx.RemoteProtocolError, match="larger than"):
                    await get(transport, server, target, timeout=30)  # not a ReadTimeout
            assert (await get(transport, server, "/fits")).content == b"f" * cap
            await transport.aclose()

    run(body)


# ------------------------------------------------------------ timeouts, errors
def test_a_server_that_never_answers_is_a_read_timeout() -> None:
    async def silent(req: Request, writer: asyncio.StreamWriter) -> bool:
        await asyncio.Event().wait()  # never answers; closed with the server
        return True

    async def body() -> None:
        async with raw_server(silent) as server:
            transport = Http11Transport(timeout=0.2)
            loop = asyncio.get_running_loop()
            # Lower bounds only (a deadline never fires early); wait_for guards a hang
            # and would fail with TimeoutError, not ReadTimeout.
            t0 = loop.time()
            with pytest.raises(httpx.ReadTimeout):  # the transport's default deadline
                await asyncio.wait_for(get(transport, server, timeout=None), 30)
            assert loop.time() - t0 >= 0.19
            t0 = loop.time()
            with pytest.raises(httpx.ReadTimeout):  # the per-call deadline wins
                await asyncio.wait_for(get(transport, server, timeout=0.5), 30)
            assert loop.time() - t0 >= 0.49
            await transport.aclose()

    run(body)


def test_waiting_for_a_connection_is_a_pool_timeout() -> None:
    release = asyncio.Event()

    async def slow(req: Request, writer: asyncio.StreamWriter) -> bool:
        await asyncio.wait_for(release.wait(), 30)
        writer.write(answer())
        return True

    async def body() -> None:
        async with raw_server(slow) as server:
            transport = Http11Transport(max_connections=1)
            first = asyncio.create_task(get(transport, server, timeout=30))
            # the first request holds the only connection until the test releases it
            await until(lambda: server.active == 1, what="the first request at the server")
            with pytest.raises(httpx.PoolTimeout):
                await get(transport, server, timeout=0.1)
            release.set()
            assert (await first).content == b"ok"
            await transport.aclose()

    run(body)


def test_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nobody listens there

    async def body() -> None:
        transport = Http11Transport()
        with pytest.raises(httpx.ConnectError):
            await transport.exchange(transport.origin(f"http://127.0.0.1:{port}"), "GET", "/")
        with pytest.raises(httpx.UnsupportedProtocol):
            transport.origin("ftp://example.org/")

    run(body)


# ---------------------------------------------------------------- requests
def test_request_bodies_and_headers_arrive_byte_for_byte() -> None:
    async def echo(req: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(req.body, extra=b"x-method: " + req.head.split(b" ")[0] + b"\r\n"))
        return True

    payload = bytes(range(256)) * 300  # binary, CRLFs inside, larger than a socket buffer

    async def body() -> None:
        async with raw_server(echo) as server:
            transport = Http11Transport()
            big = await get(transport, server, "/echo?a=1", method="POST", body=payload,
                            headers=b"x-token: t\r\n")
            empty = await get(transport, server, method="POST", body=b"")
            plain = await get(transport, server)
            await transport.aclose()
        assert big.content == payload and big.headers["x-method"] == "POST"
        first, second, third = server.requests
        assert first.target == "/echo?a=1" and first.header("x-token") == "t"
        assert first.header("host") == f"127.0.0.1:{server.port}"
        assert first.header("content-length") == str(len(payload))
        assert empty.content == b"" and second.header("content-length") == "0"
        assert plain.content == b"" and third.header("content-length") is None
        assert server.connections == 1

    run(body)


def test_it_is_an_httpx_transport() -> None:
    async def echo(req: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer(req.body or req.target.encode(),
                            extra=b"content-type: application/json\r\nx-echo: "
                            + (req.header("x-echo") or "").encode() + b"\r\n"))
        return True

    async def body() -> None:
        async with raw_server(echo) as server, httpx.AsyncClient(
                transport=Http11Transport(), base_url=server.url, timeout=2) as client:
            posted = await client.post("/p", json={"a": [1, 2]}, headers={"x-echo": "hi"})
            got = await client.get("/g", params={"q": "a b"})
        assert posted.json() == {"a": [1, 2]} and posted.headers["x-echo"] == "hi"
        assert posted.http_version == "HTTP/1.1"
        assert got.text == "/g?q=a+b"
        assert server.requests[0].header("content-type") == "application/json"
        assert server.connections == 1

    run(body)


def test_concurrent_requests_never_exceed_the_connection_limit() -> None:
    all_busy = asyncio.Event()
    servers: list[RawServer] = []

    async def slow(req: Request, writer: asyncio.StreamWriter) -> bool:
        if servers[0].active >= 3:  # every allowed connection holds a request
            all_busy.set()
        await asyncio.wait_for(all_busy.wait(), 30)  # answers wait until then
        writer.write(answer(req.target.encode()))
        return True

    async def body() -> None:
        async with raw_server(slow) as server:
            servers.append(server)
            transport = Http11Transport(max_connections=3)
            replies = await asyncio.gather(*(get(transport, server, f"/{i}", timeout=30)
                                             for i in range(30)))
            await transport.aclose()
        assert [r.content for r in replies] == [f"/{i}".encode() for i in range(30)]
        assert server.connections == 3 and server.peak_active == 3
        with pytest.raises(ValueError):
            Http11Transport(max_connections=0)

    run(body)


def test_a_transport_moves_to_a_new_event_loop() -> None:
    async def quick(req: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(answer())
        return True

    transport = Http11Transport(max_connections=1)
    ports: list[int] = []

    async def body() -> list[bytes]:
        server = RawServer(quick)
        listener = await asyncio.start_server(server.serve, "127.0.0.1",
                                              ports[0] if ports else 0)
        server.port = listener.sockets[0].getsockname()[1]
        ports.append(server.port)
        try:  # two at once (started in one turn): the second waits on the connection limit
            replies = await asyncio.gather(get(transport, server), get(transport, server))
            await transport.aclose()
        finally:
            listener.close()
            await close_writers(server.writers)
        return [r.content for r in replies]

    # like a learner running each rollout in its own asyncio.run: the waiters of the
    # first loop must not bind the second one
    assert asyncio.run(body()) == [b"ok", b"ok"]
    assert asyncio.run(asyncio.wait_for(body(), 3)) == [b"ok", b"ok"]
