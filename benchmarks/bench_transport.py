"""Client CPU per request: httpx's default transport, aiohttp and gymhub's own transport.

Why this exists: ``gymhub/client/http11.py`` claims httpx's default transport
(httpcore, anyio, h11) costs about 1 ms of client CPU per request, enough for the
learner rather than the server to cap throughput, and that its own small transport
fixes that. This measures the claim instead of repeating it: the same server, the
same request, the same process, clients alternating in one run.

Clients (each at ``--concurrency`` requests in flight over as many keep-alive
connections):

* ``httpx default``: ``httpx.AsyncClient`` with its default transport (the baseline).
* ``aiohttp``: ``aiohttp.ClientSession`` (the usual async alternative).
* ``httpx + Http11``: ``httpx.AsyncClient(transport=Http11Transport())``, gymhub's
  transport behind httpx's request and response objects.
* ``Http11 exchange``: ``Http11Transport.exchange`` called directly, which is what
  :class:`~gymhub.client.AsyncEnvClient` does.

The request is ``GET /healthz`` of ``gymhub serve echo-v0`` (a few hundred bytes each
way); the server runs in its own process, so ``time.process_time`` here is the
client's CPU alone. Rates depend on the machine (and on the server keeping up);
CPU per request is the figure that travels.

    python benchmarks/bench_transport.py --seconds 3 --concurrency 1,64 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import httpx

from gymhub.client.http11 import Http11Transport

PATH = "/healthz"
Request = Callable[[], Awaitable[int]]


class Server:
    def __init__(self) -> None:
        cmd = [sys.executable, "-m", "gymhub.server.cli", "echo-v0", "--port", "0",
               "--log-level", "error"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if " at http://" not in line:
            raise RuntimeError(f"server did not start: {line!r}")
        self.url = line.split(" at ", 1)[1].split()[0].rstrip("/")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


async def drive(request: Request, concurrency: int, seconds: float) -> tuple[int, float, float]:
    """Requests done, wall seconds and client CPU seconds for a closed loop."""
    for _ in range(3):  # warm the connections
        await asyncio.gather(*(request() for _ in range(concurrency)))
    done = 0
    t_end = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < t_end:
            status = await request()
            assert status == 200, status
            done += 1

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, time.perf_counter() - t0, time.process_time() - c0


async def httpx_default(url: str, n: int, seconds: float) -> tuple[int, float, float]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        async def request() -> int:
            return (await client.get(PATH)).status_code

        return await drive(request, n, seconds)


async def aiohttp_session(url: str, n: int, seconds: float) -> tuple[int, float, float]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=n)
    async with aiohttp.ClientSession(url, connector=connector) as session:
        async def request() -> int:
            async with session.get(PATH) as resp:
                await resp.read()
                return resp.status

        return await drive(request, n, seconds)


async def httpx_http11(url: str, n: int, seconds: float) -> tuple[int, float, float]:
    transport = Http11Transport(max_connections=n)
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=30) as client:
        async def request() -> int:
            return (await client.get(PATH)).status_code

        return await drive(request, n, seconds)


async def http11_exchange(url: str, n: int, seconds: float) -> tuple[int, float, float]:
    transport = Http11Transport(max_connections=n)
    origin = transport.origin(url)
    try:
        async def request() -> int:
            return (await transport.exchange(origin, "GET", PATH, b"accept: */*\r\n")).status_code

        return await drive(request, n, seconds)
    finally:
        await transport.aclose()


CLIENTS = {
    "httpx default": httpx_default,
    "aiohttp": aiohttp_session,
    "httpx + Http11": httpx_http11,
    "Http11 exchange": http11_exchange,
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--seconds", type=float, default=3.0, help="per client per repeat")
    p.add_argument("--concurrency", default="1,64", help="comma-separated levels")
    p.add_argument("--repeats", type=int, default=3, help="alternating rounds per level")
    p.add_argument("--clients", default=",".join(CLIENTS), help="which, comma-separated")
    args = p.parse_args(argv)
    chosen = [c for c in args.clients.split(",") if c]
    server = Server()
    try:
        for n in (int(x) for x in args.concurrency.split(",") if x.strip()):
            cpu: dict[str, list[float]] = {c: [] for c in chosen}
            rate: dict[str, list[float]] = {c: [] for c in chosen}
            for _ in range(args.repeats):
                for name in chosen:
                    done, wall, used = asyncio.run(CLIENTS[name](server.url, n, args.seconds))
                    cpu[name].append(used / max(1, done) * 1e6)
                    rate[name].append(done / wall)
            base = chosen[0]
            b_cpu, b_rate = statistics.median(cpu[base]), statistics.median(rate[base])
            print(f"\nconcurrency {n}: GET {PATH}, medians of {args.repeats} alternating runs "
                  f"of {args.seconds:g} s; ratios against {base!r}")
            print(f"{'client':>16} | {'client CPU us/req':>17} {'x base':>7} | "
                  f"{'requests/s':>10} {'x base':>7}")
            for name in chosen:
                c, r = statistics.median(cpu[name]), statistics.median(rate[name])
                print(f"{name:>16} | {c:>17,.0f} {c / b_cpu:>7.2f} | {r:>10,.0f} "
                      f"{r / b_rate:>7.2f}", flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
