import pytest

from gymhub.envs import Task
from gymhub.errors import SpecError
from gymhub.types import Score
from gymhub.verifiers import KINDS, compile, verifier_kind

TASK = Task(id="t", prompt="say hi", gold="hi")


def test_exact_and_regex():
    v = compile({"type": "exact_match"})
    assert v(" hi ", TASK).value == 1.0
    assert v("Hi", TASK).value == 0.0
    assert compile({"type": "exact_match", "case_sensitive": False})("HI", TASK).value == 1.0
    r = compile({"type": "regex", "pattern": r"h[iy]"})
    assert r("hy", TASK).value == 1.0 and r("hey", TASK).value == 0.0


def test_id_is_name_at_hash_and_depends_on_spec():
    a = compile({"type": "exact_match"})
    b = compile({"type": "exact_match", "strip": False})
    assert a.id.startswith("exact_match@") and len(a.hash) == 12
    assert a.id != b.id
    assert compile({"type": "exact_match"}).id == a.id
    assert a(" hi", TASK).verifier == a.id


@pytest.mark.parametrize("spec,field", [
    ({}, "type"),
    ({"type": "exact_macth"}, "type"),
    ({"type": "exact_match", "strip": "yes"}, "strip"),
    ({"type": "exact_match", "stirp": True}, "stirp"),
    ({"type": "regex"}, "pattern"),
    ({"type": "regex", "pattern": "("}, "pattern"),
    ({"type": "weighted_sum", "parts": []}, "parts"),
    ({"type": "weighted_sum", "parts": [{"weight": -1, "verifier": {"type": "exact_match"}}]},
     "parts[0].weight"),
    ({"type": "all_of", "parts": [{"type": "regex", "pattern": "x", "bogus": 1}]}, "parts[0].bogus"),
    ({"type": "min", "parts": [{"type": "nope"}]}, "parts[0].type"),
])
def test_bad_specs_name_the_field(spec, field):
    with pytest.raises(SpecError) as info:
        compile(spec)
    assert info.value.field == field


def test_unknown_type_suggests():
    with pytest.raises(SpecError, match="did you mean 'exact_match'"):
        compile({"type": "exact_macth"})


def test_combinators():
    ws = compile({"type": "weighted_sum", "parts": [
        {"weight": 3, "verifier": {"type": "exact_match"}},
        {"weight": 1, "verifier": {"type": "regex", "pattern": "h.*"}}]})
    assert ws("hi", TASK).value == 1.0
    assert ws("ho", TASK).value == pytest.approx(0.25)
    gate = compile({"type": "all_of", "parts": [{"type": "exact_match"}, {"type": "regex", "pattern": "h."}]})
    assert gate("hi", TASK).value == 1.0 and gate("ho", TASK).value == 0.0
    mn = compile({"type": "min", "parts": [{"type": "exact_match"}, {"type": "regex", "pattern": "h."}]})
    assert mn("ho", TASK).value == 0.0
    assert set(ws("hi", TASK).components) == {"0:exact_match", "1:regex"}


def test_crashing_kind_is_an_error_not_a_zero_and_errors_propagate_through_combinators():
    @verifier_kind("test_crashes")
    def build(spec):
        def verify(submission, task, state):
            raise RuntimeError("fixture vanished")
        return verify

    try:
        v = compile({"type": "test_crashes"})
        s = v("x", TASK)
        assert not s.ok and "fixture vanished" in s.error and s.verifier == v.id
        combo = compile({"type": "weighted_sum", "parts": [
            {"weight": 1, "verifier": {"type": "exact_match"}},
            {"weight": 1, "verifier": {"type": "test_crashes"}}]})
        assert not combo("hi", TASK).ok
    finally:
        KINDS.pop("test_crashes")


def test_non_string_submission_scores_zero_with_reason():
    s = compile({"type": "exact_match"})(None, TASK)
    assert s.ok and s.value == 0.0 and "not text" in s.details["reason"]


def test_wrong_return_type_is_an_error():
    @verifier_kind("test_returns_float")
    def build(spec):
        return lambda submission, task, state: 1.0

    try:
        s = compile({"type": "test_returns_float"})("x", TASK)
        assert isinstance(s, Score) and not s.ok
    finally:
        KINDS.pop("test_returns_float")


def test_weighted_sum_refuses_all_zero_weights():
    with pytest.raises(SpecError) as info:
        compile({"type": "weighted_sum", "parts": [{"weight": 0, "verifier": {"type": "exact_match"}}]})
    assert info.value.field == "parts"


def test_regex_caps_submission_length_before_matching():
    v = compile({"type": "regex", "pattern": r"a+b", "max_chars": 50})
    assert v("a" * 48 + "b", TASK).value == 1.0
    s = v("a" * 10_000 + "b", TASK)
    assert s.ok and s.value == 0.0 and "limit" in s.details["reason"]


def test_a_kind_hashes_the_modules_it_depends_on():
    from gymhub.verifiers.core import KINDS, verifier_kind

    def build(spec):
        return lambda submission, task, state: None

    verifier_kind("_probe_alone")(build)
    verifier_kind("_probe_harness", depends_on=("gymhub.verifiers.unit_tests_harness",))(build)
    try:
        assert KINDS["_probe_alone"].source_hash != KINDS["_probe_harness"].source_hash
    finally:
        del KINDS["_probe_alone"], KINDS["_probe_harness"]
