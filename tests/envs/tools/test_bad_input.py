"""Bad input to tools-v0: each gets a clear error message and the world stays as it was."""

from __future__ import annotations

from typing import Any

import pytest

from gymhub.envs.tools.env import ToolsEnv
from gymhub.types import Message, ToolCall


def call(env: ToolsEnv, name: str, **arguments: Any) -> tuple[str, bool]:
    msg = Message(role="assistant", content="",
                  tool_calls=(ToolCall(id="c1", name=name, arguments=arguments),))
    obs, _, terminated, _, _ = env.step(msg)
    return obs[0].content, terminated


@pytest.fixture
def fresh(env: ToolsEnv) -> ToolsEnv:
    env.reset(options={"task_id": "transfer-00"})
    return env


def unchanged(env: ToolsEnv) -> bool:
    assert env.session is not None
    return env.session.world.snapshot() == env.initial_state()


def test_invalid_json_arguments_are_an_invalid_action(fresh: ToolsEnv) -> None:
    action = {"role": "assistant", "content": "",
              "tool_calls": [{"id": "x", "function": {"name": "send_email",
                                                       "arguments": '{"to": "a@b.c", '}}]}
    obs, _, term, _, info = fresh.step(action)
    assert "not valid JSON" in obs[0].content and not term and info["error"] == "invalid_action"
    assert unchanged(fresh)


def test_unknown_tool_suggests_the_closest(fresh: ToolsEnv) -> None:
    text, term = call(fresh, "transfer_fund", amount=5)
    assert "unknown tool 'transfer_fund'" in text and "Did you mean 'transfer_funds'" in text
    assert not term and unchanged(fresh)


@pytest.mark.parametrize("arguments, expected", [
    ({"from_account": "ACC-0001", "to_account": "ACC-0002", "amount": 5.0},
     "missing required argument 'memo'"),
    ({"from_account": "ACC-0001", "to_account": "ACC-0002", "amount": 5.0, "memo": "m",
      "currency": "EUR"}, "unknown argument 'currency'"),
    ({"from_account": "ACC-0001", "to_account": "ACC-0002", "amount": "5", "memo": "m"},
     "argument 'amount' must be number, got string '5'"),
    ({"from_account": 1, "to_account": "ACC-0002", "amount": 5.0, "memo": "m"},
     "argument 'from_account' must be string"),
])
def test_missing_extra_and_wrongly_typed_arguments(fresh: ToolsEnv, arguments, expected) -> None:
    text, term = call(fresh, "transfer_funds", **arguments)
    assert text.startswith("Error:") and expected in text and not term
    assert unchanged(fresh)


def test_wrong_type_for_integer_and_enum(fresh: ToolsEnv) -> None:
    text, _ = call(fresh, "place_order", customer="a@b.example", sku="SKU-100", quantity="5")
    assert "argument 'quantity' must be integer, got string '5'" in text
    text, _ = call(fresh, "ask_user", field="colour", question="?")
    assert "argument 'field' must be one of" in text
    assert unchanged(fresh)


def test_ten_megabyte_arguments_are_refused(fresh: ToolsEnv) -> None:
    big = "x" * 10_000_000
    text, term = call(fresh, "send_email", to="a@acme.example", subject="s", body=big)
    assert "Invalid action" in text and "characters; the limit is" in text and not term
    text, _ = call(fresh, "send_email", to="a@acme.example", subject="s", body="y" * 50_000)
    assert "argument 'body' is 50,000 characters; the limit is 4,000" in text
    assert unchanged(fresh)


def test_unicode_names_work_and_bad_text_is_refused(fresh: ToolsEnv) -> None:
    text, _ = call(fresh, "find_person", query="Zoë Ñúñez 张伟")
    assert text == "No person matches 'Zoë Ñúñez 张伟'."
    text, _ = call(fresh, "find_person", query="bad \udcff")
    assert "not valid text" in text
    text, _ = call(fresh, "send_email", to="zoë@acme.example", subject="s", body="b")
    assert text.startswith("Error: invalid address")
    assert unchanged(fresh)
    text, _ = call(fresh, "create_ticket", customer="orders@globex.example",
                   subject="Ünïcödé ✓ 件名", priority="low")
    assert text.startswith("Created TKT-")
    assert fresh.session is not None
    subjects = {t["subject"] for t in fresh.session.world.snapshot()["tickets"]}
    assert "Ünïcödé ✓ 件名" in subjects


def test_final_answer_without_a_tool_call_is_answered_not_ended(fresh: ToolsEnv) -> None:
    obs, _, term, trunc, info = fresh.step(Message(role="assistant", content="The answer is 42."))
    assert not term and not trunc and info["error"] == "no_tool_call"
    assert "no tool call found" in obs[0].content and "finish(answer)" in obs[0].content
    assert unchanged(fresh)


def test_repeated_identical_calls(fresh: ToolsEnv) -> None:
    call(fresh, "list_accounts")
    text, _ = call(fresh, "list_accounts")
    assert text.startswith("Error: repeated call: identical to call #1 and nothing has changed")
    assert fresh.task is not None and fresh.session is not None
    me = fresh.task.meta["user"]
    src = next(a for a in fresh.initial_state()["accounts"] if a["owner"] == me)
    dst = next(a for a in fresh.initial_state()["accounts"] if a["owner"] != me)
    args = {"from_account": src["number"], "to_account": dst["number"], "amount": 10.0,
            "memo": "x"}
    first, _ = call(fresh, "transfer_funds", **args)
    after_first = fresh.session.world.snapshot()
    again, _ = call(fresh, "transfer_funds", **args)
    assert first.startswith("Transferred") and "which already succeeded; not run again" in again
    assert fresh.session.world.snapshot() == after_first


def test_refused_writes_roll_back_completely(fresh: ToolsEnv) -> None:
    assert fresh.task is not None and fresh.session is not None
    me = fresh.task.meta["user"]
    mine = [a for a in fresh.initial_state()["accounts"] if a["owner"] == me]
    other = next(a for a in fresh.initial_state()["accounts"] if a["owner"] != me)
    cases = [
        ({"from_account": mine[0]["number"], "to_account": other["number"], "amount": 1e9,
          "memo": "m"}, "insufficient funds"),
        ({"from_account": other["number"], "to_account": mine[0]["number"], "amount": 1.0,
          "memo": "m"}, "permission denied"),
        ({"from_account": mine[0]["number"], "to_account": "ACC-9999", "amount": 1.0,
          "memo": "m"}, "not found"),
        ({"from_account": mine[0]["number"], "to_account": other["number"], "amount": 1.005,
          "memo": "m"}, "invalid amount"),
        ({"from_account": mine[0]["number"], "to_account": other["number"], "amount": 5.0,
          "memo": "m", "approval_id": "APR-000000"}, "not found"),
    ]
    for args, expected in cases:
        text, term = call(fresh, "transfer_funds", **args)
        assert expected in text and not term, text
        assert unchanged(fresh)
    text, _ = call(fresh, "place_order", customer="orders@globex.example", sku="SKU-100",
                   quantity=10_000)
    assert "insufficient stock" in text and unchanged(fresh)


def test_checker_bad_actions_leave_the_world_alone(env: ToolsEnv) -> None:
    from gymhub.envs.checker import bad_actions

    for label, action in bad_actions(env):
        env.reset(options={"task_id": "transfer-00"})
        obs, _, term, _, _ = env.step(action)
        assert obs and not term, label
        assert unchanged(env), label


def test_a_call_that_fails_after_writing_is_rolled_back(fresh: ToolsEnv, monkeypatch) -> None:
    """One call, one transaction: a failure after the first write leaves nothing behind."""
    from gymhub.envs.tools import actions
    from gymhub.errors import ToolError

    real = actions.ACTIONS["create_ticket"]

    def write_then_fail(ctx, **kwargs):
        real(ctx, **kwargs)
        assert ctx.count("tickets", actions._T["tickets"].c.subject == "half") == 1
        raise ToolError("conflict: simulated failure after the write")

    monkeypatch.setitem(actions.ACTIONS, "create_ticket", write_then_fail)
    text, _ = call(fresh, "create_ticket", customer="orders@globex.example", subject="half",
                   priority="low")
    assert "simulated failure" in text
    assert unchanged(fresh)


@pytest.mark.parametrize("name, arguments, expected", [
    ("place_order", {"customer": "a@b.example", "sku": "SKU-100", "quantity": 10**30},
     "insufficient stock"),
    ("schedule_meeting", {"title": "t", "attendees": ["x@acme.example"], "date": "2026-03-03",
                          "start": "10:00", "duration_minutes": 10**30}, "invalid duration"),
    ("transfer_funds", {"from_account": "ACC-0001", "to_account": "ACC-0002", "amount": 1e308,
                        "memo": "m"}, "Error:"),
    ("transfer_funds", {"from_account": "ACC-0001", "to_account": "ACC-0002",
                        "amount": float("nan"), "memo": "m"}, "Error:"),
    ("get_calendar", {"email": "x@acme.example", "date": "2026-02-30"}, "Error:"),
    ("schedule_meeting", {"title": "t", "attendees": [], "date": "2026-03-03", "start": "25:00",
                          "duration_minutes": 30}, "Error:"),
])
def test_extreme_values_are_tool_errors(fresh: ToolsEnv, name, arguments, expected) -> None:
    text, term = call(fresh, name, **arguments)
    assert text.startswith("Error:") and expected in text and not term
    assert unchanged(fresh)


def _play(env: ToolsEnv, task_id: str, program: list[dict[str, Any]]):
    env.reset(options={"task_id": task_id})
    info: dict[str, Any] = {}
    for step in program:
        msg = Message(role="assistant", content="", tool_calls=(
            ToolCall(id="c", name=step["name"], arguments=step["arguments"]),))
        obs, _, term, _, info = env.step(msg)
        if term:
            break
    return obs, info


def test_a_guessed_value_is_invented_in_any_spelling_the_tools_accept(env: ToolsEnv) -> None:
    task = next(t for t in env.tasks if t.id == "ask_date_time-00")
    program = [c for c in task.gold["program"]
               if not (c["name"] == "ask_user" and c["arguments"]["field"] == "date")]
    for spelling in ("20260304", "2026-W10-3"):
        guessed = [dict(c, arguments={**c["arguments"], "date": spelling})
                   if c["name"] == "schedule_meeting" else c for c in program]
        _, info = _play(env, task.id, guessed)
        assert info["score"].value == 0.0, spelling
        assert "invented" in str(info["score"].details), spelling


def test_free_text_with_separators_never_collides_into_a_database_error(env: ToolsEnv) -> None:
    to = "sami.eriksen@acme.example"
    sends = [{"name": "send_email", "arguments": {"to": to, "subject": s, "body": b}}
             for s, b in (("a|b", "c"), ("a", "b|c"))]
    env.reset(options={"task_id": "email-00"})
    for send in sends:
        text, term = call(env, send["name"], **send["arguments"])
        assert not term and not text.startswith("Error") and "INSERT" not in text, text


def test_long_made_up_names_are_quoted_back_shortened(fresh: ToolsEnv) -> None:
    text, _ = call(fresh, "x" * 150_000)
    assert len(text) < 2_000 and "..." in text
    text, _ = call(fresh, "find_person", **{"q" * 150_000: "a"})
    assert len(text) < 2_000 and "unknown argument" in text


def test_an_infinite_amount_is_refused(fresh: ToolsEnv) -> None:
    text, term = call(fresh, "request_approval", from_account="ACC-0021", to_account="ACC-0024",
                      amount=float("inf"))
    assert text.startswith("Error:") and "invalid amount" in text and not term
    assert unchanged(fresh)


def test_finishing_before_a_follow_up_is_due_hears_it_instead_of_ending(env: ToolsEnv) -> None:
    task = next(t for t in env.tasks if t.id == "followup-00")
    first, update, finish = task.gold["program"]
    env.reset(options={"task_id": task.id})
    both = Message(role="assistant", content="", tool_calls=(
        ToolCall(id="a", name=first["name"], arguments=first["arguments"]),
        ToolCall(id="b", name=finish["name"], arguments=finish["arguments"])))
    obs, _, term, _, _ = env.step(both)
    assert not term and "before you finish, the user adds" in str([m.content for m in obs])
    for step in (update, finish):
        msg = Message(role="assistant", content="", tool_calls=(
            ToolCall(id="c", name=step["name"], arguments=step["arguments"]),))
        obs, _, term, _, info = env.step(msg)
    assert term and info["score"].value == 1.0
    replayed = env.verify([m for m in env.history if m.role == "assistant"], task)
    assert replayed.value == 1.0


def test_a_rule_broken_and_then_undone_still_fails(env: ToolsEnv) -> None:
    env.reset(options={"task_id": "refuse_hours-00"})
    text, _ = call(env, "schedule_meeting", title="Roadmap chat",
                   attendees=["kai.ivanova@acme.example"], date="2026-03-07", start="10:00",
                   duration_minutes=30)
    meeting = text.split("MTG-")[1][:6]
    text, _ = call(env, "cancel_meeting", meeting_id=f"MTG-{meeting}")
    assert not text.startswith("Error"), text
    msg = Message(role="assistant", content="", tool_calls=(
        ToolCall(id="r", name="refuse", arguments={"reason": "Outside working hours."}),))
    *_, term, _, info = env.step(msg)
    assert term and info["score"].value == 0.0
    assert [v["rule"] for v in info["score"].details["policy"]["violations"]] == ["working_hours"]


def test_asking_for_everything_is_a_needless_question_not_a_free_pass(env: ToolsEnv) -> None:
    task = next(t for t in env.tasks if t.id == "ask_meeting-01")
    greedy = [{"name": "ask_user", "arguments": {"field": f, "question": f"The {f}?"}}
              for f in ("date", "time", "duration")]
    program = [task.gold["program"][0], *greedy,
               *[c for c in task.gold["program"][1:] if c["name"] != "ask_user"]]
    _, info = _play(env, task.id, program)
    rules = {v["rule"] for v in info["score"].details["policy"]["violations"]}
    assert info["score"].value == 0.0 and rules == {"needless_question"}
    _, info = _play(env, task.id, task.gold["program"])  # asking only for the time: 1.0
    assert info["score"].value == 1.0
