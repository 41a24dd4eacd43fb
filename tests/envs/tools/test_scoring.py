"""tools-v0 scoring: each component fails for its own reason, and details say why."""

from __future__ import annotations

from typing import Any

from gymhub.envs.tools.env import ToolsEnv
from gymhub.envs.tools.scoring import check_answer
from gymhub.types import Message, Score, ToolCall


def act(env: ToolsEnv, name: str, **arguments: Any) -> list[Message]:
    msg = Message(role="assistant", content="",
                  tool_calls=(ToolCall(id="c", name=name, arguments=arguments),))
    obs, _, _, _, info = env.step(msg)
    env._last_info = info  # type: ignore[attr-defined]
    return obs


def gold_calls(env: ToolsEnv, task_id: str) -> list[dict[str, Any]]:
    return [dict(c) for c in env.task_by_id(task_id).gold["program"]]


def play(env: ToolsEnv, task_id: str, calls: list[dict[str, Any]]) -> Score:
    env.reset(options={"task_id": task_id})
    for c in calls:
        act(env, c["name"], **c["arguments"])
    score = env._last_info.get("score")  # type: ignore[attr-defined]
    assert isinstance(score, Score) and score.ok
    return score


def test_skipping_the_approval_breaks_policy_but_not_state(env: ToolsEnv) -> None:
    calls = gold_calls(env, "transfer_approval-00")
    names = [c["name"] for c in calls]
    assert names == ["list_accounts", "request_approval", "transfer_funds", "finish"]
    transfer = dict(calls[2]["arguments"])
    transfer.pop("approval_id")
    s = play(env, "transfer_approval-00", [calls[0], {"name": "transfer_funds",
                                                      "arguments": transfer}, calls[3]])
    assert s.value == 0.0 and s.components["policy"] == 0.0 and s.components["ending"] == 1.0
    rules = {v["rule"] for v in s.details["policy"]["violations"]}
    assert rules == {"approval_over_limit"}
    # the state diff names the missing approval row and the transfer's changed field
    assert [m["table"] for m in s.details["state"]["missing"]] == ["approvals"]
    (changed,) = s.details["state"]["changed"]
    assert changed["table"] == "transfers" and changed["fields"]["approval_id"]["got"] is None


def test_guessing_a_hidden_value_counts_as_invented(env: ToolsEnv) -> None:
    calls = gold_calls(env, "ask_transfer-00")
    assert calls[1]["name"] == "ask_user"
    s = play(env, "ask_transfer-00", [calls[0], calls[2], calls[3]])  # same write, no asking
    assert s.components["state"] == 1.0 and s.components["policy"] == 0.0 and s.value == 0.0
    (v,) = s.details["policy"]["violations"]
    assert v["rule"] == "invented_value" and v["slot"] == "amount" and v["argument"] == "amount"
    assert play(env, "ask_transfer-00", calls).value == 1.0


def test_ask_user_reveals_only_known_slots(env: ToolsEnv) -> None:
    env.reset(options={"task_id": "ask_meeting-00"})
    hidden = env.task.gold["user"]["hidden"]["time"]
    assert hidden in act(env, "ask_user", field="time", question="When?")[0].content
    assert "anything to add" in act(env, "ask_user", field="amount", question="How much?")[0].content


def test_collateral_change_fails_state_with_the_extra_row(env: ToolsEnv) -> None:
    calls = gold_calls(env, "email-00")
    extra = {"name": "send_email", "arguments": {"to": calls[1]["arguments"]["to"],
                                                 "subject": "Lunch?", "body": "Free today?"}}
    s = play(env, "email-00", [*calls[:2], extra, calls[2]])
    assert s.value == 0.0 and s.components == {"state": 0.0, "policy": 1.0, "answer": 1.0,
                                               "ending": 1.0}
    (row,) = s.details["state"]["extra"]
    assert row["table"] == "outbox" and row["key"]["subject"] == "Lunch?"


def test_changed_field_is_reported_gold_beside_got(env: ToolsEnv) -> None:
    calls = gold_calls(env, "order-00")
    wrong = {**calls[1], "arguments": {**calls[1]["arguments"],
                                       "quantity": calls[1]["arguments"]["quantity"] + 1}}
    s = play(env, "order-00", [calls[0], wrong, calls[2]])
    if s.details["state"].get("changed"):
        fields = {f for c in s.details["state"]["changed"] for f in c["fields"]}
        assert {"quantity", "stock"} <= fields
    else:  # not enough stock for one more: the write was refused, so the order is missing
        assert s.details["state"]["missing_rows"] >= 1
    assert s.value == 0.0


def test_meeting_outside_hours_breaks_policy(env: ToolsEnv) -> None:
    task = env.task_by_id("refuse_hours-00")
    env.reset(options={"task_id": task.id})
    other = act(env, "find_person", query=task.gold["program"][0]["arguments"]["query"])
    email = other[0].content.split("<")[1].split(">")[0]
    import re

    date, start = re.search(r"on (\S+) at (\d\d:\d\d)", task.prompt).groups()  # type: ignore[union-attr]
    act(env, "schedule_meeting", title="Late", attendees=[email], date=date, start=start,
        duration_minutes=30)
    act(env, "finish", answer="Booked.")
    s = env._last_info["score"]  # type: ignore[attr-defined]
    assert s.value == 0.0 and s.components["ending"] == 0.0
    assert [v["rule"] for v in s.details["policy"]["violations"]] == ["working_hours"]


def test_wrong_answers_and_wrong_endings(env: ToolsEnv) -> None:
    calls = gold_calls(env, "lookup_balance-00")
    gold_answer = calls[1]["arguments"]["answer"]
    s = play(env, "lookup_balance-00", [calls[0], {"name": "finish",
                                                   "arguments": {"answer": f"{gold_answer} or 12"}}])
    assert s.components["answer"] == 0.0 and s.details["answer"]["found"]
    s = play(env, "lookup_balance-00", [calls[0], {"name": "refuse", "arguments": {"reason": "no"}}])
    assert s.details["ending"] == {"expected": "finish", "got": "refuse"}


def test_typed_answers() -> None:
    num = {"type": "number", "value": 1250.0}
    assert check_answer(num, ("finish", "It is $1,250.00."))[0]
    assert not check_answer(num, ("finish", "1250 or 1380"))[0]
    assert not check_answer(num, ("finish", "12500"))[0]
    assert not check_answer(num, ("refuse", "1250"))[0]
    assert check_answer(num, ("finish", "ACC-0012 has 1250 as of 2026-03-02 09:00."))[0]
    assert check_answer({"type": "number", "value": 12}, ("finish", "12 units (SKU-107)."))[0]
    assert check_answer({"type": "number", "value": 12}, ("finish", "12, as you asked"))[0]
    assert not check_answer(num, ("finish", "-1250"))[0]
    ids = {"type": "ids", "value": ["TKT-501", "TKT-507"]}
    assert check_answer(ids, ("finish", "tkt-507 and TKT-501"))[0]
    assert not check_answer(ids, ("finish", "TKT-501"))[0]
    assert check_answer(None, None)[0]


def test_followup_arrives_after_the_first_turn(env: ToolsEnv) -> None:
    env.reset(options={"task_id": "followup-00"})
    obs = act(env, "list_tickets")
    assert obs[-1].role == "user" and "high priority" in obs[-1].content
    assert all(m.role == "tool" for m in act(env, "list_accounts"))


def test_episodes_are_isolated_and_ids_content_keyed(env: ToolsEnv) -> None:
    calls = gold_calls(env, "followup-00")
    env.reset(options={"task_id": "followup-00"})
    first = act(env, **{"name": calls[0]["name"], **calls[0]["arguments"]})[0].content
    env.reset(options={"task_id": "followup-00"})
    assert env.session is not None
    assert env.session.world.snapshot() == env.initial_state()  # the last episode left nothing
    assert act(env, **{"name": calls[0]["name"], **calls[0]["arguments"]})[0].content == first
    other = ToolsEnv(tasks=[env.task_by_id("followup-00")])
    try:
        other.reset()
        assert other.session is not None
        assert other.session.world.snapshot() == other.initial_state()
    finally:
        other.close()


def test_followup_still_comes_after_a_malformed_first_turn(env: ToolsEnv) -> None:
    env.reset(options={"task_id": "followup-00"})
    obs, *_ = env.step(Message(role="user", content="not an assistant"))
    assert "Invalid action" in obs[0].content
    obs = act(env, "list_accounts")
    assert obs[-1].role == "user" and "high priority" in obs[-1].content
    assert all(m.role == "tool" for m in act(env, "list_tickets"))


def test_truncation_keeps_the_diagnosis(env: ToolsEnv) -> None:
    short = ToolsEnv(tasks=[env.task_by_id("email-00")], max_turns=1)
    try:
        short.reset()
        _, reward, term, trunc, info = short.step(
            Message(role="assistant", content="", tool_calls=(
                ToolCall(id="c", name="list_accounts", arguments={}),)))
        s = info["score"]
        assert trunc and not term and reward == 0.0 and s.ok and s.value == 0.0
        assert s.details["reason"].startswith("truncated") and s.components["ending"] == 0.0
        assert s.details["state"]["missing"][0]["table"] == "outbox"
    finally:
        short.close()
