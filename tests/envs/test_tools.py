from typing import Literal

import pytest

from gymhub.envs import Final, Task, ToolEnv, ToolError, tool
from gymhub.types import Message, Score, ToolCall


class Calc(ToolEnv):
    def __init__(self, **kw):
        super().__init__([Task(id="t0", prompt="add", gold="3")], **kw)

    def _start(self, task):
        return [Message(role="user", content=task.prompt)], {}

    @tool
    def add(self, a: int, b: float = 0.0, mode: Literal["plain", "verbose"] = "plain") -> str:
        """Add two numbers.

        Args:
            a: the first addend.
            b: the second addend; it may be
                fractional.
            mode: how to phrase the result.
        """
        return f"{a + b}" if mode == "plain" else f"the sum is {a + b}"

    @tool
    def tags(self, items: list[str], note: str | None = None) -> str:
        """Join tags."""
        return ",".join(items) + (note or "")

    @tool
    def fail(self) -> str:
        """Always refuses."""
        raise ToolError("nope, and here is why")

    @tool(name="submit")
    def submit_answer(self, answer: str) -> Final:
        """Finish."""
        return Final("done", Score(1.0 if answer == "3" else 0.0))

    def gold_action(self):
        return Message(role="assistant", content="", tool_calls=(ToolCall("g", "submit", {"answer": "3"}),))


def call(env, name, **args):
    msg = Message(role="assistant", content="", tool_calls=(ToolCall("c", name, args),))
    return env.step(msg)


def test_schema_comes_from_signature_and_docstring():
    specs = {s.name: s for s in Calc().tool_specs()}
    add = specs["add"]
    assert add.description == "Add two numbers."
    props = add.parameters["properties"]
    assert props["a"] == {"type": "integer", "description": "the first addend."}
    assert props["b"]["type"] == "number"
    assert props["b"]["description"] == "the second addend; it may be fractional."
    assert props["mode"]["enum"] == ["plain", "verbose"]
    assert add.parameters["required"] == ["a"]
    assert specs["tags"].parameters["properties"]["items"] == {"type": "array", "items": {"type": "string"}}
    assert specs["tags"].parameters["properties"]["note"]["nullable"] is True
    assert "submit" in specs and "submit_answer" not in specs


@pytest.mark.parametrize("args,needle", [
    ({}, "missing required argument 'a'"),
    ({"a": "5"}, "must be integer, got string '5'"),
    ({"a": True}, "must be integer, got boolean"),
    ({"a": 1, "b": "x"}, "must be number"),
    ({"a": 1, "zzz": 2}, "unknown argument 'zzz'"),
    ({"a": 1, "mode": "loud"}, "must be one of 'plain', 'verbose'"),
])
def test_bad_arguments_are_answered_not_raised(args, needle):
    env = Calc()
    env.reset(seed=0)
    obs, reward, term, trunc, info = call(env, "add", **args)
    assert not term and len(obs) == 1 and obs[0].role == "tool"
    assert obs[0].content.startswith("Error:") and needle in obs[0].content


def test_valid_call_runs_and_integral_float_is_accepted():
    env = Calc()
    env.reset(seed=0)
    obs, *_ = call(env, "add", a=2.0, b=0.5)
    assert obs[0].content == "2.5"
    obs, *_ = call(env, "tags", items=["a", "b"], note=None)
    assert obs[0].content == "a,b"
    obs, *_ = call(env, "tags", items=["a", 3])
    assert "items[1]" in obs[0].content


def test_unknown_tool_suggests_close_name_and_tool_error_becomes_message():
    env = Calc()
    env.reset(seed=0)
    obs, *_ = call(env, "ad", a=1)
    assert "unknown tool 'ad'" in obs[0].content and "Did you mean 'add'" in obs[0].content
    obs, *_ = call(env, "fail")
    assert obs[0].content == "Error: nope, and here is why"


def test_submit_terminates_with_score_and_later_calls_are_skipped():
    env = Calc()
    env.reset(seed=0)
    msg = Message(role="assistant", content="", tool_calls=(
        ToolCall("1", "submit", {"answer": "3"}), ToolCall("2", "add", {"a": 1})))
    obs, reward, term, trunc, info = env.step(msg)
    assert term and not trunc and reward == 1.0
    assert info["score"].value == 1.0
    assert [m.tool_call_id for m in obs] == ["1", "2"]
    assert "not run" in obs[1].content


def test_text_without_tool_call_is_answered():
    env = Calc()
    env.reset(seed=0)
    obs, _, term, _, info = env.step(Message(role="assistant", content="the answer is 3"))
    assert not term and info["error"] == "no_tool_call" and "submit" in obs[0].content


def test_too_many_calls_in_one_turn():
    env = Calc()
    env.reset(seed=0)
    calls = tuple(ToolCall(str(i), "add", {"a": i}) for i in range(12))
    obs, *_ = env.step(Message(role="assistant", content="", tool_calls=calls))
    assert len(obs) == 12 and all("at most" in m.content for m in obs[8:])


def test_unsupported_parameter_type_fails_at_class_creation():
    with pytest.raises(TypeError, match="unsupported tool parameter type"):
        class Bad(Calc):
            @tool
            def odd(self, x: complex) -> str:
                """x."""
                return ""


def test_backend_failure_ends_the_episode_with_an_errored_score():
    from gymhub.errors import BackendError

    class Flaky(Calc):
        @tool
        def lookup(self, key: str) -> str:
            """Look something up in a backend that has gone away."""
            raise BackendError("connection to server lost")

    env = Flaky()
    env.reset(seed=0)
    obs, reward, term, trunc, info = call(env, "lookup", key="k")
    assert term and reward == 0.0
    assert not info["score"].ok and "connection to server lost" in info["score"].error
    assert "unscored" in obs[0].content


def test_failing_start_leaves_no_half_open_episode():
    from gymhub.errors import EpisodeFinished

    class Broken(Calc):
        ended = 0

        def _start(self, task):
            raise RuntimeError("fixture missing")

        def _end(self):
            Broken.ended += 1

    env = Broken()
    with pytest.raises(RuntimeError):
        env.reset(seed=0)
    assert env.done and Broken.ended == 1
    with pytest.raises(EpisodeFinished):
        env.step(Message(role="assistant", content="x"))
