"""tools-v0's build-time invariants: gold 1.0, noop 0, refuse only on refusals, random ~0."""

from __future__ import annotations

import random
from collections import Counter

from gymhub.envs import check_env, make, run_episode
from gymhub.envs.tools.env import ToolsEnv
from gymhub.envs.tools.session import CONTROL
from gymhub.envs.tools.tasks import CATEGORIES


def play(env: ToolsEnv, task_id: str, kind: str, rng: random.Random | None = None):
    def policy(e, obs, info):
        if kind == "gold":
            return e.gold_action()
        if kind == "noop":
            return e.noop_action()
        if kind == "refuse":
            return e.refuse_action()
        assert rng is not None
        return e.random_action(rng)

    out = run_episode(env, policy, task_id=task_id)
    assert out.score is not None and out.score.ok, (task_id, out.score)
    return out


def test_task_set_shape(env: ToolsEnv) -> None:
    assert len(env.tasks) >= 300
    cats = Counter(t.meta["category"] for t in env.tasks)
    assert set(cats) == set(CATEGORIES) and min(cats.values()) >= 16
    assert all(2 <= t.meta["calls"] <= 8 for t in env.tasks)
    domain = [s.name for s in env.tool_specs() if s.name not in CONTROL
              and s.name != "transfer_to_human"]
    assert len(domain) >= 14
    assert any(t.gold["user"]["hidden"] for t in env.tasks)
    assert any(t.gold["user"]["followups"] for t in env.tasks)
    # neighbours differ in template, which the checker's wrong-answer replay relies on
    assert all(a.meta["template"] != b.meta["template"] for a, b in zip(env.tasks, env.tasks[1:], strict=False))


def test_gold_scores_one_on_every_task(env: ToolsEnv) -> None:
    for task in env.tasks:
        out = play(env, task.id, "gold")
        assert out.score.value == 1.0, (task.id, out.score.details)
        assert out.score.components == {"state": 1.0, "policy": 1.0, "answer": 1.0, "ending": 1.0}


def test_noop_scores_zero_on_every_task(env: ToolsEnv) -> None:
    for task in env.tasks:
        assert play(env, task.id, "noop").score.value == 0.0, task.id


def test_refuse_scores_one_exactly_on_refusal_tasks(env: ToolsEnv) -> None:
    for task in env.tasks:
        value = play(env, task.id, "refuse").score.value
        assert value == (1.0 if task.meta["category"] == "refuse" else 0.0), task.id


def test_random_valid_calls_stay_near_zero(env: ToolsEnv) -> None:
    rng = random.Random(0)
    values = [play(env, t.id, "random", rng).score.value for t in env.tasks]
    assert sum(values) / len(values) < 0.05
    assert all(v == 0.0 for v, t in zip(values, env.tasks, strict=True) if t.meta["category"] != "refuse")


def test_random_action_is_schema_valid(env: ToolsEnv) -> None:
    rng = random.Random(1)
    env.reset(seed=3)
    for _ in range(200):
        call = env.random_action(rng).tool_calls[0]
        env._tool_defs[call.name].validate(call.arguments)  # raises on a schema violation


def test_check_env_passes_on_all_gold_tasks() -> None:
    env = make("tools-v0")
    report = check_env(env, gold_tasks=None, raise_on_failure=False)
    assert report.ok, report.summary()


def test_replaying_a_transcript_gives_the_live_score(env: ToolsEnv) -> None:
    """verify() (offline rescoring) replays calls on a fresh world: same score as live."""
    rng = random.Random(7)
    for i, task in enumerate(env.tasks):
        kind = "gold" if i % 2 else "random"
        out = play(env, task.id, kind, rng)
        replayed = env.verify([m for m in out.transcript if m.role == "assistant"], task)
        assert replayed.ok
        if out.terminated:
            assert (replayed.value, replayed.components) == (out.score.value,
                                                             out.score.components), task.id
        else:
            assert replayed.value == 0.0 and "never end" in replayed.details["reason"]


def test_verify_accepts_plain_call_dicts_and_refuses_junk(env: ToolsEnv) -> None:
    task = env.tasks[0]
    assert env.verify(task.gold["program"], task).value == 1.0
    s = env.verify({"name": "finish"}, task)
    assert s.ok and s.value == 0.0 and "not a list" in s.details["reason"]


def test_skipping_the_question_fails_every_ask_task(env: ToolsEnv) -> None:
    """The obvious write without asking (the gold program minus ask_user) scores 0."""
    asks = [t for t in env.tasks if t.gold["user"]["hidden"]]
    assert len(asks) >= 32
    for task in asks:
        calls = [c for c in task.gold["program"] if c["name"] != "ask_user"]
        score = env.verify(calls, task)
        assert score.ok and score.value == 0.0, task.id
        assert {v["rule"] for v in score.details["policy"]["violations"]} == {"invented_value"}
