"""``gymhub hub ...``: run a hub (``serve``) and administer it (``token ...``, ``check``).

``serve`` binds its socket and migrates the database before it prints
``hub serving at http://HOST:PORT`` (the real port, when asked for port 0), so a script
or test may connect as soon as that line appears.

Token commands talk to the hub's database directly, so they are for whoever runs the hub;
users get tokens from it. ``create`` and ``rotate`` print the token alone on stdout, as
its last line, and everything else on stderr, so ``TOKEN=$(gymhub hub token create ...)``
works. Tokens expire after 90 days unless ``--expires`` says otherwise (``never`` only
when written out). ``delete`` is the administrator's takedown (malware, leaked secrets):
the version goes, its ledger entry stays, so it can never be published again.

``serve`` signs check results with the key at ``--key`` (created on first start) and
checks every new upload in the background; ``check`` reruns one version's check now;
``fsck`` compares storage with the database and, with ``--sweep``, removes blobs nothing
references (exit 1 on damage).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gymhub.hub.db import HubDB

__all__ = ["main"]


def _db(args: argparse.Namespace) -> HubDB:
    from gymhub.hub.db import HubDB

    return HubDB(args.db)


def _cmd_token_create(args: argparse.Namespace) -> int:
    from gymhub.hub.tokens import create_token, parse_duration

    expires = parse_duration(args.expires)
    db = _db(args)
    try:
        info, token = create_token(db, args.owner, args.scope or ("read", "publish"),
                                   expires_in=expires, description=args.description)
    finally:
        db.close()
    until = f"{info.expires_at:%Y-%m-%d %H:%M}Z" if info.expires_at else "never"
    print(f"created token {info.prefix} for {info.owner!r}: scopes "
          f"{', '.join(sorted(info.scopes))}; expires {until}. It is shown only once:",
          file=sys.stderr)
    print(token)
    return 0


def _cmd_token_revoke(args: argparse.Namespace) -> int:
    from gymhub.hub.tokens import revoke_token

    db = _db(args)
    try:
        info = revoke_token(db, args.token_id)
    finally:
        db.close()
    print(f"revoked {info.prefix} of {info.owner!r}")
    return 0


def _cmd_token_rotate(args: argparse.Namespace) -> int:
    from datetime import timedelta
    from typing import Literal

    from gymhub.hub.tokens import parse_duration, rotate_token

    expires: timedelta | Literal["same"] | None = (
        "same" if args.expires is None else parse_duration(args.expires))
    db = _db(args)
    try:
        info, token = rotate_token(db, args.token_id, expires_in=expires)
    finally:
        db.close()
    old = args.token_id.removeprefix("ghub_").partition("_")[0]
    until = f"{info.expires_at:%Y-%m-%d %H:%M}Z" if info.expires_at else "never"
    print(f"revoked ghub_{old}; its replacement {info.prefix} for {info.owner!r} has scopes "
          f"{', '.join(sorted(info.scopes))} and expires {until}. It is shown only once:",
          file=sys.stderr)
    print(token)
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import IntegrityError

    from gymhub.errors import HubStoreError, InvalidHubInput
    from gymhub.hub.blobs import FileBlobStore
    from gymhub.hub.check_queue import dequeue
    from gymhub.hub.store import HubStore

    owner, _, name = args.ref.partition("/")
    reason = args.reason.strip()
    if not (owner and name):
        raise InvalidHubInput(f"expected OWNER/NAME, not {args.ref!r}")
    if not reason:
        raise InvalidHubInput("a deletion needs a --reason (it is kept in the ledger)")
    db = _db(args)
    try:
        store = HubStore(db, FileBlobStore(args.storage or default_storage(args.db)))
        info = store.resolve(owner, name, f"=={args.version}")
        checks = len(store.latest_checks(owner, name).keys() & {info.version})
        for _ in range(3):  # a worker starting up may queue the version again meanwhile
            dropped = dequeue(db, owner, name, info.version)
            try:
                store.delete_version(owner, name, info.version, reason)
                break
            except IntegrityError:
                continue
        else:
            raise HubStoreError(f"{owner}/{name} {info.version} kept being queued; retry")
    finally:
        db.close()
    print(f"deleted {info.owner}/{info.name} {info.version}: {info.filename} "
          f"({info.size} bytes, sha256 {info.sha256}); check results removed: "
          f"{'yes' if checks else 'none'}; queued check dropped: {'yes' if dropped else 'no'}")
    print(f"the ledger keeps {info.owner}/{info.name} {info.version} -> {info.sha256} "
          f"({reason!r}): it can never be published again; the file stays on disk until "
          "'gymhub hub fsck --sweep'")
    return 0


def _cmd_token_list(args: argparse.Namespace) -> int:
    from gymhub.hub.tokens import list_tokens

    db = _db(args)
    try:
        tokens = list_tokens(db, args.owner)
        now = db.clock()
    finally:
        db.close()
    for t in tokens:
        state = ("revoked" if t.revoked_at else
                 "expired" if t.expires_at and t.expires_at <= now else "active")
        until = f"{t.expires_at:%Y-%m-%d}" if t.expires_at else "never"
        print(f"{t.prefix}  {state:<7}  {','.join(sorted(t.scopes)):<18}  expires {until}  "
              f"{t.description}")
    return 0


def default_storage(db_url: str) -> Path:
    """Where wheels go by default: beside a SQLite database file, else the data directory."""
    from sqlalchemy.engine import make_url

    url = make_url(db_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return Path(str(url.database)).expanduser().resolve().parent / "hub-files"
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return data / "gymhub" / "hub-files"


def _cmd_serve(args: argparse.Namespace) -> int:
    import socket
    import threading

    import uvicorn

    from gymhub.hub.check_service import CheckWorker
    from gymhub.hub.index import index_router
    from gymhub.hub.limits import RateLimit
    from gymhub.hub.pages import pages_router
    from gymhub.hub.service import create_hub_app
    from gymhub.hub.signing import HubKey
    from gymhub.hub.store import HubStore

    rate_limit = RateLimit.parse(args.rate_limit)  # a typo fails before anything starts
    if args.db.startswith("sqlite:///"):
        Path(args.db.removeprefix("sqlite:///")).expanduser().parent.mkdir(parents=True,
                                                                            exist_ok=True)
    storage = Path(args.storage) if args.storage else default_storage(args.db)
    quota = None if args.owner_quota_mb <= 0 else args.owner_quota_mb << 20
    store = HubStore.open(args.db, storage, owner_quota_bytes=quota)
    key = HubKey.load_or_create(args.key or storage.parent / "hub-key.pem")
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(128)  # connections queue from here on, so "ready" below is true
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    app = create_hub_app(store, max_upload_bytes=args.max_upload_mb << 20,
                         extra_routers=[index_router(store), pages_router(store)], key=key,
                         checker=CheckWorker(store, timeout_s=args.check_timeout),
                         public_url=args.public_url or f"http://{shown}:{port}",
                         rate_limit=rate_limit)
    # READMEs of versions published before they were rendered at publish time: once.
    threading.Thread(target=store.render_missing_readmes, name="hub-readmes",
                     daemon=True).start()
    print(f"hub serving at http://{shown}:{port}", flush=True)
    print(f"database {args.db}, files under {storage}, signing key {key.key_id}",
          file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        store.db.close()
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    import json

    from gymhub.errors import InvalidHubInput
    from gymhub.hub.checker import check_version
    from gymhub.hub.store import HubStore

    ref, _, version = args.ref.partition("@")
    owner, _, name = ref.partition("/")
    if not (owner and name and version):
        raise InvalidHubInput(f"expected OWNER/NAME@VERSION, not {args.ref!r}")
    storage = Path(args.storage) if args.storage else default_storage(args.db)
    store = HubStore.open(args.db, storage)
    try:
        info = check_version(store, owner, name, version, timeout_s=args.timeout)
    finally:
        store.db.close()
    print(json.dumps(dict(info.details), indent=2) if args.json else info.details["summary"])
    print(f"{owner}/{name} {info.version}: {info.status}")
    return 0 if info.status == "passed" else 1


def _cmd_fsck(args: argparse.Namespace) -> int:
    import json

    from gymhub.hub.audit import audit, sweep
    from gymhub.hub.store import HubStore
    from gymhub.hub.tokens import parse_duration

    storage = Path(args.storage) if args.storage else default_storage(args.db)
    store = HubStore.open(args.db, storage)
    try:
        removed: list[str] = []
        if args.sweep:
            grace = None if args.grace.strip() in {"0", "0s"} else parse_duration(args.grace)
            removed = sweep(store, grace_s=grace.total_seconds() if grace else 0.0)
        report = audit(store, verify=not args.no_verify)
    finally:
        store.db.close()
    if args.json:
        print(json.dumps({**report.to_dict(), "swept": removed}))
    else:
        for sha in removed:
            print(f"swept unreferenced blob {sha}")
        print(report.summary())
    return 0 if report.ok else 1


def _parser() -> argparse.ArgumentParser:
    from gymhub.hub.db import default_db_url

    p = argparse.ArgumentParser(prog="gymhub hub", description="run and administer a hub")
    sub = p.add_subparsers(dest="hub_command", required=True)
    token = sub.add_parser("token", help="create, rotate, revoke and list API tokens")
    tsub = token.add_subparsers(dest="token_command", required=True)
    db_help = "hub database URL (default: $GYMHUB_HUB_DB or ~/.local/share/gymhub/hub.db)"

    serve = sub.add_parser("serve", help="serve the hub's HTTP API")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    serve.add_argument("--port", type=int, default=8700, help="port (0: any free one)")
    serve.add_argument("--db", default=default_db_url(), help=db_help)
    serve.add_argument("--storage", default=None,
                       help="directory for wheel files (default: hub-files/ beside the db)")
    serve.add_argument("--max-upload-mb", type=int, default=64, help="largest wheel accepted")
    serve.add_argument("--log-level", default="warning",
                       choices=["critical", "error", "warning", "info", "debug"])
    serve.add_argument("--key", default=None,
                       help="ed25519 signing key, created if absent (default: hub-key.pem "
                            "beside the db)")
    serve.add_argument("--check-timeout", type=float, default=300.0,
                       help="seconds each background check of an upload may take")
    serve.add_argument("--public-url", default=None,
                       help="the address users reach the hub at, shown in install commands "
                            "(default: http://HOST:PORT as bound; never the Host header)")
    serve.add_argument("--rate-limit", default="20/s:200",
                       help="requests per client address and per token: N/s, N/m or N/h, "
                            "optionally :BURST, or 'off' (default: 20/s:200); over it is a "
                            "429 with Retry-After")
    serve.add_argument("--owner-quota-mb", type=int, default=1024,
                       help="storage each owner's versions may take together, in MiB "
                            "(0: unlimited; default 1024)")
    serve.set_defaults(fn=_cmd_serve)

    check = sub.add_parser("check", help="check a published version now, in the sandbox, "
                                         "and record the result (exit 0 only if it passed)")
    check.add_argument("ref", metavar="OWNER/NAME@VERSION")
    check.add_argument("--db", default=default_db_url(), help=db_help)
    check.add_argument("--storage", default=None,
                       help="directory for wheel files (default: hub-files/ beside the db)")
    check.add_argument("--timeout", type=float, default=300.0, help="seconds the check may take")
    check.add_argument("--json", action="store_true", help="print the details JSON")
    check.set_defaults(fn=_cmd_check)

    fsck = sub.add_parser("fsck", help="check storage against the database (exit 1 on "
                                       "damage); --sweep removes unreferenced blobs")
    fsck.add_argument("--db", default=default_db_url(), help=db_help)
    fsck.add_argument("--storage", default=None,
                      help="directory for wheel files (default: hub-files/ beside the db)")
    fsck.add_argument("--sweep", action="store_true",
                      help="delete unreferenced blobs and partial writes older than --grace")
    fsck.add_argument("--grace", default="1h",
                      help="age an unreferenced blob must reach before a sweep takes it "
                           "(a publish may be committing it): 1h, 30m, 0 ...")
    fsck.add_argument("--no-verify", action="store_true",
                      help="compare sizes only, without hashing every blob")
    fsck.add_argument("--json", action="store_true", help="print the report as JSON")
    fsck.set_defaults(fn=_cmd_fsck)

    delete = sub.add_parser("delete", help="take a version down for good (malware, leaks); "
                                           "the ledger keeps its sha256 so it is never reused")
    delete.add_argument("ref", metavar="OWNER/NAME")
    delete.add_argument("version", metavar="VERSION")
    delete.add_argument("--reason", required=True, help="why (kept in the ledger)")
    delete.add_argument("--db", default=default_db_url(), help=db_help)
    delete.add_argument("--storage", default=None,
                        help="directory for wheel files (default: hub-files/ beside the db)")
    delete.set_defaults(fn=_cmd_delete)

    create = tsub.add_parser("create", help="mint a token (creates the owner if needed)")
    create.add_argument("--owner", required=True, help="the namespace the token acts for")
    create.add_argument("--scope", action="append", choices=["read", "publish", "yank"],
                        help="repeat for several (default: read and publish)")
    create.add_argument("--expires", default="90d",
                        help="lifetime: 30d, 12h, 1w (default 90d), or never (explicitly)")
    create.add_argument("--description", default="", help="a note shown in listings")
    create.add_argument("--db", default=default_db_url(), help=db_help)
    create.set_defaults(fn=_cmd_token_create)

    revoke = tsub.add_parser("revoke", help="revoke a token by id (or its ghub_<id> prefix)")
    revoke.add_argument("token_id")
    revoke.add_argument("--db", default=default_db_url(), help=db_help)
    revoke.set_defaults(fn=_cmd_token_revoke)

    rotate = tsub.add_parser("rotate", help="replace a token by a new secret (same owner, "
                                            "scopes, description) and revoke the old one")
    rotate.add_argument("token_id", metavar="TOKEN_ID", help="its id or ghub_<id> prefix")
    rotate.add_argument("--expires", default=None,
                        help="the new token's lifetime (default: the old one's): 30d, never")
    rotate.add_argument("--db", default=default_db_url(), help=db_help)
    rotate.set_defaults(fn=_cmd_token_rotate)

    lst = tsub.add_parser("list", help="list an owner's tokens (never their secrets)")
    lst.add_argument("--owner", required=True)
    lst.add_argument("--db", default=default_db_url(), help=db_help)
    lst.set_defaults(fn=_cmd_token_list)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``gymhub hub``; errors print one line (see :mod:`gymhub.cli_errors`)."""
    from gymhub.cli_errors import report
    from gymhub.errors import GymhubError

    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return int(args.fn(args))
    except GymhubError as exc:
        return report(exc)
    except ModuleNotFoundError as exc:  # the commands import lazily; the hub extra ships it
        print(f"gymhub hub: needs {exc.name!r}: pip install 'gymhub[hub]'", file=sys.stderr)
        return 2
