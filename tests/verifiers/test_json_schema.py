"""json_schema: schema checked at compile time, text or parsed submissions, capped errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gymhub.errors import SpecError
from gymhub.verifiers import compile

ITEMS = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "integer", "minimum": 0}}},
    "required": ["items"],
}


@pytest.mark.parametrize("spec,field,words", [
    ({"type": "json_schema"}, "schema", "required"),
    ({"type": "json_schema", "schema": "object"}, "schema", "must be dict or bool"),
    ({"type": "json_schema", "schema": {"type": "objekt"}}, "schema", "invalid"),
    ({"type": "json_schema", "schema": {"properties": {"a": {"minimum": "zero"}}}}, "schema",
     "properties/a/minimum"),
    ({"type": "json_schema", "schema": {}, "max_errors": 0}, "max_errors", ">= 1"),
    ({"type": "json_schema", "schema": {}, "check_format": True}, "check_format", "did you mean"),
])
def test_bad_specs_name_the_field(spec: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        compile(spec)
    assert info.value.field == field and words in str(info.value)


def test_draft_is_taken_from_dollar_schema() -> None:
    # "exclusiveMinimum": true is valid in draft 4 and invalid in 2020-12
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "minimum": 0,
              "exclusiveMinimum": True}
    v = compile({"type": "json_schema", "schema": draft4})
    assert v("1").value == 1.0 and v("0").value == 0.0
    with pytest.raises(SpecError):
        compile({"type": "json_schema", "schema": {**draft4, "$schema":
                                                   "https://json-schema.org/draft/2020-12/schema"}})


def test_boolean_schemas() -> None:
    assert compile({"type": "json_schema", "schema": True})('{"anything": 1}').value == 1.0
    assert compile({"type": "json_schema", "schema": False})("1").value == 0.0


def test_text_and_parsed_submissions_agree() -> None:
    v = compile({"type": "json_schema", "schema": ITEMS})
    for good in ('{"items": [1, 2]}', {"items": [1, 2]}, {"items": (1, 2)}, b'{"items": []}',
                 '  ```\n{"items": [0]}\n```  '):
        assert v(good).value == 1.0, good
    assert v({"items": [-1]}).value == 0.0


def test_errors_list_paths_and_are_capped() -> None:
    v = compile({"type": "json_schema", "schema": ITEMS, "max_errors": 3})
    s = v(json.dumps({"items": [-1, "x", 2, -5, None]}))
    assert s.value == 0.0 and s.error is None
    assert [e["path"] for e in s.details["errors"]] == ["$.items[0]", "$.items[1]", "$.items[3]"]
    assert s.details["truncated"] is True and s.details["reason"].startswith("3+ validation")
    s = compile({"type": "json_schema", "schema": ITEMS})({"other": 1})
    assert s.details["errors"] == [{"path": "$", "message": "'items' is a required property"}]


def test_long_messages_are_cut() -> None:
    s = compile({"type": "json_schema", "schema": {"type": "string"}})({"k": "v" * 10_000})
    assert s.value == 0.0 and len(s.details["errors"][0]["message"]) <= 200


@pytest.mark.parametrize("submission,words", [
    ("", "empty"), ("   ", "empty"), ("{'a': 1}", "not valid JSON"), ('{"a": 1} trailing', "Extra"),
    ("[Infinity]", "Infinity"), (b"\xff\xfe", "UTF-8"), ({"a": float("nan")}, "nan"),
    ({1: "a"}, "non-string key"), (object(), "object"), ("[" * 100_000 + "]" * 100_000, "deeply"),
])
def test_malformed_submissions_score_zero_with_reason(submission: Any, words: str) -> None:
    s = compile({"type": "json_schema", "schema": {}})(submission)
    assert s.error is None and s.value == 0.0
    assert s.details["reason"].startswith("malformed") and words in s.details["reason"]


def test_max_chars_caps_text() -> None:
    v = compile({"type": "json_schema", "schema": {}, "max_chars": 10})
    assert v('"short"').value == 1.0
    assert "limit" in v('"' + "x" * 20 + '"').details["reason"]


def test_formats_are_annotations_unless_asked() -> None:
    schema = {"type": "string", "format": "date"}
    assert compile({"type": "json_schema", "schema": schema})('"not a date"').value == 1.0
    strict = compile({"type": "json_schema", "schema": schema, "check_formats": True})
    assert strict('"2026-12-01"').value == 1.0 and strict('"not a date"').value == 0.0


def test_local_refs_resolve_and_remote_refs_are_errors() -> None:
    local = {"$defs": {"pos": {"type": "integer", "minimum": 1}}, "$ref": "#/$defs/pos"}
    v = compile({"type": "json_schema", "schema": local})
    assert v("3").value == 1.0 and v("0").value == 0.0
    remote = compile({"type": "json_schema", "schema": {"$ref": "https://example.invalid/x"}})
    s = remote("{}")
    assert s.error is not None and "never fetched" in s.error
