"""``gymhub serve``: run an environment server with uvicorn.

One process serves one set of episodes held in its memory, so there is deliberately
no uvicorn ``--workers``: several worker processes behind one port would scatter an
episode's steps over processes that do not hold it (NeMo Gym's failure). To use more
cores, start more ``gymhub serve`` processes on more ports and spread episodes over
them with :class:`gymhub.client.pool.EnvPool` (see ``docs/scale-out.md``).
``--workers`` here sizes the thread pool that runs environment code.

The server process tunes Python's cyclic garbage collector (``--gc-threshold``): with
the default thresholds a collection ran every few hundred allocations and the full
collections walked every open episode's objects, which at 512 concurrent episodes
cost 40 % of the server's CPU and tripled its p99 step latency. Objects that exist
once the server is up (modules, environment specs, task sets) are moved out of the
collector's sight with :func:`gc.freeze`.

``--port 0`` picks a free port; the URL printed on startup is the real one, printed
only once the server accepts requests, so scripts can wait for that line.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import socket
import sys
from typing import Any

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``gymhub serve`` argument parser."""
    p = argparse.ArgumentParser(
        prog="gymhub serve",
        description="Serve environments over HTTP (protocol /v1; OpenAPI at /docs).")
    p.add_argument("env_ids", nargs="+", metavar="ENV_ID", help="environments to serve")
    p.add_argument("--env-arg", action="append", default=[], metavar="[ENV_ID:]KEY=VALUE",
                   help="constructor argument (JSON value) for every served env or one of them")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (0 picks a free one)")
    p.add_argument("--uds", default=None, metavar="PATH",
                   help="listen on this Unix domain socket instead of HOST:PORT (a server "
                        "in a sandbox without a network, as the hub's check runs it)")
    p.add_argument("--max-episodes", type=int, default=1024,
                   help="cap on open episodes; beyond it creation answers 429")
    p.add_argument("--token", default=None,
                   help="require this bearer token on /v1 (default: $GYMHUB_SERVER_TOKEN)")
    p.add_argument("--workers", type=int, default=None,
                   help="threads running environment code (default: min(32, cpus + 4))")
    p.add_argument("--ttl", type=float, default=600.0,
                   help="seconds before an idle episode is reaped (0 disables)")
    p.add_argument("--step-timeout", type=float, default=60.0,
                   help="per-step deadline in seconds (504 and the episode closed past it)")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="request body limit")
    p.add_argument("--drain-timeout", type=float, default=30.0,
                   help="seconds shutdown waits for in-flight steps")
    p.add_argument("--no-reference", action="store_true",
                   help="do not serve gold actions or verifiers (for shared servers)")
    p.add_argument("--gc-threshold", default="100000,50,1000", metavar="GEN0[,GEN1,GEN2]",
                   help="thresholds for gc.set_threshold in the server process ('' keeps "
                        "Python's 700,10,10)")
    p.add_argument("--log-level", default="warning",
                   choices=["critical", "error", "warning", "info", "debug"])
    return p


def main(argv: list[str]) -> int:
    """Run ``gymhub serve`` until interrupted; returns the exit status.

    Args:
        argv: the arguments after ``serve``.
    """
    args = build_parser().parse_args(argv)
    try:
        import uvicorn
    except ModuleNotFoundError as exc:  # the server extra is not installed
        print(f"gymhub serve: needs {exc.name!r}: pip install 'gymhub[server]'",
              file=sys.stderr)
        return 2

    from gymhub.envs.registration import parse_env_args
    from gymhub.errors import GymhubError

    from .app import create_app

    _configure_logging(args.log_level)
    try:
        thresholds = [int(x) for x in args.gc_threshold.split(",") if x.strip()]
        # gen0 = 0 would switch automatic collection off: cycles would never be freed.
        if len(thresholds) > 3 or any(t < 0 for t in thresholds) or (
                thresholds and thresholds[0] < 1):
            raise ValueError
    except ValueError:
        print(f"gymhub serve: --gc-threshold wants up to three non-negative integers, the "
              f"first at least 1, got {args.gc_threshold!r}", file=sys.stderr)
        return 2
    token = args.token or os.environ.get("GYMHUB_SERVER_TOKEN") or None
    try:
        env_kwargs = parse_env_args(args.env_arg, args.env_ids)
        env_kwargs.pop("")
        app = create_app(
            args.env_ids, max_episodes=args.max_episodes, token=token, env_kwargs=env_kwargs,
            ttl_s=args.ttl if args.ttl > 0 else None, step_timeout_s=args.step_timeout,
            max_body_bytes=args.max_body_bytes, workers=args.workers,
            expose_reference=not args.no_reference, drain_timeout_s=args.drain_timeout,
        )
    except GymhubError as exc:
        print(f"gymhub serve: {exc}", file=sys.stderr)
        return 2
    where = args.uds or f"{args.host}:{args.port}"
    try:
        sock = _bind_unix(args.uds) if args.uds else _bind(args.host, args.port)
    except OSError as exc:
        print(f"gymhub serve: cannot bind {where}: {exc}", file=sys.stderr)
        return 2
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"unix:{args.uds}" if args.uds else f"http://{host}:{sock.getsockname()[1]}"
    config = uvicorn.Config(app, log_level=args.log_level, access_log=False, lifespan="on",
                            timeout_graceful_shutdown=args.drain_timeout, backlog=4096,
                            timeout_keep_alive=30, server_header=False)
    # loop/http stay "auto": uvicorn then runs on uvloop and httptools when they are
    # installed (the `server` extra), which cuts its CPU per request by about a third.
    if thresholds:
        gc.set_threshold(*thresholds)
    banner = _banner(url, args.env_ids, args.max_episodes, token is not None)
    server = _AnnouncingServer(config, banner)
    server.run(sockets=[sock])
    return 0 if server.started else 1


def _configure_logging(level: str) -> None:
    """Send gymhub's own log lines (reaping, draining, crashes) to stderr like uvicorn's."""
    logger = logging.getLogger("gymhub")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)-9s %(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level.upper())


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only then,
    # and without it every reply waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _bind_unix(path: str) -> socket.socket:
    # Owner-only: the socket file is the server's whole access control when it has no
    # token (the hub's check reaches it as root, which permissions do not stop).
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    sock.set_inheritable(True)
    return sock


def _banner(url: str, env_ids: list[str], max_episodes: int, auth: bool) -> str:
    lines = [f"gymhub serving {len(env_ids)} environment(s) at {url} "
             f"(max {max_episodes} episodes{', bearer token required' if auth else ''})"]
    lines += [f"  {env_id:<24} {url}/{env_id}" for env_id in env_ids]
    return "\n".join(lines)


class _AnnouncingServer:
    """A uvicorn server that prints its banner once it accepts requests."""

    def __init__(self, config: Any, banner: str) -> None:
        import uvicorn

        banner_text = banner

        class Server(uvicorn.Server):
            async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                await super().startup(sockets=sockets)
                if self.started:
                    gc.collect()
                    gc.freeze()  # what exists now lives as long as the server
                    print(banner_text, flush=True)

        self._server = Server(config)

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    def run(self, sockets: list[socket.socket]) -> None:
        self._server.run(sockets=sockets)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
