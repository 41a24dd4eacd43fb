"""state_match: natural-key diffs of world snapshots, golden cases, spec errors."""

from __future__ import annotations

import pytest

from gymhub.errors import SpecError
from gymhub.types import Task
from gymhub.verifiers import compile
from gymhub.verifiers.golden import REQUIRED, cases_of, run_golden

SPEC = {"type": "state_match", "keys": {"t": ["k"]}, "ignore": {"*": ["id"]}}
GOLD = {"t": [{"id": 1, "k": "a", "v": 1.0, "w": "x"}, {"id": 2, "k": "b", "v": 2.0, "w": "y"}]}


def judge(state, spec=SPEC, gold=GOLD):
    return compile(spec)(None, Task(id="t", prompt="", gold=gold), state)


def test_golden_cases_cover_every_expectation_and_hold():
    cases = cases_of("state_match")
    assert set(REQUIRED) <= {c.expect for c in cases}
    bad = [r.describe() for r in run_golden(cases) if not r.ok]
    assert not bad, bad


def test_changed_field_names_the_row_and_both_values():
    s = judge({"t": [{"id": 7, "k": "a", "v": 1.0, "w": "x"}, {"id": 8, "k": "b", "v": 3.0, "w": "y"}]})
    assert s.value == 0.0 and s.ok
    assert s.details["changed"] == [{"table": "t", "key": {"k": "b"},
                                     "fields": {"v": {"gold": 2.0, "got": 3.0}}}]


def test_missing_extra_and_duplicate_rows_are_a_multiset_diff():
    dup = {"t": [*GOLD["t"], {"id": 9, "k": "a", "v": 1.0, "w": "x"}]}
    s = judge(dup)
    assert s.details["extra_rows"] == 1 and s.details["extra"][0]["key"] == {"k": "a"}
    s = judge({"t": GOLD["t"][:1]})
    assert s.details["missing"][0]["row"] == {"k": "b", "v": 2.0, "w": "y"}
    s = judge({**GOLD, "u": [{"x": 1}]})
    assert s.details["extra"] == [{"table": "u", "key": {"x": 1}, "row": {"x": 1}}]


def test_float_tolerance_ignore_and_tables_filter():
    near = {"t": [{"id": 1, "k": "a", "v": 1.0 + 1e-9, "w": "x"}, {"k": "b", "v": 2.0, "w": "y", "id": 5}]}
    assert judge(near).value == 1.0
    spec = {**SPEC, "ignore": {"*": ["id"], "t": ["w"]}, "tables": ["t"]}
    other = {"t": [{"k": "a", "v": 1.0, "w": "?"}, {"k": "b", "v": 2.0, "w": "!"}], "zzz": [{}]}
    assert judge(other, spec).value == 1.0


def test_submission_is_the_state_when_no_state_is_given():
    v = compile(SPEC)
    assert v(GOLD, Task(id="t", prompt="", gold=GOLD), None).value == 1.0


def test_malformed_state_scores_zero_with_reason_but_bad_gold_is_an_error():
    s = judge({"t": [1, 2]})
    assert s.ok and s.value == 0.0 and "row 0" in s.details["reason"]
    s = judge(GOLD, gold="nope")
    assert not s.ok and "gold state" in (s.error or "")


@pytest.mark.parametrize("spec, field", [
    ({"type": "state_match", "keys": {"t": "k"}}, "keys.t"),
    ({"type": "state_match", "keys": {"t": ["k"]}, "ignore": {"t": ["k"]}}, "keys.t"),
    ({"type": "state_match", "tables": [1]}, "tables"),
    ({"type": "state_match", "max_diffs": 0}, "max_diffs"),
    ({"type": "state_match", "kees": {}}, "kees"),
])
def test_bad_specs_fail_at_compile_time_naming_the_field(spec, field):
    with pytest.raises(SpecError) as err:
        compile(spec)
    assert field in str(err.value)
