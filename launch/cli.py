"""``gymhub launch ray`` and ``gymhub launch k8s``.

:func:`add_parser` registers the commands on ``gymhub``'s subparsers; nothing is imported
until one runs (Ray only by ``launch ray``). Errors are :class:`~gymhub.errors.GymhubError`
subclasses, which ``gymhub`` prints as one ``gymhub: error: ...`` line.

``launch ray`` prints one URL per line on stdout as each server starts answering (a
restarted server's URL again if it changed; each restart is noted on stderr), keeps
``--urls-file`` current,
and on ``SIGINT``/``SIGTERM`` drains the servers (in-flight steps finish) before it ends.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["add_parser", "main"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``launch`` (with ``ray`` and ``k8s``) to ``gymhub``'s ``add_subparsers()`` object."""
    launch = subparsers.add_parser(
        "launch", help="start N servers on Ray, or print Kubernetes manifests for them",
        description="Start N `gymhub serve` processes on an engine and list their URLs "
                    "for EnvPool (each episode stays on the server that opened it).")
    sub = launch.add_subparsers(dest="launch_command", required=True)

    ray = sub.add_parser("ray", help="servers as Ray actors (one CPU each), supervised",
                         description="Start N servers as Ray actors, print each URL as it "
                                     "answers, restart dead ones, drain all on Ctrl-C.")
    ray.add_argument("env_ids", nargs="+", metavar="ENV_ID", help="environments to serve")
    ray.add_argument("--servers", type=int, required=True, metavar="N")
    ray.add_argument("--address", default=None, metavar="auto|HOST:PORT",
                     help="the Ray cluster to join (default: start a local one)")
    ray.add_argument("--urls-file", default=None, metavar="FILE",
                     help="keep the URLs here, one per line, rewritten atomically on change")
    ray.add_argument("--serve-arg", action="append", default=[], metavar="ARG",
                     help="an option for every `gymhub serve` (repeat; use --serve-arg=--x "
                          "for one that starts with '-')")
    ray.add_argument("--interval", type=float, default=1.0,
                     help="seconds between supervision checks (default 1)")
    ray.add_argument("--ready-timeout", type=float, default=120.0,
                     help="seconds placement and each server's start may take")
    ray.set_defaults(fn=_cmd_ray)

    k8s = sub.add_parser("k8s", help="print a StatefulSet, headless Service and PDB (YAML)",
                         description="Print Kubernetes manifests for N servers (apply with "
                                     "kubectl apply -f -), their URLs, or the image's "
                                     "Dockerfile.")
    k8s.add_argument("env_ids", nargs="+", metavar="ENV_ID", help="environments to serve")
    k8s.add_argument("--servers", type=int, required=True, metavar="N")
    k8s.add_argument("--image", required=True, help="an image with gymhub installed")
    k8s.add_argument("--name", default="gymhub", help="StatefulSet and Service name")
    k8s.add_argument("--namespace", default="default")
    k8s.add_argument("--port", type=int, default=8000)
    k8s.add_argument("--token-secret", default=None, metavar="NAME",
                     help="a Secret with the bearer token (key: --token-key)")
    k8s.add_argument("--token-key", default="token")
    k8s.add_argument("--cpu", default="1", help="CPU request and limit per server")
    k8s.add_argument("--memory", default="2Gi", help="memory request and limit per server")
    k8s.add_argument("--drain-timeout", type=float, default=30.0,
                     help="gymhub serve --drain-timeout (the grace period exceeds it)")
    k8s.add_argument("--sandbox", choices=["bwrap", "none"], default="bwrap",
                     help="bwrap: privileged root pods, for environments that run agent "
                          "code; none: restricted non-root pods (default: bwrap)")
    k8s.add_argument("--serve-arg", action="append", default=[], metavar="ARG")
    out = k8s.add_mutually_exclusive_group()
    out.add_argument("--urls", action="store_true",
                     help="print only the servers' URLs (a file for --env-urls-file)")
    out.add_argument("--dockerfile", action="store_true", help="print the image's Dockerfile")
    k8s.add_argument("--package", default=None, metavar="SPEC",
                     help="with --dockerfile: what pip installs (default: "
                          "gymhub[server]==THIS_VERSION; a .whl path is copied in)")
    k8s.set_defaults(fn=_cmd_k8s)
    parser: argparse.ArgumentParser = launch
    return parser


def _cmd_k8s(args: argparse.Namespace) -> int:
    from . import k8s

    if args.dockerfile:
        sys.stdout.write(k8s.dockerfile(package=args.package))
    elif args.urls:
        k8s.manifests(args.env_ids, servers=args.servers, image=args.image, name=args.name,
                      namespace=args.namespace, port=args.port)  # the same checks
        print("\n".join(k8s.server_urls(name=args.name, servers=args.servers,
                                        namespace=args.namespace, port=args.port)))
    else:
        sys.stdout.write(k8s.render(
            args.env_ids, servers=args.servers, image=args.image, name=args.name,
            namespace=args.namespace, port=args.port, token_secret=args.token_secret,
            token_key=args.token_key, cpu=args.cpu, memory=args.memory,
            drain_timeout_s=args.drain_timeout, sandbox=args.sandbox,
            serve_args=args.serve_arg))
    return 0


def _cmd_ray(args: argparse.Namespace) -> int:
    from .ray_launch import ray

    listed: dict[int, str] = {}

    def ready(i: int, url: str) -> None:
        listed[i] = url
        print(url, flush=True)

    def restarted(i: int, url: str) -> None:
        moved = listed.get(i) != url
        print(f"gymhub launch: server {i} was restarted (its open episodes are lost); it "
              f"answers at {url}{' (a new URL)' if moved else ''}", file=sys.stderr,
              flush=True)
        if moved:
            ready(i, url)

    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        if stop.is_set():  # a second Ctrl-C: stop waiting (a start or a drain)
            raise KeyboardInterrupt
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        servers = ray(args.env_ids, servers=args.servers, address=args.address,
                      urls_file=args.urls_file, serve_args=args.serve_arg,
                      ready_timeout_s=args.ready_timeout, on_ready=ready)
        # ray.init may have installed its own handlers: ours decide when to drain.
        for s in previous:
            signal.signal(s, on_signal)
        with servers:
            print(f"gymhub launch: {args.servers} server(s) ready; Ctrl-C drains them",
                  file=sys.stderr, flush=True)
            servers.supervise(args.interval, on_change=restarted, stop=stop)
            print("gymhub launch: draining", file=sys.stderr, flush=True)
            statuses = servers.stop()
        clean = sum(1 for s in statuses if s in (0, -signal.SIGTERM))
        print(f"gymhub launch: {clean} of {len(statuses)} server(s) drained and exited "
              "cleanly", file=sys.stderr, flush=True)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``launch ...`` on its own (what ``gymhub launch ...`` does once wired in)."""
    from gymhub.errors import GymhubError

    parser = argparse.ArgumentParser(prog="gymhub")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["launch", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.fn(args))
    except GymhubError as exc:
        print(f"gymhub: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
