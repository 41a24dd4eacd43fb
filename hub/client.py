"""A client of the hub's HTTP API (what ``gymhub push``, ``yank``, ``search``, ``info`` use).

Errors come back as the classes the hub raised: the JSON ``error.code`` picks the class,
so ``except VersionConflict`` works the same against a store and against a hub. Uploads
are never retried: an upload whose answer was lost may have committed, and pushing the
same bytes again is a no-op anyway, so the caller decides.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import httpx

from gymhub import errors as E
from gymhub.errors import (
    ConfigError,
    GymhubError,
    InvalidName,
    LookalikeName,
    RequestTimeout,
    ServerError,
    ServerUnreachable,
)
from gymhub.hub.settings import HUB_URL_ENV, TOKEN_ENV

__all__ = ["HUB_URL_ENV", "TOKEN_ENV", "HubClient", "hub_error_from_code"]


def _hub_classes() -> dict[str, type[GymhubError]]:
    out: dict[str, type[GymhubError]] = {}
    todo: list[type[GymhubError]] = [E.HubError, E.ServerError]
    while todo:
        klass = todo.pop()
        out.setdefault(klass.code, klass)
        todo.extend(klass.__subclasses__())
    return out


_BY_CODE = _hub_classes()


def hub_error_from_code(status: int, code: str, message: str) -> GymhubError:
    """The exception a hub answered, rebuilt from its ``code`` (the message kept whole).

    An unknown code (a newer hub) becomes a :class:`ServerError` with that code and status.
    """
    klass = _BY_CODE.get(code)
    exc: GymhubError
    if klass is not None and issubclass(klass, InvalidName):
        exc = klass.__new__(klass)  # its constructor composes a message we already have
        Exception.__init__(exc, message)
        exc.kind, exc.value = "", ""
        if isinstance(exc, LookalikeName):
            exc.existing = ""
    elif (klass is not None and issubclass(klass, ServerError)) or klass is not None:
        exc = klass(message)
    else:
        exc = ServerError(message)
        exc.code = code
        exc.status = status
    return exc


class HubClient:
    """Talks to one hub.

    Args:
        url: the hub's base URL (``http://127.0.0.1:8700``).
        token: a hub token (``ghub_...``); reads need none.
        timeout: seconds for connecting and for each read (uploads get four times it).
        transport: an httpx transport (tests pass an ASGI one).
    """

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, transport=transport,
                                  timeout=httpx.Timeout(timeout, write=timeout * 4,
                                                        read=timeout * 4))

    @classmethod
    def from_env(cls, url: str | None = None, *, need_token: bool = True) -> HubClient:
        """A client on ``url`` or ``$GYMHUB_HUB_URL``, with ``$GYMHUB_HUB_TOKEN``.

        Raises:
            ConfigError: no hub URL, or no token when one is needed.
        """
        url = url or os.environ.get(HUB_URL_ENV, "")
        if not url:
            raise ConfigError(f"no hub to talk to: pass --hub URL or set {HUB_URL_ENV}")
        token = os.environ.get(TOKEN_ENV, "").strip() or None
        if need_token and token is None:
            raise ConfigError(f"no hub token: set {TOKEN_ENV} (the hub's operator mints one "
                              "with `gymhub hub token create --owner YOU`)")
        return cls(url, token)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> HubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, **kw: Any) -> tuple[int, dict[str, Any]]:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.TimeoutException as exc:
            raise RequestTimeout(f"the hub at {self.url} did not answer in time: {exc}") from exc
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"cannot reach the hub at {self.url}: {exc}") from exc
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.status_code >= 400:
            err = body.get("error") if isinstance(body, dict) else None
            if isinstance(err, dict) and isinstance(err.get("code"), str):
                raise hub_error_from_code(resp.status_code, err["code"],
                                          str(err.get("message", "")))
            raise hub_error_from_code(resp.status_code, "http_error",
                                      f"HTTP {resp.status_code} from {self.url}{path}")
        if not isinstance(body, dict):
            raise ServerError(f"the hub at {self.url} answered {path} with non-JSON")
        return resp.status_code, body

    def upload(self, wheel: str | os.PathLike[str] | bytes, filename: str | None = None
               ) -> dict[str, Any]:
        """Publish a wheel; the reply's ``created`` is false for an identical re-push.

        Raises:
            VersionConflict: the version exists with other bytes.
            InvalidArchive: the hub refused the wheel (subclass says why).
            TokenError: the token may not publish to the wheel's owner.
        """
        if isinstance(wheel, bytes):
            if filename is None:
                raise ConfigError("uploading bytes needs their file name")
            data = wheel
        else:
            data = Path(wheel).read_bytes()
            filename = filename or Path(wheel).name
        _, body = self._call("POST", "/api/v1/upload", content=data,
                             headers={"X-Filename": filename,
                                      "Content-Type": "application/octet-stream"})
        return body

    def yank(self, owner: str, name: str, version: str, reason: str) -> dict[str, Any]:
        """Hide a version from resolution (exact pins still install it)."""
        return self._call("POST", "/api/v1/yank", json={
            "owner": owner, "name": name, "version": version, "reason": reason})[1]

    def package(self, owner: str, name: str) -> dict[str, Any]:
        """The package page: description and versions, newest first."""
        return self._call("GET", f"/api/v1/packages/{owner}/{name}")[1]

    def search(self, text: str, limit: int = 50) -> list[dict[str, Any]]:
        """Packages matching ``text`` in owner, name or description."""
        results = self._call("GET", "/api/v1/search", params={"q": text, "limit": limit})[1]
        return list(results.get("results", []))

    def whoami(self) -> dict[str, Any]:
        """The token's owner and scopes."""
        return self._call("GET", "/api/v1/whoami")[1]

    def hub_key(self) -> dict[str, Any] | None:
        """The hub's attestation signing key, or ``None`` when the hub signs nothing."""
        try:
            return self._call("GET", "/.well-known/gymhub-hub-key")[1]
        except E.GymhubError as exc:
            if getattr(exc, "status", None) == 404 or exc.code in ("not_found", "http_error"):
                return None
            raise

    def attestation(self, owner: str, name: str, version: str) -> dict[str, Any] | None:
        """The signed check of one version, or ``None`` when it was never checked."""
        try:
            return self._call("GET", f"/api/v1/packages/{owner}/{name}/{version}/attestation")[1]
        except E.GymhubError as exc:
            if getattr(exc, "status", None) == 404 or exc.code in ("not_found", "http_error"):
                return None
            raise

    def download(self, sha256: str, filename: str, dest: Path) -> str:
        """Stream ``/files/{sha256}/{filename}`` into ``dest``; returns the bytes' sha256.

        The digest is computed here, from what arrived, so the caller compares it with the
        one it expects instead of trusting the URL.
        """
        digest = hashlib.sha256()
        try:
            with self._http.stream("GET", f"/files/{sha256}/{filename}") as resp:
                if resp.status_code != 200:
                    raise ServerError(f"the hub answered HTTP {resp.status_code} for "
                                      f"{self.url}/files/{sha256}/{filename}")
                with open(dest, "wb") as f:
                    for chunk in resp.iter_bytes():
                        digest.update(chunk)
                        f.write(chunk)
        except httpx.TimeoutException as exc:
            raise RequestTimeout(f"the hub at {self.url} did not answer in time: {exc}") from exc
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"cannot reach the hub at {self.url}: {exc}") from exc
        return digest.hexdigest()


def parse_ref(ref: str, *, version: bool) -> tuple[str, str, str | None]:
    """``OWNER/NAME[@VERSION]`` as typed on the command line.

    Raises:
        ConfigError: not that shape, or a version missing where one is needed.
    """
    base, at, ver = ref.partition("@")
    owner, slash, name = base.partition("/")
    if not slash or not owner or not name or "/" in name or (at and not ver):
        raise ConfigError(f"{ref!r}: expected OWNER/NAME{'@VERSION' if version else ''}")
    if version and not ver:
        raise ConfigError(f"{ref!r}: name the version, as OWNER/NAME@VERSION")
    return owner, name, ver or None


def format_package(page: dict[str, Any]) -> str:
    """A package page for a terminal: the header, then one line per version."""
    lines = [f"{page['id']}: {page.get('description') or '(no description)'}",
             f"latest: {page.get('latest') or 'none (every version is yanked)'}"]
    for v in page.get("versions", []):
        state = f"YANKED: {v['yank_reason']}" if v.get("yanked") else "ok"
        check = (v.get("check") or {}).get("status", "unchecked")
        lines.append(f"  {v['version']:<12} {v['uploaded_at'][:19]}Z  sha256 {v['sha256']}  "
                     f"{v['size']} bytes  check {check}  {state}")
        if v.get("env_ids"):
            lines.append(f"               envs: {', '.join(v['env_ids'])}")
    return "\n".join(lines)
