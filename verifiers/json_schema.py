"""``json_schema``: the submission is JSON that a JSON Schema accepts.

Spec::

    {"type": "json_schema", "schema": {...}, "max_errors": 10, "max_chars": 1000000,
     "check_formats": false, "strip_fences": true}

The schema is checked against its own metaschema once, at compile time (the draft is
taken from ``$schema``, else the newest the ``jsonschema`` library knows), so a broken
schema is a :class:`~gymhub.errors.SpecError` naming ``schema``, never a verifier that
rejects everything. The submission is JSON text (one fenced code block around it is
tolerated, models write them) or an already-parsed value; text that is not JSON, JSON
with ``NaN``/``Infinity``, over-long text, or a Python object that JSON cannot express is
*malformed*: a 0 with a reason. A valid document scores 1.0; an invalid one 0.0 with the
first ``max_errors`` validation errors (JSON path and message) in ``details["errors"]``.

``format`` keywords are annotations by default, as the JSON Schema specification says;
``check_formats`` asserts them, but which formats can be checked depends on optional
packages installed next to ``jsonschema``, so turning it on trades determinism across
machines for strictness. Remote ``$ref`` targets are never fetched: a schema that needs
one cannot judge, and the verifier reports an error.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gymhub.errors import SpecError
from gymhub.types import Score

from .core import SpecReader, VerifyFn, verifier_kind
from .golden import GoldenCase

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

__all__: list[str] = []

_MAX_MESSAGE = 200


class _Malformed(ValueError):
    """The submission is not a JSON document (text or value)."""


def _no_constants(name: str) -> Any:
    raise _Malformed(f"{name} is not valid JSON")


def _parse(submission: Any, max_chars: int, strip_fences: bool) -> Any:
    if isinstance(submission, bytes):
        try:
            submission = submission.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Malformed(f"submission bytes are not UTF-8: {exc.reason}") from exc
    if not isinstance(submission, str):
        _check_value(submission, "$", 0)
        try:
            return json.loads(json.dumps(submission))  # tuples become arrays, as JSON sees them
        except ValueError as exc:  # an integer beyond Python's digit limit for str()
            raise _Malformed(f"value JSON cannot carry: {exc}") from exc
    if len(submission) > max_chars:
        raise _Malformed(f"submission is {len(submission):,} characters; "
                         f"the limit is {max_chars:,}")
    text = submission.strip()
    if strip_fences and text.startswith("```") and text.endswith("```") and len(text) >= 6:
        first_newline = text.find("\n")
        if first_newline != -1:  # drop the opening fence and its language tag
            text = text[first_newline + 1 : -3].strip()
    if not text:
        raise _Malformed("submission is empty")
    try:
        parsed = json.loads(text, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        raise _Malformed(f"not valid JSON: {exc.msg} at line {exc.lineno} "
                         f"column {exc.colno}") from exc
    except RecursionError as exc:
        raise _Malformed("JSON nested too deeply") from exc
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise _Malformed(f"not valid JSON here: {exc}") from exc
    # The same depth cap as for parsed values: a recursive schema would otherwise recurse
    # as deep as the text nests, and a crash is not a verdict.
    _check_value(parsed, "$", 0)
    return parsed


def _check_value(value: Any, path: str, depth: int) -> None:
    """Refuse parsed values that JSON could not have produced (sets, objects, NaN)."""
    if depth > 200:
        raise _Malformed(f"value nested too deeply at {path}")
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Malformed(f"{path} is {value}, which JSON cannot express")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_value(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Malformed(f"{path} has a non-string key {key!r:.40}")
            _check_value(item, f"{path}.{key}", depth + 1)
        return
    raise _Malformed(f"{path} is a {type(value).__name__}, which JSON cannot express")


def _json_path(error: ValidationError) -> str:
    out = "$"
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _short(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


@verifier_kind("json_schema")
def build_json_schema(spec: SpecReader) -> VerifyFn:
    """Compile a ``json_schema`` spec (fields in the module docstring)."""
    # imported here: jsonschema costs ~0.1 s, which every `import gymhub.envs` would pay
    import jsonschema
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for
    from referencing.exceptions import Unresolvable

    schema = spec.get("schema", (dict, bool))
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        at = f" at {where}" if where else ""
        raise SpecError(spec._field("schema"),
                        f"invalid {cls.__name__} schema{at}: {_short(exc.message)}") from exc
    max_errors = spec.integer("max_errors", 10, lo=1)
    max_chars = spec.integer("max_chars", 1_000_000, lo=1)
    strip_fences = spec.get("strip_fences", bool, True)
    checker = cls.FORMAT_CHECKER if spec.get("check_formats", bool, False) else None
    validator = cls(schema, format_checker=checker)

    def verify(submission: Any, task: Any, state: Any) -> Score:
        try:
            instance = _parse(submission, max_chars, strip_fences)
        except _Malformed as exc:
            return Score(0.0, details={"reason": f"malformed: {exc}"})
        try:
            errors = list(itertools.islice(validator.iter_errors(instance), max_errors + 1))
        except Unresolvable as exc:
            return Score.failed(f"cannot judge: the schema's $ref {exc} cannot be resolved "
                                "(remote references are never fetched)")
        if not errors:
            return Score(1.0, details={"reason": "valid"})
        listed = [{"path": _json_path(e), "message": _short(e.message)}
                  for e in errors[:max_errors]]
        first = listed[0]
        more = "+" if len(errors) > max_errors else ""
        reason = (f"{min(len(errors), max_errors)}{more} validation error(s); first at "
                  f"{first['path']}: {first['message']}")
        return Score(0.0, details={"reason": reason, "errors": listed,
                                   "truncated": len(errors) > max_errors})

    return verify


_PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 1},
                   "age": {"type": "integer", "minimum": 0},
                   "tags": {"type": "array", "items": {"type": "string"}}},
    "required": ["name", "age"],
    "additionalProperties": False,
}

GOLDEN = [
    GoldenCase("pass", {"type": "json_schema", "schema": _PERSON}, '{"name": "Ada", "age": 36}',
               note="JSON text"),
    GoldenCase("pass", {"type": "json_schema", "schema": _PERSON},
               {"name": "Ada", "age": 36, "tags": ["x"]}, note="an already-parsed value"),
    GoldenCase("pass", {"type": "json_schema", "schema": _PERSON},
               '```json\n{"name": "Ada", "age": 36}\n```', note="one fenced block"),
    GoldenCase("fail", {"type": "json_schema", "schema": _PERSON}, '{"name": "Ada", "age": "36"}',
               note="a string where an integer is required"),
    GoldenCase("fail", {"type": "json_schema", "schema": _PERSON},
               '{"name": "Ada", "age": 3, "extra": 1}', note="additionalProperties: false"),
    GoldenCase("fail", {"type": "json_schema", "schema": _PERSON}, "[1, 2]",
               note="valid JSON, wrong shape"),
    GoldenCase("malformed", {"type": "json_schema", "schema": _PERSON}, '{"name": "Ada", "age":',
               note="truncated JSON"),
    GoldenCase("malformed", {"type": "json_schema", "schema": {}}, '{"x": NaN}',
               note="NaN is not JSON"),
    GoldenCase("malformed", {"type": "json_schema", "schema": {}}, {"x": {1, 2}},
               note="a Python set is not JSON"),
    GoldenCase("error", {"type": "json_schema",
                         "schema": {"$ref": "https://example.invalid/schema.json"}}, "{}",
               note="a remote $ref is never fetched: the judge cannot judge"),
]
