"""How a failure becomes an HTTP answer: status, ``{"error": {...}}`` body, headers.

The exceptions themselves live in :mod:`gymhub.errors`, below both sides of the wire;
which HTTP status carries which code is decided here, on the server only. Every
failure goes through :func:`error_reply` (the FastAPI handlers, the request guard, and
each operation of a batch, answered as its own request would be), so they never
disagree on a status, a code or a ``Retry-After``.
"""

from __future__ import annotations

import math
from typing import Any

from gymhub.errors import (
    AtCapacity,
    ConfigError,
    DeadlineExceeded,
    EnvCrashed,
    EnvNotFound,
    EpisodeFinished,
    EpisodeLost,
    EpisodeNotFound,
    EpisodeNotStarted,
    GymhubError,
    InternalServerError,
    InvalidRequest,
    PayloadTooLarge,
    ReferenceDisabled,
    SeqConflict,
    SeqReused,
    ServerDraining,
    ServerError,
    TaskNotFound,
    Unauthorized,
)
from gymhub.json_codec import dumps

from .metrics import Metrics

__all__ = ["STATUS", "Headers", "error_reply", "internal_error", "readable", "status_of"]

Headers = list[tuple[bytes, bytes]]

#: HTTP status for codes whose classes are not :class:`ServerError` (no ``status``).
_CORE_STATUS: dict[str, int] = {
    EnvNotFound.code: 404,
    TaskNotFound.code: 404,
    EpisodeFinished.code: 409,
    EpisodeNotStarted.code: 409,
    ConfigError.code: 422,
    "not_found": 404,
    "method_not_allowed": 405,
}

_ANSWERED: tuple[type[ServerError], ...] = (
    EpisodeNotFound, EpisodeLost, SeqConflict, SeqReused, AtCapacity, DeadlineExceeded,
    Unauthorized, PayloadTooLarge, InvalidRequest, ReferenceDisabled, ServerDraining,
    EnvCrashed, InternalServerError,
)

#: Every stable code the server may answer, with its HTTP status.
STATUS: dict[str, int] = {**{c.code: c.status for c in _ANSWERED}, **_CORE_STATUS}


def status_of(exc: GymhubError) -> int:
    """The HTTP status for an exception (422 for configuration mistakes, 500 if unknown)."""
    if isinstance(exc, ServerError):
        return exc.status
    for klass in type(exc).__mro__:
        code = getattr(klass, "code", None)
        if isinstance(code, str) and code in _CORE_STATUS:
            return _CORE_STATUS[code]
    return 422 if isinstance(exc, ConfigError) else 500


def internal_error(exc: BaseException) -> InternalServerError:
    """The answer to an exception no handler anticipated (a bug).

    Every request path answers such a crash with this one class, so the code and
    status cannot drift apart. Only the exception's type is named: its message may
    hold data the client must not see.
    """
    return InternalServerError(f"internal error: {type(exc).__name__}")


def error_reply(metrics: Metrics, exc: GymhubError) -> tuple[int, bytes, Headers]:
    """Status, ``{"error": {...}}`` body and headers for an error; counts it once."""
    status = status_of(exc)
    metrics.errors.labels(exc.code).inc()
    detail: dict[str, Any] = {"code": exc.code, "message": str(exc)}
    if isinstance(exc, SeqConflict) and exc.expected is not None:
        detail["expected_seq"] = exc.expected
    headers: Headers = []
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        headers.append((b"retry-after", str(max(1, math.ceil(retry_after))).encode()))
    return status, dumps({"error": detail}), headers


def readable(errors: list[Any], prefix: str = "") -> str:
    """One line per problem: ``body.seq: Input should be greater than or equal to 1``."""
    parts = []
    for err in errors[:10]:
        loc = (prefix, *err.get("loc", ())) if prefix else tuple(err.get("loc", ()))
        where = ".".join(str(p) for p in loc)
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"
