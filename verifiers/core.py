"""The verifier compiler: declarative spec in, deterministic callable out.

A spec is a mapping with a ``type`` and that kind's fields, e.g.
``{"type": "sql_match", "preset": "test_suite", "float_tol": 1e-6}``. :func:`compile`
validates it once (a bad spec fails here, naming the field), lets the kind
precompute what it can, and returns a :class:`Verifier`: a plain callable
``verify(submission, task, state) -> Score``.

A verifier never raises on a submission: an exception inside a kind becomes a
:class:`~gymhub.types.Score` with ``error`` set, so a crashed judge is masked by the
learner rather than trained on as a 0. Its ``id`` is ``name@hash``, the hash covering
the spec and the kind's source, so stored scores say exactly what produced them.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import importlib
import inspect
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from gymhub.errors import SpecError
from gymhub.types import Score

__all__ = [
    "KINDS",
    "SpecReader",
    "Verifier",
    "VerifyFn",
    "compile",
    "compile_cached",
    "verifier_kind",
]

VerifyFn = Callable[[Any, Any, Any], Score]
Builder = Callable[["SpecReader"], VerifyFn]
T = TypeVar("T")


@dataclass(frozen=True)
class _Kind:
    name: str
    build: Builder
    source_hash: str


#: Registered verifier kinds by ``type`` name.
KINDS: dict[str, _Kind] = {}


def verifier_kind(name: str, *, depends_on: Sequence[str] = ()) -> Callable[[Builder], Builder]:
    """Register a builder ``build(spec: SpecReader) -> verify`` under ``type=name``.

    The builder reads and validates its fields through ``spec`` (so errors name the
    field), precomputes, and returns the verify function. ``depends_on`` names further
    modules whose source decides scores (a harness run inside the sandbox): they are
    hashed into the id too, so changing them changes ``name@hash``.
    """

    def register(build: Builder) -> Builder:
        module = sys.modules.get(build.__module__)
        try:
            source = inspect.getsource(module) if module else inspect.getsource(build)
            source += "".join(inspect.getsource(importlib.import_module(m)) for m in depends_on)
        except (OSError, TypeError):
            source = build.__qualname__
        digest = hashlib.sha256(source.encode()).hexdigest()
        KINDS[name] = _Kind(name, build, digest)
        return build

    return register


class Verifier:
    """A compiled verifier; call it as ``verifier(submission, task, state)``."""

    def __init__(self, name: str, spec: Mapping[str, Any], fn: VerifyFn, source_hash: str) -> None:
        self.name = name
        self.spec = dict(spec)
        self._fn = fn
        canonical = json.dumps(self.spec, sort_keys=True, default=str)
        self.hash = hashlib.sha256((canonical + source_hash).encode()).hexdigest()[:12]
        self.id = f"{name}@{self.hash}"

    def __call__(self, submission: Any, task: Any = None, state: Any = None) -> Score:
        """Score a submission; never raises (a crash is reported as ``Score.error``)."""
        try:
            score = self._fn(submission, task, state)
        except Exception as exc:  # a judge that crashes must not become a silent 0
            return Score.failed(f"verifier crashed: {type(exc).__name__}: {exc}", self.id)
        if not isinstance(score, Score):
            return Score.failed(f"verifier returned {type(score).__name__}, not Score", self.id)
        return score if score.verifier == self.id else replace(score, verifier=self.id)

    verify = __call__

    def __repr__(self) -> str:
        return f"Verifier({self.id})"


class SpecReader:
    """Typed, path-aware access to a spec's fields; unknown fields are an error.

    Args:
        spec: the mapping being read.
        path: where it sits in the enclosing spec (for messages), e.g. ``parts[1]``.
    """

    def __init__(self, spec: Mapping[str, Any], path: str = "") -> None:
        if not isinstance(spec, Mapping):
            raise SpecError(path or "spec", f"must be a mapping, got {type(spec).__name__}")
        self.spec = spec
        self.path = path
        self._seen = {"type"}

    def _field(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def get(self, name: str, kind: type[T] | tuple[type, ...], default: Any = ...) -> Any:
        """A field of the given type, or ``default`` when absent (required if no default)."""
        self._seen.add(name)
        if name not in self.spec:
            if default is ...:
                raise SpecError(self._field(name), "is required")
            return default
        value = self.spec[name]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise SpecError(self._field(name), f"must be {names}, got {value!r}")
        return value

    def number(
        self, name: str, default: Any = ..., *, lo: float | None = None, hi: float | None = None
    ) -> float:
        """A float field within ``[lo, hi]``."""
        value = float(self.get(name, float, default))
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise SpecError(self._field(name), f"must be within [{lo}, {hi}], got {value}")
        return value

    def integer(self, name: str, default: Any = ..., *, lo: int | None = None) -> int:
        """An int field no smaller than ``lo``."""
        value = int(self.get(name, int, default))
        if lo is not None and value < lo:
            raise SpecError(self._field(name), f"must be >= {lo}, got {value}")
        return value

    def choice(self, name: str, options: Sequence[str], default: Any = ...) -> str:
        """A string field that must be one of ``options``."""
        value = str(self.get(name, str, default))
        if value not in options:
            raise SpecError(self._field(name), f"must be one of {list(options)}, got {value!r}")
        return value

    def children(self, name: str) -> list[SpecReader]:
        """A non-empty list of nested specs."""
        items = self.get(name, list)
        if not items:
            raise SpecError(self._field(name), "must not be empty")
        return [SpecReader(item, f"{self._field(name)}[{i}]") for i, item in enumerate(items)]

    def finish(self) -> None:
        """Refuse fields the kind did not read (typos must not pass silently)."""
        extra = [k for k in self.spec if k not in self._seen]
        if extra:
            hint = difflib.get_close_matches(str(extra[0]), list(self._seen), n=1)
            did = f"; did you mean {hint[0]!r}?" if hint else ""
            raise SpecError(self._field(str(extra[0])), f"unknown field{did}")


def compile(spec: Mapping[str, Any], *, name: str | None = None) -> Verifier:
    """Compile a verifier spec.

    Args:
        spec: ``{"type": kind, ...fields}``.
        name: the verifier's name (defaults to its type).

    Raises:
        SpecError: an unknown type or an invalid field, named by its path.
    """
    return _compile(SpecReader(spec), name)


def _compile(reader: SpecReader, name: str | None = None) -> Verifier:
    kind_name = reader.spec.get("type")
    if not isinstance(kind_name, str):
        raise SpecError(reader._field("type"), "is required and must be a string")
    _ensure_builtin_kinds()
    kind = KINDS.get(kind_name)
    if kind is None:
        hint = difflib.get_close_matches(kind_name, list(KINDS), n=1)
        did = f"; did you mean {hint[0]!r}?" if hint else ""
        raise SpecError(reader._field("type"), f"unknown verifier type {kind_name!r}{did}")
    fn = kind.build(reader)
    reader.finish()
    return Verifier(name or kind_name, reader.spec, fn, kind.source_hash)


@functools.lru_cache(maxsize=256)
def _compile_json(spec_json: str, name: str | None) -> Verifier:
    return compile(json.loads(spec_json), name=name)


def compile_cached(spec: Mapping[str, Any], *, name: str | None = None) -> Verifier:
    """:func:`compile`, memoised on the spec's canonical JSON.

    Environments are built per episode (the server keeps many), but a verifier's
    precomputed state, such as a gold-result cache, should be shared by all of them.
    """
    return _compile_json(json.dumps(dict(spec), sort_keys=True), name)


def compile_child(reader: SpecReader) -> Verifier:
    """Compile a nested spec (used by combinators)."""
    return _compile(reader)


def _ensure_builtin_kinds() -> None:
    # Kinds register on import; importing the package registers the built-ins.
    import gymhub.verifiers  # noqa: F401
