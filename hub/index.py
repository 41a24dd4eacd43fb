"""The hub as a standard package index, so plain ``pip`` and ``uv`` install from it.

A hub environment is an ordinary wheel named ``gymhub-env-<n>-<owner>-<name>``; serving
the Simple Repository API lets every installer resolve it without a gymhub plugin:

* **PEP 503** HTML pages (the default) and **PEP 691** JSON, chosen by ``Accept`` (or
  ``?format=``), with ``Vary: Accept`` so a cache never serves one to a client that
  asked for the other; non-normalised project names redirect to the normalised URL.
* **PEP 592** yanked files (pip and uv skip them unless pinned exactly), **PEP 700**
  ``versions``, ``size`` and ``upload-time`` (hence ``api-version`` 1.1), and
  **PEP 658/714** core metadata, so a resolver reads ``METADATA`` without downloading
  the wheel. The metadata is read from the stored wheel in memory (one zip member,
  never extracted) and cached by the wheel's sha256: the bytes are immutable, so the
  cache never needs invalidating.
* Files live at ``/files/<sha256>/<filename>``: the digest names the bytes and the name
  must be the version's own file name, so one URL can never serve bytes under another
  name. They are immutable and cached as such.

Unknown projects get a 404 whose message may suggest near names (read from a bounded,
indexed candidate query, :func:`gymhub.hub.search.suggestion_pool`, never a scan of every
package), but the index never redirects to one: an installer following a typo must
fail, not install a squatter.
Store calls block (database, disk), so they run in the thread pool, off the event loop.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import logging
import threading
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import BinaryIO, TypeVar
from urllib.parse import quote

import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from packaging.version import InvalidVersion, Version
from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse

from gymhub.errors import BlobCorrupted, InvalidName, PackageNotFound
from gymhub.hub.db import Owner, Package
from gymhub.hub.db import Version as VersionRow
from gymhub.hub.names import (
    distribution_name,
    normalize,
    not_found_message,
    parse_distribution_name,
)
from gymhub.hub.records import VersionInfo
from gymhub.hub.search import suggestion_pool
from gymhub.hub.store import HubStore

__all__ = ["API_VERSION", "SIMPLE_HTML", "SIMPLE_JSON", "index_router", "negotiate",
           "wheel_metadata"]

API_VERSION = "1.1"  # PEP 700's fields (versions, size, upload-time) need 1.1
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
SIMPLE_HTML = "application/vnd.pypi.simple.v1+html"
_ACCEPTED = {
    SIMPLE_JSON: SIMPLE_JSON, "application/vnd.pypi.simple.latest+json": SIMPLE_JSON,
    SIMPLE_HTML: SIMPLE_HTML, "application/vnd.pypi.simple.latest+html": SIMPLE_HTML,
    "text/html": "text/html", "*/*": "text/html", "text/*": "text/html",
    "json": SIMPLE_JSON, "html": "text/html",
}
_FILE_CACHE = "public, max-age=31536000, immutable"
_PAGE_CACHE = "public, max-age=60"  # a yank shows within a minute behind a shared cache
_CHUNK = 256 * 1024
_MAX_METADATA = 1 << 20  # the archive checker's cap on METADATA, again
_T = TypeVar("_T")
_log = logging.getLogger(__name__)


def negotiate(accept: str | None, fmt: str | None = None) -> str | None:
    """The content type to answer with, or ``None`` for 406 (PEP 691's algorithm).

    Args:
        accept: the ``Accept`` header; absent or empty means HTML, as for old clients.
        fmt: the ``?format=`` query value (a content type, or ``json``/``html``), which
            wins over the header so a browser can ask for JSON.
    """
    if fmt:
        return _ACCEPTED.get(fmt.strip().lower())
    if not accept or not accept.strip():
        return "text/html"
    ranked: list[tuple[float, int, str]] = []
    for i, part in enumerate(accept.split(",")):
        kind, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for p in params:
            key, _, value = p.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > 0 and kind.lower() in _ACCEPTED:
            ranked.append((-q, i, _ACCEPTED[kind.lower()]))
    return min(ranked)[2] if ranked else None


def wheel_metadata(data: bytes, filename: str) -> bytes | None:
    """The wheel's ``<dist>-<version>.dist-info/METADATA``, read in memory; ``None`` if absent.

    Reading one member with :mod:`zipfile` suffices here: every stored wheel passed the
    archive checker (:mod:`gymhub.hub.zipcheck`) on upload, which proved that every zip
    reader sees the same members.
    """
    parts = filename.removesuffix(".whl").split("-")
    if not filename.endswith(".whl") or len(parts) < 5:
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            member = zf.getinfo(f"{parts[0]}-{parts[1]}.dist-info/METADATA")
            return zf.read(member) if member.file_size <= _MAX_METADATA else None
    except (KeyError, zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError):
        return None


class _MetadataCache:
    """METADATA bytes by wheel sha256 (LRU): a listing must not re-read every wheel."""

    def __init__(self, capacity: int) -> None:
        self._items: OrderedDict[str, bytes | None] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, store: HubStore, info: VersionInfo) -> bytes | None:
        with self._lock:
            if info.sha256 in self._items:
                self._items.move_to_end(info.sha256)
                return self._items[info.sha256]
        try:
            found = wheel_metadata(store.read_file(info), info.filename)  # verified read
        except BlobCorrupted:  # not cached: a repaired blob (re-push) brings it back
            _log.error("blob of %s is damaged; its core metadata is not advertised",
                       info.filename)
            return None
        with self._lock:
            self._items[info.sha256] = found
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)
        return found


@dataclass(frozen=True)
class _File:
    filename: str
    sha256: str
    size: int
    requires_python: str
    yanked: str | bool  # False, True (no reason given) or the reason
    upload_time: str
    metadata_sha256: str | None


def _iso(t: datetime) -> str:
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _sort_key(v: str) -> tuple[int, Version | str]:
    try:
        return 0, Version(v)
    except InvalidVersion:
        return 1, v


def _projects(store: HubStore) -> list[str]:
    with store.db.read() as session:
        rows = session.execute(sa.select(Owner.name, Package.normalized_name).join(Package))
        names = []
        for owner, name in rows:
            try:
                names.append(distribution_name(owner, name))
            except InvalidName:  # a placeholder-era name the hub's rules refuse: unlisted
                continue
    return sorted(names)


def _near_projects(store: HubStore, project: str) -> list[str]:
    """Distribution names to suggest for an unknown ``project`` (a bounded query)."""
    try:
        owner, name = parse_distribution_name(project)
    except InvalidName:  # not a hub name at all (numpy): nothing of ours is near
        return []
    near = []
    for o, n in suggestion_pool(store.db, owner, name):
        try:
            near.append(distribution_name(o, n))
        except InvalidName:  # a placeholder-era name the hub's rules refuse: unlisted
            continue
    return near


def _project_files(store: HubStore, cache: _MetadataCache,
                   project: str) -> tuple[list[_File], list[str]]:
    """Files and versions of ``project`` (canonical); raises PackageNotFound/InvalidName."""
    owner, name = parse_distribution_name(project)
    versions = sorted(store.list_versions(owner, name), key=lambda v: _sort_key(v.version))
    files: list[_File] = []
    for v in versions:
        meta_sha = v.metadata.get("core_metadata_sha256")
        if not isinstance(meta_sha, str):  # published before the hash was recorded
            meta = cache.get(store, v)
            meta_sha = hashlib.sha256(meta).hexdigest() if meta is not None else None
        files.append(_File(
            v.filename, v.sha256, v.size, str(v.metadata.get("requires_python") or ""),
            (v.yank_reason or True) if v.yanked else False, _iso(v.uploaded_at), meta_sha))
    return files, [v.version for v in versions]


def _find_file(store: HubStore, sha256: str, filename: str) -> VersionInfo | None:
    """The published version whose file is exactly ``sha256`` named ``filename``."""
    with store.db.read() as session:
        row = session.execute(
            sa.select(Owner.name, Package.name, VersionRow).select_from(VersionRow)
            .join(Package, VersionRow.package_id == Package.id).join(Owner)
            .where(VersionRow.sha256 == sha256, VersionRow.filename == filename)
            .limit(1)).first()
        if row is None:
            return None
        owner, name, v = row
        return VersionInfo(owner, name, v.version, v.sha256, v.size, v.filename,
                           tuple(v.env_ids), dict(v.metadata_json), v.uploaded_at,
                           v.yanked_at, v.yank_reason)


# ---------------------------------------------------------------------------- rendering
def _html_page(title: str, body: list[str]) -> str:
    t = html.escape(title)
    return ("<!DOCTYPE html>\n<html>\n<head>\n"
            f'<meta name="pypi:repository-version" content="{API_VERSION}">\n'
            f"<title>{t}</title>\n</head>\n<body>\n<h1>{t}</h1>\n"
            + "".join(f"{line}<br>\n" for line in body) + "</body>\n</html>\n")


def _file_url(base: str, f: _File) -> str:
    return f"{base}files/{f.sha256}/{quote(f.filename)}"


def _project_html(project: str, files: list[_File], base: str) -> str:
    links = []
    for f in files:
        attrs = [f'href="{html.escape(_file_url(base, f))}#sha256={f.sha256}"']
        if f.requires_python:
            attrs.append(f'data-requires-python="{html.escape(f.requires_python)}"')
        if f.yanked is not False:
            reason = f.yanked if isinstance(f.yanked, str) else ""
            attrs.append(f'data-yanked="{html.escape(reason)}"')
        if f.metadata_sha256:  # PEP 714's name, and PEP 658's for older pip
            attrs.append(f'data-core-metadata="sha256={f.metadata_sha256}"')
            attrs.append(f'data-dist-info-metadata="sha256={f.metadata_sha256}"')
        links.append(f"<a {' '.join(attrs)}>{html.escape(f.filename)}</a>")
    return _html_page(f"Links for {project}", links)


def _project_json(project: str, files: list[_File], versions: list[str],
                  base: str) -> dict[str, object]:
    out = []
    for f in files:
        item: dict[str, object] = {
            "filename": f.filename, "url": _file_url(base, f), "hashes": {"sha256": f.sha256},
            "requires-python": f.requires_python or None, "yanked": f.yanked,
            "size": f.size, "upload-time": f.upload_time}
        if f.metadata_sha256:
            item["core-metadata"] = item["dist-info-metadata"] = {"sha256": f.metadata_sha256}
        out.append(item)
    return {"meta": {"api-version": API_VERSION}, "name": project, "versions": versions,
            "files": out}


def _reply(kind: str, data: Mapping[str, object], page: str, status: int = 200) -> Response:
    headers = {"Vary": "Accept", "Cache-Control": _PAGE_CACHE}
    if kind == SIMPLE_JSON:
        return Response(json.dumps(data, separators=(",", ":")), status, headers, SIMPLE_JSON)
    return Response(page, status, headers, kind)


def _not_found(kind: str | None, message: str) -> Response:
    headers = {"Vary": "Accept"}
    if kind == SIMPLE_JSON:
        return JSONResponse({"detail": message}, 404, headers)
    return HTMLResponse(_html_page("Not Found", [html.escape(message)]), 404, headers)


def _not_acceptable() -> Response:
    return JSONResponse({"detail": "acceptable: " + ", ".join([SIMPLE_JSON, SIMPLE_HTML,
                                                               "text/html"])}, 406,
                        {"Vary": "Accept"})


def _base(request: Request) -> str:
    """The index's root path as the client sees it (any mount prefix included)."""
    path = request.url.path
    return path[:path.rfind("/simple/") + 1] if "/simple/" in path else "/"


def _stream(f: BinaryIO) -> Iterator[bytes]:
    try:
        while chunk := f.read(_CHUNK):
            yield chunk
    finally:
        f.close()


async def _in_thread(fn: Callable[[], _T]) -> _T:
    return await run_in_threadpool(fn)


# ---------------------------------------------------------------------------- the router
def index_router(store: HubStore, *, metadata_cache: int = 16384) -> APIRouter:
    """The Simple Repository API over ``store``: ``/simple/`` and ``/files/``.

    Args:
        store: the hub's registry and blobs.
        metadata_cache: how many wheels' METADATA to keep in memory (a few KiB each);
            a project page with more versions than this re-reads wheels on each request.

    Returns:
        A router to include, unprefixed or under any prefix, in the hub's app.
    """
    router = APIRouter(tags=["index"])
    cache = _MetadataCache(metadata_cache)

    @router.get("/simple/", response_model=None)
    async def simple_root(request: Request) -> Response:
        kind = negotiate(request.headers.get("accept"), request.query_params.get("format"))
        if kind is None:
            return _not_acceptable()
        names = await _in_thread(lambda: _projects(store))
        data = {"meta": {"api-version": API_VERSION}, "projects": [{"name": n} for n in names]}
        page = _html_page("Simple index", [
            f'<a href="{html.escape(quote(n))}/">{html.escape(n)}</a>' for n in names])
        return _reply(kind, data, page)

    @router.get("/simple/{project}/", response_model=None)
    async def simple_project(project: str, request: Request) -> Response:
        kind = negotiate(request.headers.get("accept"), request.query_params.get("format"))
        canon = normalize(project)
        if canon != project:  # PEP 503: one URL per project
            query = f"?{request.url.query}" if request.url.query else ""
            return RedirectResponse(f"{_base(request)}simple/{quote(canon)}/{query}", 301,
                                    {"Vary": "Accept"})
        if kind is None:
            return _not_acceptable()
        try:
            files, versions = await _in_thread(lambda: _project_files(store, cache, canon))
        except (InvalidName, PackageNotFound):
            near = await _in_thread(lambda: _near_projects(store, canon))
            return _not_found(kind, not_found_message("project", project, near))
        base = _base(request)
        return _reply(kind, _project_json(canon, files, versions, base),
                      _project_html(canon, files, base))

    @router.get("/files/{sha256}/{filename}", response_model=None)
    async def files(sha256: str, filename: str, request: Request) -> Response:
        is_meta = filename.endswith(".whl.metadata")
        wheel = filename.removesuffix(".metadata") if is_meta else filename
        info = await _in_thread(lambda: _find_file(store, sha256, wheel))
        if info is None:
            return _not_found(None, f"no file {filename} with sha256 {sha256} on this hub")
        if is_meta:
            meta = await _in_thread(lambda: cache.get(store, info))
            if meta is None:
                return _not_found(None, f"{wheel} has no METADATA to serve")
            return Response(meta, 200, {"Cache-Control": _FILE_CACHE,
                                        "ETag": f'"{hashlib.sha256(meta).hexdigest()}"'},
                            "text/plain; charset=utf-8")
        etag = f'"{info.sha256}"'
        headers = {"Cache-Control": _FILE_CACHE, "ETag": etag,
                   "Content-Length": str(info.size)}
        if etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers={"Cache-Control": _FILE_CACHE,
                                                      "ETag": etag})
        handle = await _in_thread(lambda: store.blobs.open(info.sha256, info.size))
        return StreamingResponse(_stream(handle), 200, headers, "application/octet-stream")

    return router
