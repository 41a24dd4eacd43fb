"""The hub's HTTP API: upload, yank, package pages, search, who-am-I.

The app is a thin shell over :class:`~gymhub.hub.store.HubStore`: it authenticates, caps
and validates, then hands over. Every store, token and archive call blocks (SQL, fsync,
zip parsing), so each runs in a worker thread; the event loop only moves bytes.

An upload is refused as early as the request allows: a declared ``Content-Length`` over
the cap before any body byte is read (413), then a missing or unauthorised token for the
owner the file name claims, still before the body; the body is then read with the cap
enforced again (a chunked or lying client), validated completely in memory, and only a
wheel that passed is published. A failure at any step stores nothing visible.

Errors leave as ``{"error": {"code", "message"}}``, like the environment server's, with
the status :func:`status_of` assigns (see its table).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from gymhub.errors import (
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
from gymhub.hub.archive import validate_wheel
from gymhub.hub.db import SCOPES
from gymhub.hub.names import parse_distribution_name
from gymhub.hub.records import CheckInfo, VersionInfo
from gymhub.hub.store import HubStore
from gymhub.hub.tokens import TokenInfo, authenticate

if TYPE_CHECKING:
    from gymhub.hub.check_service import CheckWorker
    from gymhub.hub.signing import HubKey

__all__ = ["DEFAULT_MAX_UPLOAD_BYTES", "create_hub_app", "status_of"]

log = logging.getLogger("gymhub.hub")

DEFAULT_MAX_UPLOAD_BYTES = 64 << 20


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

    owner: str = Field(max_length=100)
    name: str = Field(max_length=200)
    version: str = Field(max_length=100)
    reason: str = Field(max_length=2000)


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def version_json(v: VersionInfo, check: CheckInfo | None = None) -> dict[str, Any]:
    """A version as the API shows it (the upload reply, the package page's rows)."""
    return {
        "id": f"{v.owner}/{v.name}", "owner": v.owner, "name": v.name, "version": v.version,
        "sha256": v.sha256, "size": v.size, "filename": v.filename,
        "uploaded_at": _iso(v.uploaded_at), "yanked": v.yanked,
        "yank_reason": v.yank_reason, "env_ids": list(v.env_ids),
        "check": None if check is None else {"status": check.status, "sha256": check.sha256,
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
    if not filename or "/" in filename or "\\" in filename or not filename.endswith(".whl"):
        raise WheelFilenameError("name the wheel with an X-Filename header or ?filename= "
                                 f"(a '.whl' file name, no directories), not {filename!r}")
    owner, _ = parse_distribution_name(filename.split("-", 1)[0])
    return filename, owner


def create_hub_app(store: HubStore, *, max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
                   extra_routers: Sequence[APIRouter] = (), key: HubKey | None = None,
                   checker: CheckWorker | None = None) -> FastAPI:
    """The hub's FastAPI app over ``store``.

    Args:
        store: the registry (its database migrated, its blob store ready).
        max_upload_bytes: the largest wheel accepted; larger uploads get 413, refused on
            their ``Content-Length`` before the body is read when they declare one.
        extra_routers: more routes on the same app (the ``/simple/`` index, downloads).
        key: the hub's signing key; adds ``/.well-known/gymhub-hub-key`` and the signed
            ``.../{version}/attestation`` routes (:mod:`gymhub.hub.check_service`).
        checker: checks each newly published version in the background; the app closes
            it on shutdown (it is also ``app.state.checker``).

    Returns:
        The app; serve it with uvicorn (``gymhub hub serve``).
    """
    app = FastAPI(title="gymhub hub", version="v1", docs_url=None, redoc_url=None)
    db = store.db

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
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse({"error": {"code": code, "message": str(exc.detail)}},
                            status_code=exc.status_code)

    async def on_crash(_r: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error in the hub", exc_info=exc)
        return _reply(InternalServerError(f"internal error: {type(exc).__name__}"))

    app.add_exception_handler(GymhubError, on_gymhub)
    app.add_exception_handler(RequestValidationError, on_invalid)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_crash)

    async def auth(request: Request, scope: str, owner: str | None) -> TokenInfo:
        return await run_in_threadpool(authenticate, db, _bearer(request), scope, owner=owner)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/api/v1/upload")
    async def upload(request: Request, filename: str | None = Query(None)) -> JSONResponse:
        declared = request.headers.get("content-length")
        if declared is not None and not declared.isdigit():
            raise InvalidRequest(f"Content-Length {declared!r} is not a byte count")
        if declared is not None and int(declared) > max_upload_bytes:
            raise PayloadTooLarge(f"the upload declares {declared} bytes; this hub takes "
                                  f"wheels of at most {max_upload_bytes} bytes")
        name, owner = _upload_owner(request.headers.get("x-filename") or filename)
        token = await auth(request, "publish", owner)
        data = await _read_capped(request, max_upload_bytes)
        info = await run_in_threadpool(validate_wheel, data, owner=owner, filename=name)
        result = await run_in_threadpool(lambda: store.publish(
            owner, info.describe(), data, uploaded_by=token.id))
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
            rows = [version_json(v, checks.get(v.version)) for v in versions]
            return {"id": f"{pkg.owner}/{pkg.name}", "owner": pkg.owner, "name": pkg.name,
                    "description": pkg.description, "created_at": _iso(pkg.created_at),
                    "latest": pkg.latest, "versions": rows}

        return await run_in_threadpool(load)

    @app.get("/api/v1/search")
    async def search(q: str = Query("", max_length=200),
                     limit: int = Query(50, ge=1, le=200)) -> dict[str, Any]:
        found = await run_in_threadpool(store.search, q, limit=limit)
        return {"query": q, "results": [
            {"id": f"{p.owner}/{p.name}", "owner": p.owner, "name": p.name,
             "description": p.description, "latest": p.latest} for p in found]}

    @app.get("/api/v1/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        info = await _any_scope(request, auth)
        return {"owner": info.owner, "token": info.prefix, "scopes": sorted(info.scopes),
                "expires_at": _iso(info.expires_at)}

    if key is not None:
        from gymhub.hub.check_service import signing_router

        app.include_router(signing_router(store, key))
    app.state.checker = checker
    if checker is not None:
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
