"""The hub's HTTP API: upload, yank, package pages, search, who-am-I.

The app is a thin shell over :class:`~gymhub.hub.store.HubStore`: it authenticates, caps
and validates, then hands over. Every store, token and archive call blocks (SQL, fsync,
zip parsing), so each runs in a worker thread; the event loop only moves bytes.

An upload is refused as early as the request allows: a declared ``Content-Length`` over
the cap before any body byte is read (413), then a missing or unauthorised token for the
owner the file name claims, still before the body; the body is then read with the cap
enforced again (a chunked or lying client), validated completely in memory (under archive
limits whose size cap is the same number), and only a wheel that passed is published. A
failure at any step stores nothing, not even an orphan blob.

**Bounded cost for anyone.** Every route's body is capped and every request rate-limited
by :class:`~gymhub.hub.limits.RequestLimits`, in front of the whole app; path parameters
longer than the database holds (an owner over 64 characters, a name over 100, a version
over 64) are a 422 on every route before any query; search is paged in SQL and an empty
query is a 422.

**Headers.** Every answer carries a ``Content-Security-Policy`` that allows no script at
all, styles only from the pages' own stylesheet (by hash), images only from the hub,
forms only to the hub, and no framing, plus ``X-Content-Type-Options: nosniff``. Install
commands on the pages use the configured ``public_url``, never the request's ``Host``
header (which any client sets, and a shared cache would then serve to others).

Errors leave as ``{"error": {"code", "message"}}``, like the environment server's, with
the status :func:`status_of` assigns (see its table).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from gymhub.errors import (
    ArchiveTooLarge,
    ConfigError,
    GymhubError,
    InternalServerError,
    InvalidArchive,
    InvalidName,
    InvalidRequest,
    LookalikeName,
    PayloadTooLarge,
    TokenInvalid,
    TokenScopeError,
    WheelFilenameError,
)
from gymhub.hub.archive import ArchiveLimits, validate_wheel
from gymhub.hub.check_queue import queued_versions
from gymhub.hub.db import SCOPES
from gymhub.hub.limits import Message, RateLimit, Receive, RequestLimits, Scope, Send
from gymhub.hub.names import parse_distribution_name
from gymhub.hub.pages import STYLE_HASH
from gymhub.hub.records import CheckInfo, VersionInfo
from gymhub.hub.store import HubStore
from gymhub.hub.tokens import TokenInfo, authenticate

if TYPE_CHECKING:
    from gymhub.hub.check_service import CheckWorker
    from gymhub.hub.signing import HubKey

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DEFAULT_MAX_UPLOAD_BYTES", "DEFAULT_PUBLIC_URL",
           "SECURITY_HEADERS", "create_hub_app", "status_of"]

log = logging.getLogger("gymhub.hub")

DEFAULT_MAX_UPLOAD_BYTES = 64 << 20
#: The body cap of every route but the upload (a yank's JSON is a few hundred bytes).
DEFAULT_MAX_BODY_BYTES = 64 << 10
#: Where install commands point when the app is not told its public address.
DEFAULT_PUBLIC_URL = "http://127.0.0.1:8700"
_UPLOAD_PATH = "/api/v1/upload"
#: The longest path parameter of each name any route takes (the columns' sizes).
_PARAM_CAPS = {"owner": 64, "name": 100, "version": 64, "project": 200, "filename": 300,
               "sha256": 64}


#: What every answer carries (see the module's **Headers**); the style hash is the pages'
#: one inline stylesheet's.
SECURITY_HEADERS = {
    "Content-Security-Policy": f"default-src 'none'; style-src '{STYLE_HASH}'; "
                               "img-src 'self' data:; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff"}
_RAW_HEADERS = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]


class _SecurityHeaders:
    """ASGI middleware adding :data:`SECURITY_HEADERS` to every response it passes."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *(h for h in _RAW_HEADERS if h[0] not in names)]
            await send(message)

        await self.app(scope, receive, send_with_headers if scope["type"] == "http" else send)


def _public_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or any(c.isspace() for c in url) \
            or "?" in url or "#" in url:
        raise ConfigError(f"public_url {url!r}: give the hub's http(s):// address, no query")
    return url


async def _capped_params(request: Request) -> None:
    """Every route: a path parameter longer than the database holds is a 422, before SQL."""
    for key, value in request.path_params.items():
        cap = _PARAM_CAPS.get(key)
        if cap is not None and isinstance(value, str) and len(value) > cap:
            raise InvalidRequest(f"{key}: at most {cap} characters, not {len(value)}")


def status_of(exc: GymhubError) -> int:
    """The HTTP status of an error.

    Store, token and server errors carry their own ``status`` (404 not found, 409
    version conflict, 401 bad token, 403 wrong owner or scope, 413 too large). The rest:
    a look-alike name 409 (it conflicts with an existing package), another refused name
    400, a refused archive 422 (namespace violations included: the bytes are the
    problem, not the caller), a configuration mistake 422, anything else 500.
    """
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status >= 400:
        return status
    if isinstance(exc, LookalikeName):
        return 409
    if isinstance(exc, InvalidName):
        return 400
    if isinstance(exc, (InvalidArchive, ConfigError)):
        return 422
    return 500


def _reply(exc: GymhubError) -> JSONResponse:
    return JSONResponse({"error": {"code": exc.code, "message": str(exc)}},
                        status_code=status_of(exc))


class YankRequest(BaseModel):
    """``POST /api/v1/yank``: the version to hide from resolution, and why."""

    owner: str = Field(max_length=_PARAM_CAPS["owner"])
    name: str = Field(max_length=_PARAM_CAPS["name"])
    version: str = Field(max_length=_PARAM_CAPS["version"])
    reason: str = Field(max_length=2000)


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def version_json(v: VersionInfo, check: CheckInfo | None = None, *,
                 queued: bool = False) -> dict[str, Any]:
    """A version as the API shows it (the upload reply, the package page's rows).

    ``check`` is the newest result; with none, ``queued`` says the version is waiting in
    the hub's check queue (``{"status": "queued"}``) rather than never checked (``None``).
    """
    waiting = {"status": "queued"} if queued else None
    return {
        "id": f"{v.owner}/{v.name}", "owner": v.owner, "name": v.name, "version": v.version,
        "sha256": v.sha256, "size": v.size, "filename": v.filename,
        "uploaded_at": _iso(v.uploaded_at), "yanked": v.yanked,
        "yank_reason": v.yank_reason, "env_ids": list(v.env_ids),
        "check": waiting if check is None else {"status": check.status, "sha256": check.sha256,
                                             "checked_at": _iso(check.checked_at),
                                             "details": dict(check.details)},
    }


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise TokenInvalid("this needs a hub token: send 'Authorization: Bearer <token>'")
    return token.strip()


def _upload_owner(filename: str | None) -> tuple[str, str]:
    """``(filename, owner)`` from the upload's declared file name, before any body byte."""
    parts = (filename or "").split("-")
    if len(filename or "") > 255 or (len(parts) > 1 and len(parts[1]) > 64):
        raise InvalidRequest("the wheel's file name has at most 255 characters and its "
                             "version at most 64")
    if not filename or "/" in filename or "\\" in filename or not filename.endswith(".whl"):
        raise WheelFilenameError("name the wheel with an X-Filename header or ?filename= "
                                 f"(a '.whl' file name, no directories), not {filename!r}")
    owner, _ = parse_distribution_name(filename.split("-", 1)[0])
    return filename, owner


def create_hub_app(store: HubStore, *, max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
                   extra_routers: Sequence[APIRouter] = (), key: HubKey | None = None,
                   checker: CheckWorker | None = None, public_url: str = DEFAULT_PUBLIC_URL,
                   rate_limit: RateLimit | None = None,
                   max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> FastAPI:
    """The hub's FastAPI app over ``store``.

    Args:
        store: the registry (its database migrated, its blob store ready).
        max_upload_bytes: the largest wheel accepted; larger uploads get 413, refused on
            their ``Content-Length`` before the body is read when they declare one. The
            archive checker's size cap (``ArchiveLimits.max_archive_bytes``) is set to
            the same number, so a size over it is a 413 wherever it is noticed.
        extra_routers: more routes on the same app (the ``/simple/`` index, downloads).
        key: the hub's signing key; adds ``/.well-known/gymhub-hub-key`` and the signed
            ``.../{version}/attestation`` routes (:mod:`gymhub.hub.check_service`).
        checker: checks each newly published version in the background; the app closes
            it on shutdown (it is also ``app.state.checker``).
        public_url: the address users reach the hub at, used in the install commands the
            pages show (``app.state.public_url``); never taken from a request.
        rate_limit: requests per client address and per token (a 429 with
            ``Retry-After`` past it); ``None``, the default, switches limiting off.
        max_body_bytes: the body cap of every route other than the upload.

    Returns:
        The app; serve it with uvicorn (``gymhub hub serve``).
    """
    app = FastAPI(title="gymhub hub", version="v1", docs_url=None, redoc_url=None,
                  dependencies=[Depends(_capped_params)])
    app.state.public_url = _public_url(public_url)
    db = store.db
    limits = dataclasses.replace(ArchiveLimits(), max_archive_bytes=max_upload_bytes)
    app.add_middleware(
        RequestLimits, rate_limit=rate_limit, exempt=frozenset({"/healthz"}),
        body_cap=lambda method, path: max_upload_bytes if path == _UPLOAD_PATH
        else max_body_bytes)
    app.add_middleware(_SecurityHeaders)  # outermost: the limits' refusals carry them too

    async def on_gymhub(_r: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, GymhubError)
        return _reply(exc)

    async def on_invalid(_r: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        parts = [f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', 'invalid')}"
                 for e in list(exc.errors())[:10]]
        return _reply(InvalidRequest("; ".join(parts) or "invalid request"))

    async def on_http(_r: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(
            exc.status_code, "http_error")
        return JSONResponse({"error": {"code": code, "message": str(exc.detail)}},
                            status_code=exc.status_code)

    async def on_crash(_r: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error in the hub", exc_info=exc)
        reply = _reply(InternalServerError(f"internal error: {type(exc).__name__}"))
        reply.headers.update(SECURITY_HEADERS)  # answered outside the middleware
        return reply

    app.add_exception_handler(GymhubError, on_gymhub)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_crash)

    async def auth(request: Request, scope: str, owner: str | None) -> TokenInfo:
        return await run_in_threadpool(authenticate, db, _bearer(request), scope, owner=owner)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post(_UPLOAD_PATH)
    async def upload(request: Request, filename: str | None = Query(None)) -> JSONResponse:
        # RequestLimits refused a declared Content-Length over the cap already.
        name, owner = _upload_owner(request.headers.get("x-filename") or filename)
        token = await auth(request, "publish", owner)
        data = await _read_capped(request, max_upload_bytes)
        try:
            info = await run_in_threadpool(validate_wheel, data, owner=owner, filename=name,
                                           limits=limits)
        except ArchiveTooLarge as exc:
            if len(data) > limits.max_archive_bytes:  # the same cap, whoever noticed it
                raise PayloadTooLarge(str(exc)) from exc
            raise
        result = await run_in_threadpool(lambda: store.publish(
            owner, info.describe(), data, uploaded_by=token.id, readme=info.readme))
        if checker is not None and result.created:
            v = result.version
            checker.submit(v.owner, v.name, v.version)
        body = {**version_json(result.version), "created": result.created}
        return JSONResponse(body, status_code=201 if result.created else 200)

    @app.post("/api/v1/yank")
    async def yank(request: Request, body: YankRequest) -> dict[str, Any]:
        await auth(request, "yank", body.owner)
        v = await run_in_threadpool(store.yank, body.owner, body.name, body.version,
                                    body.reason)
        return version_json(v)

    @app.get("/api/v1/packages/{owner}/{name}")
    async def package(owner: str, name: str) -> dict[str, Any]:
        def load() -> dict[str, Any]:
            pkg = store.get_package(owner, name)
            versions = store.list_versions(owner, name)
            checks = store.latest_checks(owner, name)
            waiting = queued_versions(store.db, owner, name)
            rows = [version_json(v, checks.get(v.version), queued=v.version in waiting)
                    for v in versions]
            return {"id": f"{pkg.owner}/{pkg.name}", "owner": pkg.owner, "name": pkg.name,
                    "description": pkg.description, "created_at": _iso(pkg.created_at),
                    "latest": pkg.latest, "versions": rows}

        return await run_in_threadpool(load)

    @app.get("/api/v1/search")
    async def search(q: str = Query(..., min_length=1, max_length=200),
                     limit: int = Query(50, ge=1, le=200),
                     page: int = Query(1, ge=1, le=1000)) -> dict[str, Any]:
        if not q.strip():
            raise InvalidRequest("q: search for a word; an empty query would list everything")
        found = await run_in_threadpool(store.search, q, limit=limit + 1,
                                        offset=(page - 1) * limit)
        return {"query": q, "page": page, "limit": limit,
                "next_page": page + 1 if len(found) > limit else None, "results": [
                    {"id": f"{p.owner}/{p.name}", "owner": p.owner, "name": p.name,
                     "description": p.description, "latest": p.latest}
                    for p in found[:limit]]}

    @app.get("/api/v1/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        info = await _any_scope(request, auth)
        return {"owner": info.owner, "token": info.prefix, "scopes": sorted(info.scopes),
                "expires_at": _iso(info.expires_at)}

    if key is not None:
        from gymhub.hub.check_service import signing_router

        app.include_router(signing_router(store, key))
    app.state.checker = checker
    if checker is not None:  # jobs queued before a restart start without a new upload
        app.router.on_startup.append(checker.start)
        app.router.on_shutdown.append(checker.close)
    for router in extra_routers:
        app.include_router(router)
    return app


async def _any_scope(request: Request, auth: Any) -> TokenInfo:
    """The token's record whatever its scopes (who-am-I needs none in particular)."""
    for scope in SCOPES:
        try:
            info: TokenInfo = await auth(request, scope, None)
            return info
        except TokenScopeError:
            continue
    raise TokenScopeError("the token has no scope")  # unreachable: scopes are non-empty


async def _read_capped(request: Request, limit: int) -> bytes:
    """The body, refusing it as soon as it outgrows ``limit`` (whatever it declared)."""
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise PayloadTooLarge(f"the upload is over {limit} bytes, the most this hub takes")
        chunks.append(chunk)
    return b"".join(chunks)
