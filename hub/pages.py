"""The hub's web pages: search, an owner's packages, an environment's page, 404s.

People choose an environment by reading it: what it asks of an agent (its tools and
their JSON schemas), how it is scored (the verifier), how much data it has, whether the
hub's checker passed it, and which exact bytes a version is (sha256). The pages show
that, server-rendered with Jinja2 (autoescaping on, no JavaScript, no external assets:
the hub may run offline), from the same store the API reads.

Everything a publisher wrote is untrusted: descriptions and check details go through
autoescaping, and the README through :func:`~gymhub.hub.markdown.render_markdown`,
which escapes before it adds any tag. The README is not in the database; it is read from
the stored wheel's ``METADATA`` in memory, as the index does, and cached by sha256
(immutable bytes, so the cache never needs invalidating).

**Routing.** ``/{owner}`` and ``/{owner}/{name}`` would swallow any hub path of one or
two segments, so the owner segment has its own convertor that refuses every owner name
:data:`~gymhub.hub.names.RESERVED_OWNERS` keeps for the hub (``api``, ``simple``,
``files``, ``healthz``, ``well-known``...) and anything no owner can be (``.well-known``):
those paths never reach these routes, so the API's JSON errors and Starlette's
trailing-slash redirects behave exactly as without the pages.
"""

from __future__ import annotations

import email.parser
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import jinja2
import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from gymhub.errors import BlobCorrupted, InvalidHubInput, PackageNotFound, VersionNotFound
from gymhub.hub.db import Owner, Package
from gymhub.hub.db import Version as VersionRow
from gymhub.hub.index import wheel_metadata
from gymhub.hub.markdown import render_markdown
from gymhub.hub.names import RESERVED_OWNERS, did_you_mean, distribution_name
from gymhub.hub.records import CheckInfo, VersionInfo, newest
from gymhub.hub.store import HubStore

__all__ = ["pages_router"]

_TEMPLATES = Path(__file__).resolve().parent / "templates" / "pages"
_PAGE_CACHE = "public, max-age=60"
_T = TypeVar("_T")


class _OwnerConvertor(Convertor[str]):
    """An owner-shaped segment that is not one of the hub's own words (see the module)."""

    _reserved = "|".join(sorted(RESERVED_OWNERS, key=len, reverse=True))
    regex = f"(?!(?i:{_reserved})(?:/|$))[A-Za-z0-9][A-Za-z0-9._-]{{0,99}}"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("hubowner", _OwnerConvertor())

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True,
                          undefined=jinja2.StrictUndefined, trim_blocks=True,
                          lstrip_blocks=True)


def _when(t: datetime | None) -> str:
    if t is None:
        return ""
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    return t.strftime("%Y-%m-%d %H:%M UTC")


_env.filters["when"] = _when
_env.filters["pretty_json"] = lambda v: json.dumps(v, indent=2, sort_keys=True, default=str)


class _ReadmeCache:
    """Rendered READMEs by wheel sha256 (LRU): the bytes behind a digest never change."""

    def __init__(self, capacity: int = 256) -> None:
        self._items: OrderedDict[str, Markup | None] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, store: HubStore, info: VersionInfo) -> Markup | None:
        with self._lock:
            if info.sha256 in self._items:
                self._items.move_to_end(info.sha256)
                return self._items[info.sha256]
        try:
            raw = wheel_metadata(store.read_file(info), info.filename)
        except BlobCorrupted:
            return None  # not cached: a repaired blob brings the README back
        body = None
        if raw is not None:
            msg = email.parser.Parser().parsestr(raw.decode("utf-8", "replace"))
            payload = msg.get_payload()
            if isinstance(payload, str) and payload.strip():
                body = render_markdown(payload)
        with self._lock:
            self._items[info.sha256] = body
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)
        return body


def _check_view(check: CheckInfo | None) -> dict[str, Any] | None:
    """A check result in the shape the templates expect, whatever the details hold.

    The checker is another component (and an older one may have written other keys), so
    a missing or mistyped field shows as absent rather than breaking the page.
    """
    if check is None:
        return None
    d: Mapping[str, Any] = check.details if isinstance(check.details, Mapping) else {}
    checks = [c for c in d.get("checks") or [] if isinstance(c, Mapping)]
    envs = d.get("envs") if isinstance(d.get("envs"), Mapping) else {}
    return {"status": check.status, "sha256": check.sha256, "checked_at": check.checked_at,
            "summary": str(d.get("summary") or ""), "reason": str(d.get("reason") or ""),
            "checks": checks, "envs": envs, "gold_score": d.get("gold_score"),
            "noop_score": d.get("noop_score")}


def _env_views(current: VersionInfo, check: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per environment id: its tools, verifier and task count from the version's check."""
    envs: Mapping[str, Any] = check["envs"] if check else {}
    out = []
    for env_id in current.env_ids:
        e = envs.get(env_id) if isinstance(envs.get(env_id), Mapping) else None
        tools = []
        for t in (e or {}).get("tools") or []:
            fn = t.get("function", t) if isinstance(t, Mapping) else {}
            if isinstance(fn, Mapping):
                tools.append({"name": str(fn.get("name") or "?"),
                              "description": str(fn.get("description") or ""),
                              "parameters": fn.get("parameters") or {}})
        out.append({"id": env_id, "known": e is not None, "tools": tools,
                    "verifier": (e or {}).get("verifier"),
                    "task_count": (e or {}).get("task_count"),
                    "max_turns": (e or {}).get("max_turns")})
    return out


def _known_packages(store: HubStore) -> list[str]:
    with store.db.read() as session:
        return [f"{o}/{n}" for o, n in session.execute(
            sa.select(Owner.name, Package.name).join(Package))]


def _owners(store: HubStore) -> list[str]:
    with store.db.read() as session:
        return list(session.scalars(sa.select(Owner.name)))


def _recent(store: HubStore, limit: int = 20) -> list[dict[str, Any]]:
    """Packages by their newest upload, newest first (the home page's list)."""
    last = sa.func.max(VersionRow.uploaded_at).label("last")
    with store.db.read() as session:
        rows = session.execute(
            sa.select(Owner.name, Package.name, Package.description, last)
            .select_from(Package).join(Owner).join(VersionRow)
            .group_by(Owner.name, Package.id, Package.name, Package.description)
            .order_by(last.desc()).limit(limit)).all()
    return [{"owner": o, "name": n, "description": d, "updated": t} for o, n, d, t in rows]


def _owner_packages(store: HubStore, owner: str) -> list[dict[str, Any]] | None:
    with store.db.read() as session:
        owner_id = session.scalar(sa.select(Owner.id).where(Owner.name == owner))
        if owner_id is None:
            return None
        names = session.scalars(sa.select(Package.name).where(Package.owner_id == owner_id)
                                .order_by(Package.normalized_name)).all()
    packages = [store.get_package(owner, n) for n in names]
    return [{"owner": p.owner, "name": p.name, "description": p.description,
             "latest": p.latest} for p in packages]


def _package_context(store: HubStore, readmes: _ReadmeCache, owner: str, name: str,
                     version: str | None) -> dict[str, Any]:
    """Everything the environment page shows; raises PackageNotFound/VersionNotFound."""
    pkg = store.get_package(owner, name)
    versions = store.list_versions(owner, name)
    latest = store.latest_checks(owner, name)
    checks = {v.version: _check_view(latest.get(v.version)) for v in versions}
    if version is None:
        current = newest(versions) or (versions[0] if versions else None)
    else:
        current = store.resolve(owner, name, f"=={version}")
    if current is None:
        raise PackageNotFound(f"{owner}/{name} has no versions")
    check = checks.get(current.version)
    return {"pkg": pkg, "versions": versions, "checks": checks, "current": current,
            "pinned": version is not None, "check": check, "envs": _env_views(current, check),
            "readme": readmes.get(store, current), "meta": dict(current.metadata),
            "dist": distribution_name(pkg.owner, pkg.normalized_name)}


def _render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    page = _env.get_template(template).render(**context)
    return HTMLResponse(page, status, {"Cache-Control": _PAGE_CACHE} if status == 200 else {})


async def _in_thread(fn: Callable[[], _T]) -> _T:
    return await run_in_threadpool(fn)


def pages_router(store: HubStore, *, readme_cache: int = 256) -> APIRouter:
    """The hub's HTML pages over ``store``; include it after the API and index routes.

    Args:
        store: the hub's registry and blobs.
        readme_cache: how many rendered READMEs to keep (one per wheel sha256).

    Returns:
        A router for ``/``, ``/search``, ``/{owner}``, ``/{owner}/{name}`` and
        ``/{owner}/{name}/{version}``.
    """
    router = APIRouter(tags=["pages"], include_in_schema=False)
    readmes = _ReadmeCache(readme_cache)

    def base(request: Request) -> str:
        return str(request.base_url).rstrip("/")

    async def not_found(request: Request, what: str, wanted: str,
                        candidates: list[str] | None = None) -> HTMLResponse:
        pool = candidates if candidates is not None else await _in_thread(
            lambda: _known_packages(store))
        return _render("404.html", 404, what=what, wanted=wanted,
                       suggestions=did_you_mean(wanted, pool), base=base(request), q="")

    @router.get("/", response_class=HTMLResponse)
    async def home(request: Request) -> HTMLResponse:
        recent = await _in_thread(lambda: _recent(store))
        return _render("home.html", recent=recent, base=base(request), q="")

    @router.get("/search", response_class=HTMLResponse)
    async def search(request: Request, q: str = "") -> HTMLResponse:
        q = q[:200]
        found = await _in_thread(lambda: store.search(q, limit=100)) if q.strip() else []
        return _render("search.html", q=q, results=found, base=base(request))

    @router.get("/{owner:hubowner}", response_class=HTMLResponse)
    async def owner_page(request: Request, owner: str) -> HTMLResponse:
        packages = await _in_thread(lambda: _owner_packages(store, owner))
        if packages is None:
            owners = await _in_thread(lambda: _owners(store))
            return await not_found(request, "owner", owner, owners)
        return _render("owner.html", owner=owner, packages=packages, base=base(request), q="")

    async def package_page(request: Request, owner: str, name: str,
                           version: str | None) -> HTMLResponse:
        try:
            ctx = await _in_thread(lambda: _package_context(store, readmes, owner, name,
                                                            version))
        except PackageNotFound:
            return await not_found(request, "environment", f"{owner}/{name}")
        except (VersionNotFound, InvalidHubInput):
            versions = await _in_thread(lambda: store.list_versions(owner, name))
            return await not_found(request, "version", f"{owner}/{name} {version}",
                                   [f"{owner}/{name} {v.version}" for v in versions])
        return _render("package.html", base=base(request), q="", **ctx)

    @router.get("/{owner:hubowner}/{name}", response_class=HTMLResponse)
    async def package(request: Request, owner: str, name: str) -> HTMLResponse:
        return await package_page(request, owner, name, None)

    @router.get("/{owner:hubowner}/{name}/{version}", response_class=HTMLResponse)
    async def package_version(request: Request, owner: str, name: str,
                              version: str) -> HTMLResponse:
        return await package_page(request, owner, name, version)

    return router
