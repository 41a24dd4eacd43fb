"""tools-v0 tasks from files and objects: gold end states are computed, bad gold refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymhub.envs import run_episode
from gymhub.envs.tools.env import ToolsEnv
from gymhub.envs.tools.tasks import builtin_tasks, load_task_file
from gymhub.envs.tools.world import WorldRef, world_rows
from gymhub.errors import ConfigError, TaskFileError
from gymhub.types import Task


def email_task(**over) -> dict:
    people = world_rows(WorldRef(0))["people"]
    me, them = people[4], people[5]
    obj = {
        "id": "mine-1", "world": 0, "user": me["email"], "category": "custom",
        "prompt": f'Email {them["name"]}: subject "Hi", body "Hello."',
        "program": [{"name": "send_email", "arguments": {"to": them["email"], "subject": "Hi",
                                                         "body": "Hello."}},
                    {"name": "finish", "arguments": {"answer": "Sent."}}],
        "ending": "finish",
    }
    return {**obj, **over}


def write(tmp_path: Path, *objs: dict) -> Path:
    p = tmp_path / "tasks.jsonl"
    p.write_text("\n".join(json.dumps(o) for o in objs) + "\n")
    return p


def test_a_task_file_runs_with_computed_gold_state(tmp_path: Path) -> None:
    env = ToolsEnv(tasks=write(tmp_path, email_task()))
    try:
        (task,) = env.tasks
        assert len(task.gold["state"]["outbox"]) == 2  # the fixture's one mail + the gold one
        assert run_episode(env, task_id="mine-1").score.value == 1.0
    finally:
        env.close()


@pytest.mark.parametrize("over, message", [
    ({"program": [{"name": "send_email", "arguments": {"to": "nobody@acme.example",
                                                       "subject": "s", "body": "b"}}]},
     "fails at step 1"),
    ({"ending": "refuse"}, "ends with finish, not refuse"),
    ({"ending": "shrug"}, "'ending' must be one of"),
    ({"world": "zero"}, "field 'world' must be int"),
    ({"program": [{"name": "finish", "arguments": {"answer": "ok"}}]}, "do-nothing agent"),
])
def test_bad_task_lines_name_the_line_and_the_problem(tmp_path: Path, over, message) -> None:
    path = write(tmp_path, email_task(), email_task(id="mine-2", **over))
    with pytest.raises(TaskFileError) as err:
        load_task_file(path)
    assert f"{path}:2:" in str(err.value) and message in str(err.value)


def test_task_objects_without_gold_state_get_one() -> None:
    task = builtin_tasks()[0]
    bare = Task(id="copy", prompt=task.prompt, fixture=task.fixture,
                gold={k: v for k, v in task.gold.items() if k != "state"}, meta=dict(task.meta))
    env = ToolsEnv(tasks=[bare])
    try:
        assert bare.gold["state"] == task.gold["state"]
        assert run_episode(env, task_id="copy").score.value == 1.0
    finally:
        env.close()


def test_generation_is_deterministic_and_categories_filter() -> None:
    tasks = builtin_tasks()
    assert len({t.id for t in tasks}) == len(tasks)
    env = ToolsEnv(categories=["refuse", "handoff"])
    try:
        assert {t.meta["category"] for t in env.tasks} == {"refuse", "handoff"}
    finally:
        env.close()
    with pytest.raises(ConfigError):
        ToolsEnv(categories="nope")
