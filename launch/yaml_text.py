"""Block-style YAML for plain data (dicts, lists, strings, numbers, booleans, ``None``).

Why not PyYAML: it is not a gymhub dependency, and manifests are plain data, for which
a short emitter is enough. Every string that YAML could read as something else (a
number, ``yes``/``no``/``on``/``null``, text with ``:`` or ``#``, leading spaces...) is
written as a JSON string, which is a valid YAML double-quoted scalar; the tests read the
output back with PyYAML and compare it with the input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["dump_all", "scalar"]

_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./=-]*\Z")
# YAML 1.1 (what most Kubernetes tooling reads) takes these as booleans or null.
_RESERVED = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


def scalar(value: Any) -> str:
    """One scalar as YAML text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        plain = _PLAIN.match(value) and value.lower() not in _RESERVED
        return value if plain else json.dumps(value)
    raise TypeError(f"not plain data: {type(value).__name__}")


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, Mapping):
        out: list[str] = []
        for key, item in value.items():
            head = f"{pad}{scalar(str(key))}:"
            if isinstance(item, Mapping | list | tuple) and item:
                out += [head, *_lines(item, indent + 2)]
            else:
                out.append(f"{head} {_inline(item)}")
        return out
    if isinstance(value, list | tuple):
        out = []
        for item in value:
            if isinstance(item, Mapping | list | tuple) and item:
                inner = _lines(item, indent + 2)
                out += [f"{pad}- {inner[0][indent + 2:]}", *inner[1:]]
            else:
                out.append(f"{pad}- {_inline(item)}")
        return out
    return [f"{pad}{scalar(value)}"]


def _inline(value: Any) -> str:
    """A scalar, or an empty mapping or list (the only collections written on one line)."""
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, list | tuple):
        return "[]"
    return scalar(value)


def dump_all(documents: Iterable[Mapping[str, Any]], *, header: Sequence[str] = ()) -> str:
    """Documents separated by ``---``, after ``header`` lines written as comments."""
    parts = ["".join(f"# {line}".rstrip() + "\n" for line in header)]
    for doc in documents:
        parts.append("---\n" + "\n".join(_lines(doc, 0)) + "\n")
    return "".join(parts)
