"""tool_calls: BFCL's AST-match rules, typed reasons, bipartite pairing, gold errors."""

from __future__ import annotations

from typing import Any

import pytest

from gymhub.errors import SpecError
from gymhub.types import Message, Task, ToolCall
from gymhub.verifiers import compile
from gymhub.verifiers.tool_calls import REASONS

ANY = compile({"type": "tool_calls"})
EXACT = compile({"type": "tool_calls", "order": "exact"})


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def expect(name: str, **arguments: list[Any]) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def judge(submission: Any, gold: list[Any], verifier: Any = ANY) -> tuple[float, dict[str, Any]]:
    score = verifier(submission, Task(id="t", prompt="", gold=gold))
    assert score.error is None, score.error
    assert score.details["reason"] in REASONS
    return score.value, score.details


def test_bad_order_option_names_the_field() -> None:
    with pytest.raises(SpecError) as info:
        compile({"type": "tool_calls", "order": "sorted"})
    assert info.value.field == "order"
    with pytest.raises(SpecError):
        compile({"type": "tool_calls", "ordre": "any"})


# ----------------------------------------------------------------------- parameters
def test_optional_param_may_be_omitted_or_given() -> None:
    gold = [expect("f", a=[1], unit=["celsius", ""])]
    assert judge([call("f", a=1)], gold)[0] == 1.0
    assert judge([call("f", a=1, unit="Celsius")], gold)[0] == 1.0
    value, d = judge([call("f", a=1, unit="kelvin")], gold)
    assert (value, d["reason"], d["param"]) == (0.0, "wrong_value", "unit")


def test_missing_and_unexpected_params() -> None:
    gold = [expect("f", a=[1], b=[2])]
    _, d = judge([call("f", a=1)], gold)
    assert (d["reason"], d["param"]) == ("missing_param", "b")
    _, d = judge([call("f", a=1, b=2, c=3)], gold)
    assert (d["reason"], d["param"]) == ("unexpected_param", "c")


def test_any_acceptable_value_matches() -> None:
    gold = [expect("f", city=["San Francisco", "SF"])]
    assert judge([call("f", city="sf")], gold)[0] == 1.0
    assert judge([call("f", city="SAN-FRANCISCO")], gold)[0] == 1.0
    _, d = judge([call("f", city="LA")], gold)
    assert d["reason"] == "wrong_value" and d["expected"] == ["San Francisco", "SF"]


@pytest.mark.parametrize("got,want", [
    ("New York, N.Y.", "new york ny"),
    ("a_b-c/d*e^f", "ABCDEF"),
    ("  Tab\there ", "tabhere"),
    ("Straße", "STRASSE"),  # casefold, not lower
])
def test_string_normalisation(got: str, want: str) -> None:
    assert judge([call("f", s=got)], [expect("f", s=[want])])[0] == 1.0


@pytest.mark.parametrize("got,ok,reason", [
    (5, True, "match"),          # int accepted where float expected
    (5.0, True, "match"),
    (5.5, False, "wrong_value"),
    ("5", False, "wrong_type"),  # a string is never a number
    (True, False, "wrong_type"),  # nor a bool
    (None, False, "wrong_type"),
])
def test_float_param_types(got: Any, ok: bool, reason: str) -> None:
    value, d = judge([call("f", x=got)], [expect("f", x=[5.0])])
    assert value == (1.0 if ok else 0.0) and d["reason"] == reason


@pytest.mark.parametrize("got,reason", [
    (5.0, "wrong_type"),   # a float is not accepted where an int is expected
    ("5", "wrong_type"),
    (False, "wrong_type"),
    (6, "wrong_value"),
])
def test_int_param_types(got: Any, reason: str) -> None:
    assert judge([call("f", n=got)], [expect("f", n=[5])])[1]["reason"] == reason


def test_bool_param_is_not_an_int() -> None:
    gold = [expect("f", flag=[True])]
    assert judge([call("f", flag=True)], gold)[0] == 1.0
    assert judge([call("f", flag=1)], gold)[1]["reason"] == "wrong_type"


def test_lists_compare_element_by_element() -> None:
    gold = [expect("f", xs=[[1, 2.0, "a b"]])]
    assert judge([call("f", xs=[1, 2, "AB"])], gold)[0] == 1.0
    assert judge([call("f", xs=(1, 2, "ab"))], gold)[0] == 1.0
    _, d = judge([call("f", xs=[2, 1, "ab"])], gold)
    assert (d["reason"], d["param"]) == ("wrong_value", "xs[0]")
    _, d = judge([call("f", xs=[1, 2])], gold)
    assert d["reason"] == "wrong_value" and "expected 3 items, got 2" in d["message"]
    assert judge([call("f", xs="1,2,ab")], gold)[1]["reason"] == "wrong_type"


def test_nested_dicts_are_patterns_checked_recursively() -> None:
    gold = [expect("book", where=[{"city": ["Paris", "paris fr"], "zip": ["", "75001"],
                                   "geo": [{"lat": [48.8], "lon": [2.3]}]}])]
    ok = call("book", where={"city": "PARIS", "geo": {"lat": 48.8, "lon": 2.3}})
    assert judge([ok], gold)[0] == 1.0
    _, d = judge([call("book", where={"city": "Paris", "geo": {"lat": 48.8}})], gold)
    assert (d["reason"], d["param"]) == ("missing_param", "where.geo.lon")
    _, d = judge([call("book", where={"city": "Paris", "geo": {"lat": 48.8, "lon": 2.3},
                                      "floor": 2})], gold)
    assert (d["reason"], d["param"]) == ("unexpected_param", "where.floor")
    _, d = judge([call("book", where={"city": "Paris", "geo": {"lat": "48.8", "lon": 2.3}})],
                 gold)
    assert (d["reason"], d["param"]) == ("wrong_type", "where.geo.lat")
    assert judge([call("book", where=["Paris"])], gold)[1]["reason"] == "wrong_type"


def test_list_of_dict_patterns() -> None:
    gold = [expect("order", items=[[{"sku": ["A1"], "qty": [1, 2]}, {"sku": ["B2"], "qty": [1]}]])]
    assert judge([call("order", items=[{"sku": "a1", "qty": 2}, {"sku": "b2", "qty": 1}])],
                 gold)[0] == 1.0
    _, d = judge([call("order", items=[{"sku": "a1", "qty": 3}, {"sku": "b2", "qty": 1}])], gold)
    assert (d["reason"], d["param"]) == ("wrong_value", "items[0].qty")


# ------------------------------------------------------------------------- calls
def test_parallel_calls_in_any_order() -> None:
    gold = [expect("a", x=[1]), expect("b", y=[2]), expect("a", x=[3])]
    sub = [call("a", x=3), call("b", y=2), call("a", x=1)]
    assert judge(sub, gold)[0] == 1.0
    _, d = judge(sub, gold, EXACT)
    assert d["reason"] == "wrong_order"
    assert judge([call("a", x=1), call("b", y=2), call("a", x=3)], gold, EXACT)[0] == 1.0


def test_exact_order_names_a_left_out_or_inserted_call() -> None:
    gold = [expect("a", x=[1]), expect("b", y=[2]), expect("c", z=[3])]
    _, d = judge([call("a", x=1), call("c", z=3)], gold, EXACT)  # b left out
    assert (d["reason"], d["call"], d["expected"], d["cause"]) == (
        "missing_call", 1, "b", "wrong_name")
    _, d = judge([call("a", x=1), call("d"), call("b", y=2), call("c", z=3)], gold, EXACT)
    assert (d["reason"], d["submitted"], d["got"]) == ("extra_call", 1, "d")
    _, d = judge([call("a", x=1), call("b", y=2)], gold, EXACT)  # the last one left out
    assert (d["reason"], d["call"]) == ("missing_call", 2)
    # one too few, and what was made does not fit in order: the first misfit is reported
    _, d = judge([call("a", x=1), call("c", z=4)], gold, EXACT)
    assert (d["reason"], d["call"]) == ("wrong_name", 1)


def test_bipartite_matching_beats_greedy() -> None:
    # the first submitted call fits both expected calls; greedy pairs it with the first
    # expected call and then finds nothing for the second. A maximum matching finds 1.0.
    gold = [expect("f", x=[1, 2]), expect("f", x=[1])]
    assert judge([call("f", x=1), call("f", x=2)], gold)[0] == 1.0
    gold = [expect("f", x=[1, 2], y=["", 0]), expect("f", x=[1], y=[0])]
    assert judge([call("f", x=1, y=0), call("f", x=2)], gold)[0] == 1.0


def test_missing_extra_and_duplicate_calls() -> None:
    gold = [expect("a", x=[1]), expect("b", y=[2])]
    value, d = judge([call("a", x=1)], gold)
    assert (value, d["reason"], d["call"]) == (0.0, "missing_call", 1)
    _, d = judge([call("a", x=1), call("b", y=2), call("b", y=2)], gold)
    assert (d["reason"], d["submitted"]) == ("extra_call", 2)
    assert judge([], gold)[1]["reason"] == "missing_call"
    assert judge([], [])[0] == 1.0
    assert judge([call("a", x=1)], [])[1]["reason"] == "extra_call"


def test_wrong_name_and_closest_call_diagnosis() -> None:
    gold = [expect("get_weather", city=["Paris"])]
    _, d = judge([call("get_wether", city="Paris")], gold)
    assert d["reason"] == "wrong_name" and d["expected"] == "get_weather"
    # with a same-named but wrong call available, the diagnosis is against that one
    gold = [expect("a", x=[1]), expect("b", y=[2])]
    _, d = judge([call("b", y=2), call("a", x=9)], gold)
    assert (d["reason"], d["call"], d["submitted"], d["param"]) == ("wrong_value", 0, 1, "x")
    # one call too few: the count is the reason, the closest misfit the cause
    _, d = judge([call("a", x=9)], gold)
    assert d["reason"] == "missing_call" and d["cause"] == "wrong_value"


def test_submission_shapes() -> None:
    gold = [expect("f", x=[1])]
    assert judge([ToolCall("c1", "f", {"x": 1})], gold)[0] == 1.0
    assert judge([{"id": "c1", "function": {"name": "f", "arguments": '{"x": 1}'}}], gold)[0] == 1.0
    msg = Message("assistant", "", tool_calls=(ToolCall("c1", "f", {"x": 1}),))
    assert judge(msg, gold)[0] == 1.0
    assert judge(Message("assistant", "x = 1"), gold)[1]["reason"] == "missing_call"


@pytest.mark.parametrize("submission", [
    None, "f(x=1)", {"name": "f", "arguments": {"x": 1}}, [1], [{"name": ""}],
    [{"name": "f", "arguments": "{bad json"}], [{"name": "f", "arguments": "[1]"}],
])
def test_malformed_submissions_score_zero_with_reason(submission: Any) -> None:
    value, d = judge(submission, [expect("f", x=[1])])
    assert value == 0.0 and d["reason"] == "malformed" and d["message"]


def test_unicode_names_and_big_arguments() -> None:
    gold = [expect("überweisen", betrag=["zwölf"])]
    assert judge([call("überweisen", betrag="ZWÖLF")], gold)[0] == 1.0
    huge = "x" * 10_000_000
    value, d = judge([call("überweisen", betrag=huge)], gold)
    assert value == 0.0 and d["reason"] == "wrong_value" and len(str(d["got"])) < 200


@pytest.mark.parametrize("gold", [
    None, "f(x=1)", {"name": "f", "arguments": {}}, [{"name": "f", "arguments": {"x": 1}}],
    [{"name": "f", "arguments": {"x": []}}], [{"name": "", "arguments": {}}],
    [{"name": "f", "arguments": {"x": [{"k": 1}]}}], [{"name": "f", "args": {}}],
    [{"name": "f", "arguments": {"x": [object()]}}], [7],
])
def test_malformed_gold_is_an_error_not_a_zero(gold: Any) -> None:
    score = ANY([call("f", x=1)], Task(id="t", prompt="", gold=gold))
    assert score.error is not None and "cannot judge" in score.error


def test_bfcl_native_gold_shape() -> None:
    gold = [{"calc_area": {"base": [10], "height": [5], "unit": ["", "units"]}}]
    assert judge([call("calc_area", base=10, height=5)], gold)[0] == 1.0


def test_explicit_empty_string_counts_as_omitting_an_optional_param() -> None:
    gold = [expect("f", unit=["", "celsius"])]
    assert judge([call("f", unit="")], gold)[0] == 1.0
    _, d = judge([call("f", unit="kelvin")], gold)
    assert d["reason"] == "wrong_value" and d["expected"] == "celsius"


def test_tool_call_objects_with_text_or_bad_arguments() -> None:
    gold = [expect("f", x=[1])]
    assert judge([ToolCall("1", "f", '{"x": 1}')], gold)[0] == 1.0  # type: ignore[arg-type]
    assert judge([ToolCall("1", "f", [1])], gold)[1]["reason"] == "malformed"  # type: ignore[arg-type]


def test_hostile_argument_shapes_are_malformed_or_judged_never_crash() -> None:
    gold = [expect("f", x=[1])]
    deep = '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert judge([{"name": "f", "arguments": deep}], gold)[1]["reason"] == "malformed"
    value, d = judge([ToolCall("1", "f", {"x": 1, (1, 2): "tuple key"})], gold)  # type: ignore[dict-item]
    assert value == 0.0 and d["reason"] == "unexpected_param"
