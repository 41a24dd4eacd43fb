"""``gymhub push``, ``install``, ``yank``, ``search`` and ``info``: a hub's users' commands.

They are top-level ``gymhub`` commands (a user pushes and installs; ``gymhub hub ...``
is for whoever runs a hub, :mod:`gymhub.hub.cli`), so :mod:`gymhub.cli` adds them to its
own parser with :func:`add_consumer_commands`. That happens on every ``gymhub``
invocation, ``--help`` included, so this module imports only argparse at load time;
each command imports the client, httpx, packaging and cryptography when it runs, which
also lets ``gymhub --help`` work on an install without the ``hub`` extra.

``push`` runs the same check as ``gymhub env check`` before it publishes. That check
belongs to the environment commands in :mod:`gymhub.cli`, which nothing may import, so
the caller hands it in (``check`` and ``add_check_options``) instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["CheckIds", "add_consumer_commands"]

#: Runs ``check_env`` on each environment id, prints the report, and says whether all passed.
CheckIds = Callable[[Sequence[str], argparse.Namespace], bool]

_HUB_HELP = "the hub's URL (default: $GYMHUB_HUB_URL)"

#: The third-party modules each command imports, all from the ``hub`` extra.
_NEEDS = {
    "push": ("httpx",),
    "yank": ("httpx",),
    "search": ("httpx",),
    "info": ("httpx",),
    "install": ("httpx", "packaging", "cryptography"),
}


def _require_hub_extra(command: str) -> None:
    """Refuse, naming the fix, when the hub extra this command imports is not installed.

    Without it a plain ``pip install gymhub`` meets a ``ModuleNotFoundError`` traceback
    from deep inside the client. The modules are looked up (``find_spec``), not imported,
    and before any author code runs, so a module missing from *their* package is never
    blamed on gymhub's extras.

    Raises:
        ConfigError: a module is missing.
    """
    missing = [m for m in _NEEDS[command] if importlib.util.find_spec(m) is None]
    if missing:
        from gymhub.errors import ConfigError

        raise ConfigError(f"`gymhub {command}` needs the hub extra ({', '.join(missing)} "
                          "is not installed): pip install 'gymhub[hub]'")


def add_consumer_commands(sub: Any, *, check: CheckIds,
                          add_check_options: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``push``, ``yank``, ``search``, ``info`` and ``install`` to ``gymhub``'s parser.

    Args:
        sub: the top-level parser's subparsers action.
        check: what ``push`` runs on a package directory's environments before building.
        add_check_options: adds that check's options (``--gold-tasks``, ``--json``, ...)
            to ``push``, so they are spelled as in ``gymhub env check``.
    """
    push = sub.add_parser("push", help="check, build and publish an environment to a hub")
    push.add_argument("path", nargs="?", default=".", help="a package directory or a .whl")
    push.add_argument("--hub", default=None, help=_HUB_HELP)
    push.add_argument("--no-check", action="store_true", help="push without running the check")
    add_check_options(push)
    push.set_defaults(fn=_cmd_push, check_ids=check)
    yank = sub.add_parser("yank", help="hide a published version from resolution")
    yank.add_argument("ref", metavar="OWNER/NAME@VERSION")
    yank.add_argument("--reason", required=True, help="shown to everyone who pins it")
    yank.add_argument("--hub", default=None, help=_HUB_HELP)
    yank.set_defaults(fn=_cmd_yank)
    search = sub.add_parser("search", help="search a hub's environments")
    search.add_argument("text")
    search.add_argument("--hub", default=None, help=_HUB_HELP)
    search.set_defaults(fn=_cmd_search)
    info = sub.add_parser("info", help="show an environment's versions on a hub")
    info.add_argument("ref", metavar="OWNER/NAME")
    info.add_argument("--hub", default=None, help=_HUB_HELP)
    info.add_argument("--json", action="store_true", help="print the hub's JSON reply")
    info.set_defaults(fn=_cmd_info)
    inst = sub.add_parser("install", help="install an environment from a hub, by digest")
    inst.add_argument("ref", nargs="?", default=None, metavar="OWNER/NAME[@VERSION]",
                      help="omit to re-install exactly what the lock lists")
    inst.add_argument("--hub", default=None, help=_HUB_HELP)
    inst.add_argument("--trust", action="store_true",
                      help="install even if the version's check failed or is missing")
    inst.add_argument("--accept-new-key", action="store_true",
                      help="accept and pin a signing key other than the one the lock pinned "
                           "for this hub (after the hub's operator announced a new key)")
    inst.add_argument("--target", default=None, help="install into this directory")
    inst.add_argument("--lock", default="gymhub.lock",
                      help="the lock file (default: ./gymhub.lock)")
    inst.set_defaults(fn=_cmd_install)


def _cmd_push(args: argparse.Namespace) -> int:
    _require_hub_extra("push")
    from pathlib import Path

    from gymhub.hub.client import HubClient

    client = HubClient.from_env(args.hub)  # before building: a missing token fails fast
    target = Path(os.path.expanduser(args.path))
    if target.is_dir():
        from gymhub.hub.build import build_wheel
        from gymhub.hub.project import load_package, read_package

        package = read_package(target)
        if not args.no_check and not args.check_ids(load_package(package), args):
            print("gymhub: error: the check failed, so nothing was pushed", file=sys.stderr)
            return 1
        target = build_wheel(package.root)
    elif target.suffix != ".whl":
        from gymhub.errors import ConfigError

        raise ConfigError(f"{args.path}: push a package directory or a .whl file")
    with client:
        reply = client.upload(target)
    what = "published" if reply["created"] else "already published (same bytes)"
    print(f"{what}: {reply['id']} {reply['version']} sha256 {reply['sha256']}")
    return 0


def _cmd_yank(args: argparse.Namespace) -> int:
    _require_hub_extra("yank")
    from gymhub.hub.client import HubClient, parse_ref

    owner, name, version = parse_ref(args.ref, version=True)
    with HubClient.from_env(args.hub) as client:
        reply = client.yank(owner, name, str(version), args.reason)
    print(f"yanked {reply['id']} {reply['version']}: {reply['yank_reason']}")
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    _require_hub_extra("search")
    from gymhub.hub.client import HubClient

    with HubClient.from_env(args.hub, need_token=False) as client:
        results = client.search(args.text)
    for r in results:
        print(f"{r['id']:<40} {r.get('latest') or '-':<10} {r.get('description', '')}")
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    _require_hub_extra("info")
    from gymhub.hub.client import HubClient, format_package, parse_ref

    owner, name, _ = parse_ref(args.ref, version=False)
    with HubClient.from_env(args.hub, need_token=False) as client:
        page = client.package(owner, name)
    print(json.dumps(page) if args.json else format_package(page))
    return 0


def _cmd_install(args: argparse.Namespace) -> int:
    _require_hub_extra("install")
    from gymhub.hub.client import parse_ref
    from gymhub.hub.install import install, install_locked
    from gymhub.hub.settings import HUB_URL_ENV

    if args.ref is None:
        install_locked(target=args.target, lock_path=args.lock, trust=args.trust,
                       accept_new_key=args.accept_new_key)
        return 0
    hub = args.hub or os.environ.get(HUB_URL_ENV, "")
    if not hub:
        from gymhub.errors import ConfigError

        raise ConfigError(f"no hub to install from: pass --hub URL or set {HUB_URL_ENV}")
    install(parse_ref(args.ref, version=False), hub, trust=args.trust,
            accept_new_key=args.accept_new_key, target=args.target, lock_path=args.lock)
    return 0
