"""The hub's web pages: search, an owner's packages, an environment's page, 404s.

People choose an environment by reading it: what it asks of an agent (its tools and
their JSON schemas), how it is scored (the verifier), how much data it has, whether the
hub's checker passed it, and which exact bytes a version is (sha256). The pages show
that, server-rendered with Jinja2 (autoescaping on, no JavaScript, no external assets:
the hub may run offline), from the same store the API reads.

Everything a publisher wrote is untrusted: descriptions and check details go through
autoescaping, and the README was rendered and sanitised once, when the version was
published (:mod:`gymhub.hub.markdown`), into ``versions.readme_html``: a page only reads
that column, so what a request costs does not depend on what a publisher wrote. A
version published before READMEs were rendered at publish time (``NULL``) shows a note
instead, until the one-off :meth:`~gymhub.hub.store.HubStore.render_missing_readmes`
(which ``gymhub hub serve`` starts in the background) has rendered it: no request ever
renders Markdown or opens a wheel.

Every list is bounded: search and an owner's packages are paged in SQL, the home page's
"recently updated" is computed at most once every few seconds, and a 404's suggestions
come from a bounded, indexed candidate query (:mod:`gymhub.hub.search`). Install commands
use the hub's configured public address (``app.state.public_url``), never the ``Host``
header. The pages' only stylesheet is inline, and :data:`STYLE_HASH` lets the CSP allow
exactly it (no ``'unsafe-inline'``, no ``style=`` attributes anywhere).

**Routing.** ``/{owner}`` and ``/{owner}/{name}`` would swallow any hub path of one or
two segments, so the owner segment has its own convertor that refuses every owner name
:data:`~gymhub.hub.names.RESERVED_OWNERS` keeps for the hub (``api``, ``simple``,
``files``, ``healthz``, ``well-known``...) and anything no owner can be (``.well-known``):
those paths never reach these routes, so the API's JSON errors and Starlette's
trailing-slash redirects behave exactly as without the pages.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import jinja2
import sqlalchemy as sa
from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from gymhub.errors import InvalidHubInput, PackageNotFound, VersionNotFound
from gymhub.hub.check_queue import queued_versions
from gymhub.hub.db import Owner, Package
from gymhub.hub.db import Version as VersionRow
from gymhub.hub.names import RESERVED_OWNERS, did_you_mean, distribution_name
from gymhub.hub.records import CheckInfo, VersionInfo, newest
from gymhub.hub.search import suggest_owners, suggestion_pool
from gymhub.hub.store import HubStore

__all__ = ["PAGE_SIZE", "STYLE_HASH", "pages_router"]

_TEMPLATES = Path(__file__).resolve().parent / "templates" / "pages"
_PAGE_CACHE = "public, max-age=60"
#: Results per page of search and of an owner's packages.
PAGE_SIZE = 50
_MAX_PAGE = 1000
_HOME_TTL_S = 5.0
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


def _style_hash() -> str:
    """The CSP source for the base template's ``<style>`` block, as rendered."""
    page = _env.get_template("base.html").render(q="")
    m = re.search(r"<style>(.*?)</style>", page, re.DOTALL)
    assert m is not None, "base.html lost its <style> block"
    digest = hashlib.sha256(m.group(1).encode()).digest()
    return "sha256-" + base64.b64encode(digest).decode()


#: The CSP ``style-src`` hash of the pages' one stylesheet (``'sha256-...'``).
STYLE_HASH = _style_hash()


#: What a version waiting in the hub's check queue shows (the queue is in the database).
_QUEUED: dict[str, Any] = {
    "status": "queued", "sha256": None, "checked_at": None, "checks": [], "envs": {},
    "gold_score": None, "noop_score": None, "reason": "",
    "summary": "waiting for the hub's check (queued)"}


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


class _Recent:
    """The home page's list, recomputed at most every ``ttl_s`` (it aggregates versions)."""

    def __init__(self, store: HubStore, ttl_s: float = _HOME_TTL_S) -> None:
        self._store, self._ttl = store, ttl_s
        self._lock = threading.Lock()
        self._value: list[dict[str, Any]] = []
        self._at = -float("inf")

    def get(self) -> list[dict[str, Any]]:
        with self._lock:  # one computation at a time; the others wait for its result
            if time.monotonic() - self._at > self._ttl:
                self._value, self._at = _recent(self._store), time.monotonic()
            return self._value


def _owner_packages(store: HubStore, owner: str,
                    page: int) -> tuple[list[dict[str, Any]], bool] | None:
    """One page of ``owner``'s packages (and whether another follows), or ``None``."""
    with store.db.read() as session:
        owner_id = session.scalar(sa.select(Owner.id).where(Owner.name == owner))
        if owner_id is None:
            return None
        rows = session.scalars(sa.select(Package).where(Package.owner_id == owner_id)
                               .order_by(Package.normalized_name)
                               .limit(PAGE_SIZE + 1).offset((page - 1) * PAGE_SIZE)).all()
        ids = [p.id for p in rows[:PAGE_SIZE]]
        versions = session.scalars(sa.select(VersionRow)
                                   .where(VersionRow.package_id.in_(ids))).all() if ids else []
    by_package: dict[int, list[VersionInfo]] = {}
    for v in versions:
        by_package.setdefault(v.package_id, []).append(VersionInfo(
            owner, "", v.version, v.sha256, v.size, v.filename, (), {}, v.uploaded_at,
            v.yanked_at, v.yank_reason))
    out = []
    for p in rows[:PAGE_SIZE]:
        top = newest(by_package.get(p.id, []))
        out.append({"owner": owner, "name": p.name, "description": p.description,
                    "latest": top.version if top else None})
    return out, len(rows) > PAGE_SIZE


def _package_context(store: HubStore, owner: str, name: str,
                     version: str | None) -> dict[str, Any]:
    """Everything the environment page shows; raises PackageNotFound/VersionNotFound."""
    pkg = store.get_package(owner, name)
    versions = store.list_versions(owner, name)
    latest = store.latest_checks(owner, name)
    waiting = queued_versions(store.db, owner, name)
    checks = {v.version: _check_view(latest.get(v.version)) or
              (_QUEUED if v.version in waiting else None) for v in versions}
    if version is None:
        current = newest(versions) or (versions[0] if versions else None)
    else:
        current = store.resolve(owner, name, f"=={version}")
    if current is None:
        raise PackageNotFound(f"{owner}/{name} has no versions")
    check = checks.get(current.version)
    html = store.readme_html(current.owner, current.name, current.version)
    return {"pkg": pkg, "versions": versions, "checks": checks, "current": current,
            "pinned": version is not None, "check": check, "envs": _env_views(current, check),
            "readme": None if html is None else Markup(html),  # sanitised at publish
            "readme_pending": html is None, "meta": dict(current.metadata),
            "dist": distribution_name(pkg.owner, pkg.normalized_name)}


def _render(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    page = _env.get_template(template).render(**context)
    return HTMLResponse(page, status, {"Cache-Control": _PAGE_CACHE} if status == 200 else {})


async def _in_thread(fn: Callable[[], _T]) -> _T:
    return await run_in_threadpool(fn)


def pages_router(store: HubStore) -> APIRouter:
    """The hub's HTML pages over ``store``; include it after the API and index routes.

    Args:
        store: the hub's registry and blobs.

    Returns:
        A router for ``/``, ``/search``, ``/{owner}``, ``/{owner}/{name}`` and
        ``/{owner}/{name}/{version}``.
    """
    router = APIRouter(tags=["pages"], include_in_schema=False)
    recent = _Recent(store)

    def base(request: Request) -> str:
        """The public address install commands use: configured, never the Host header."""
        url = getattr(request.app.state, "public_url", None)
        return str(url) if url else "http://127.0.0.1:8700"

    def near_packages(owner: str, name: str) -> list[str]:
        pool = suggestion_pool(store.db, owner, name)
        return did_you_mean(f"{owner}/{name}", [f"{o}/{n}" for o, n in pool])

    async def not_found(request: Request, what: str, wanted: str,
                        suggestions: list[str]) -> HTMLResponse:
        return _render("404.html", 404, what=what, wanted=wanted, suggestions=suggestions,
                       base=base(request), q="")

    @router.get("/", response_class=HTMLResponse)
    async def home(request: Request) -> HTMLResponse:
        items = await _in_thread(recent.get)
        return _render("home.html", recent=items, base=base(request), q="")

    @router.get("/search", response_class=HTMLResponse)
    async def search(request: Request, q: str = "",
                     page: int = Query(1, ge=1, le=_MAX_PAGE)) -> HTMLResponse:
        q = q[:200]
        found = await _in_thread(lambda: store.search(
            q, limit=PAGE_SIZE + 1, offset=(page - 1) * PAGE_SIZE)) if q.strip() else []
        return _render("search.html", q=q, results=found[:PAGE_SIZE], page=page,
                       more=len(found) > PAGE_SIZE, first=(page - 1) * PAGE_SIZE,
                       base=base(request))

    @router.get("/{owner:hubowner}", response_class=HTMLResponse)
    async def owner_page(request: Request, owner: str,
                         page: int = Query(1, ge=1, le=_MAX_PAGE)) -> HTMLResponse:
        found = await _in_thread(lambda: _owner_packages(store, owner, page))
        if found is None:
            near = await _in_thread(lambda: suggest_owners(store.db, owner))
            return await not_found(request, "owner", owner, near)
        packages, more = found
        return _render("owner.html", owner=owner, packages=packages, page=page, more=more,
                       base=base(request), q="")

    async def package_page(request: Request, owner: str, name: str,
                           version: str | None) -> HTMLResponse:
        try:
            ctx = await _in_thread(lambda: _package_context(store, owner, name, version))
        except PackageNotFound:
            near = await _in_thread(lambda: near_packages(owner, name))
            return await not_found(request, "environment", f"{owner}/{name}", near)
        except (VersionNotFound, InvalidHubInput):
            versions = await _in_thread(lambda: store.list_versions(owner, name))
            wanted = f"{owner}/{name} {version}"
            return await not_found(request, "version", wanted, did_you_mean(
                wanted, [f"{owner}/{name} {v.version}" for v in versions]))
        return _render("package.html", base=base(request), q="", **ctx)

    @router.get("/{owner:hubowner}/{name}", response_class=HTMLResponse)
    async def package(request: Request, owner: str, name: str) -> HTMLResponse:
        return await package_page(request, owner, name, None)

    @router.get("/{owner:hubowner}/{name}/{version}", response_class=HTMLResponse)
    async def package_version(request: Request, owner: str, name: str,
                              version: str) -> HTMLResponse:
        return await package_page(request, owner, name, version)

    return router
