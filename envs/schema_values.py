"""Values drawn from a tool's JSON schema, for the reference policies.

The ``random`` policy must make *valid* calls: a call the validator refuses measures
the validator, not whether an environment's score resists an agent that acts without
understanding. The ``noop`` and ``refuse`` policies need the least a tool accepts (an
empty string, zero, the first enum value). Both read the subset of JSON Schema that
tool specs use in practice: ``type`` (one or a list), ``enum``, ``const``, ``anyOf`` /
``oneOf``, ``nullable``, ``items``, ``properties`` / ``required``, numeric bounds,
string and array lengths, and the ``date``, ``date-time`` and ``email`` formats.
``pattern`` is not honoured (generating matches of arbitrary regexes is its own
project); a schema with one gets plain strings.
"""

from __future__ import annotations

import math
import random
import string
from collections.abc import Mapping
from typing import Any

__all__ = ["empty_arguments", "empty_value", "random_arguments", "random_text", "random_value"]

#: Deeper than this, nested arrays and objects come back empty (a recursive schema ends).
MAX_DEPTH = 5
_ALPHABET = string.ascii_letters + string.digits + " _-.,"
_WORDS = ("alpha", "blue", "count", "data", "echo", "find", "green", "hello", "item", "join",
          "list", "name", "order", "price", "query", "red", "select", "table", "user", "value")


def random_text(rng: random.Random, words: int | None = None) -> str:
    """A few random words: the action of a random policy in an environment without tools."""
    n = rng.randint(1, 8) if words is None else words
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def random_arguments(parameters: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    """Arguments for a tool whose ``parameters`` schema is an object schema.

    Every required property is present; each optional one with probability one half.
    """
    value = random_value({**parameters, "type": "object"}, rng)
    return value if isinstance(value, dict) else {}


def empty_arguments(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The least arguments a tool accepts: its required properties, each at its empty value."""
    value = empty_value({**parameters, "type": "object"})
    return value if isinstance(value, dict) else {}


def random_value(schema: Any, rng: random.Random, depth: int = 0) -> Any:
    """A random value that ``schema`` accepts (see the module docstring for the subset)."""
    if not isinstance(schema, Mapping):
        return random_text(rng, 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(list(schema["enum"]))
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(alternatives, list) and alternatives:
        return random_value(rng.choice(alternatives), rng, depth)
    kind = _pick_type(schema, rng)
    if kind == "null" or (schema.get("nullable") and rng.random() < 0.1):
        return None
    if depth >= MAX_DEPTH and kind in ("array", "object"):
        return empty_value(schema)
    return _RANDOM.get(kind, _random_string)(schema, rng, depth)


def empty_value(schema: Any) -> Any:
    """The least value ``schema`` accepts: ``""``, ``0``, ``False``, ``[]``, the first enum value.

    Lower bounds are respected (``minimum``, ``minLength``, ``minItems``), so the value
    stays valid; an object gets its required properties only.
    """
    if not isinstance(schema, Mapping):
        return ""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return next(iter(schema["enum"]))
    alternatives = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(alternatives, list) and alternatives:
        return empty_value(alternatives[0])
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "null":
        return None
    if kind in ("integer", "number"):
        lo, hi = _bounds(schema, integer=kind == "integer", default=(0, 0))
        value = min(max(0, lo), hi)
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    if kind == "array":
        return [empty_value(schema.get("items")) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: empty_value(props.get(k)) for k in schema.get("required") or ()}
    return "a" * int(schema.get("minLength", 0))


def _pick_type(schema: Mapping[str, Any], rng: random.Random) -> str:
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        return str(rng.choice(kind))
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return "string"


def _bounds(
    schema: Mapping[str, Any], *, integer: bool, default: tuple[float, float]
) -> tuple[float, float]:
    """``[lo, hi]`` from ``minimum``/``maximum`` and their exclusive forms."""
    step = 1 if integer else 1e-6
    lo: float | None = _number(schema.get("minimum"))
    hi: float | None = _number(schema.get("maximum"))
    if (x := _number(schema.get("exclusiveMinimum"))) is not None:
        lo = x + step
    if (x := _number(schema.get("exclusiveMaximum"))) is not None:
        hi = x - step
    if integer:  # a fractional bound admits only the integers inside it
        lo = math.ceil(lo) if lo is not None else None
        hi = math.floor(hi) if hi is not None else None
    if lo is None and hi is None:
        return default
    if lo is None:
        lo = min(default[0], hi if hi is not None else default[0])
    if hi is None:
        hi = max(default[1], lo)
    return lo, hi


def _number(value: Any) -> float | None:
    """A bound's value, or ``None`` when absent (booleans are not numbers)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _random_string(schema: Mapping[str, Any], rng: random.Random, depth: int) -> str:
    fmt = schema.get("format")
    if fmt == "date":
        return f"{rng.randint(2000, 2030):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if fmt == "date-time":
        day = _random_string({"format": "date"}, rng, depth)
        return f"{day}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"
    if fmt == "email":
        return f"{rng.choice(_WORDS)}{rng.randint(1, 99)}@example.com"
    lo = int(schema.get("minLength", 0))
    hi = int(schema.get("maxLength", max(lo, 12)))
    if rng.random() < 0.5 and lo <= 5 <= hi:  # words read like an agent's guesses
        text = random_text(rng, rng.randint(1, 2))[:hi]
        if len(text) >= lo:
            return text
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(lo, hi)))


def _random_integer(schema: Mapping[str, Any], rng: random.Random, depth: int) -> int:
    lo, hi = _bounds(schema, integer=True, default=(-10, 100))
    return rng.randint(int(lo), max(int(lo), int(hi)))


def _random_number(schema: Mapping[str, Any], rng: random.Random, depth: int) -> float:
    lo, hi = _bounds(schema, integer=False, default=(-10.0, 100.0))
    value = round(rng.uniform(lo, hi), 2)
    return min(max(value, lo), hi)


def _random_boolean(schema: Mapping[str, Any], rng: random.Random, depth: int) -> bool:
    return rng.random() < 0.5


def _random_array(schema: Mapping[str, Any], rng: random.Random, depth: int) -> list[Any]:
    lo = int(schema.get("minItems", 0))
    hi = max(lo, int(schema.get("maxItems", lo + 3)))
    items = schema.get("items", {"type": "string"})
    want = rng.randint(lo, hi)
    out: list[Any] = []
    for _ in range(4 * want + 4):  # spare draws make room for uniqueItems
        if len(out) >= want:
            break
        value = random_value(items, rng, depth + 1)
        if not (schema.get("uniqueItems") and value in out):
            out.append(value)
    return out


def _random_object(schema: Mapping[str, Any], rng: random.Random, depth: int) -> dict[str, Any]:
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    return {
        name: random_value(sub, rng, depth + 1)
        for name, sub in props.items()
        if name in required or rng.random() < 0.5
    }


_RANDOM: dict[str, Any] = {
    "string": _random_string,
    "integer": _random_integer,
    "number": _random_number,
    "boolean": _random_boolean,
    "array": _random_array,
    "object": _random_object,
}
