"""JSON in and out of the wire, with orjson when it is installed.

It sits in :mod:`gymhub` itself, below both sides of the wire, and imports nothing
heavy, so the server and the (light) client encode and decode the same way.
orjson is optional: for the small documents of every step it is several times faster
than the standard library, which matters on both sides of a trivial step. Whatever
orjson refuses (a lone surrogate an agent smuggled into a message, a non-string
key) falls back to :mod:`json` with ``ensure_ascii``, which escapes it instead of
failing, so the choice of encoder never changes what can be sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["dumps", "dumps_lenient", "loads"]

_fast_dumps: Callable[..., bytes] | None
_fast_loads: Callable[[bytes | str], Any]
try:
    import orjson

    _fast_dumps = orjson.dumps
    _fast_loads = orjson.loads
except ImportError:  # pragma: no cover - exercised where orjson is absent
    _fast_dumps = None
    _fast_loads = json.loads


def loads(data: bytes | str) -> Any:
    r"""Parse JSON; what orjson refuses but JSON allows is parsed by :mod:`json`.

    The lenient writers below escape a lone surrogate (``"\udcff"``) rather than fail,
    and orjson refuses to read one back; :func:`json.loads` accepts it, so an agent's
    garbage echoed in an observation still arrives.
    """
    try:
        return _fast_loads(data)
    except ValueError:  # orjson.JSONDecodeError is a ValueError
        return json.loads(data)


def dumps(value: Any) -> bytes:
    """Serialise strictly: what JSON cannot hold raises (the server's replies).

    Non-finite floats are refused by the standard encoder and written as ``null`` by
    orjson; :func:`gymhub.server.wire_models.jsonable` turns them into strings before either
    sees them.
    """
    if _fast_dumps is not None:
        try:
            return _fast_dumps(value)
        except TypeError:  # orjson.JSONEncodeError is a TypeError
            pass
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode()


def _unserializable(obj: Any) -> dict[str, str]:
    return {"__unserializable__": type(obj).__name__}


def dumps_lenient(value: Any) -> bytes:
    """Serialise anything (the client's requests).

    An object JSON cannot hold becomes ``{"__unserializable__": "<type>"}``, so a bad
    action reaches the environment and is answered as malformed, as it would be locally.
    """
    if _fast_dumps is not None:
        try:
            return _fast_dumps(value, default=_unserializable)
        except TypeError:
            pass
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"),
                      default=_unserializable).encode()
