import math

import pytest

from gymhub.types import Message, Score, ToolCall, ToolSpec


def test_message_round_trip_with_tool_calls():
    m = Message(role="assistant", content="", tool_calls=(ToolCall("c1", "run_sql", {"query": "SELECT 1"}),))
    assert Message.from_dict(m.to_dict()) == m


def test_tool_call_accepts_openai_shape_with_string_arguments():
    c = ToolCall.from_dict({"id": "x", "type": "function",
                            "function": {"name": "f", "arguments": '{"a": 1}'}})
    assert c == ToolCall("x", "f", {"a": 1})


@pytest.mark.parametrize("bad,needle", [
    ({"role": "robot", "content": "x"}, "role"),
    ({"role": "user", "content": 5}, "content"),
    ({"role": "assistant", "content": "", "tool_calls": "nope"}, "tool_calls"),
    ({"role": "assistant", "content": "", "tool_calls": [{"name": ""}]}, "name"),
    ({"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": "{bad"}]}, "JSON"),
    ({"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": [1]}]}, "object"),
    ([1, 2], "object"),
])
def test_message_from_dict_names_the_problem(bad, needle):
    with pytest.raises(ValueError, match=needle):
        Message.from_dict(bad)


def test_score_error_is_not_ok_and_round_trips():
    s = Score.failed("gold query crashed", verifier="sql_match@abc", db="x")
    assert not s.ok and s.value == 0.0
    assert Score.from_dict(s.to_dict()) == s


def test_score_rejects_nan():
    with pytest.raises(ValueError):
        Score(value=math.nan)


def test_tool_spec_is_openai_shaped():
    d = ToolSpec("f", "does f", {"type": "object", "properties": {}}).to_dict()
    assert d["type"] == "function" and d["function"]["name"] == "f"
