"""How a failure becomes an HTTP answer: status, ``{"error": {...}}`` body, headers.

Shared by the front door's hot routes, the batch endpoint (which answers each
operation as its own request would be answered) and the FastAPI handlers, so the three
never disagree on a status, a code or a ``Retry-After``.
"""

from __future__ import annotations

import math
from typing import Any

from gymhub.errors import GymhubError

from .errors import SeqConflict, status_of
from .metrics import Metrics
from .wire import dumps

__all__ = ["Headers", "error_reply", "readable"]

Headers = list[tuple[bytes, bytes]]


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
