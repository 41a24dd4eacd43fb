"""code-v0 tasks: the built-in set is sound, and user task files fail loudly, by line and field."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest

from gymhub.envs import make, run_episode
from gymhub.envs.code.tasks import CodeFixture, builtin_tasks, load_task_file
from gymhub.errors import TaskFileError
from gymhub.sandbox import available_backends, shared_sandbox
from gymhub.verifiers import unit_tests as ut

needs_sandbox = pytest.mark.skipif(not available_backends(), reason="no sandbox backend here")


def fixture(task: Any) -> CodeFixture:
    assert isinstance(task.fixture, CodeFixture)
    return task.fixture


def test_builtin_tasks_are_many_graded_and_complete() -> None:
    tasks = builtin_tasks()
    assert len(tasks) >= 80
    assert len({t.id for t in tasks}) == len(tasks)
    by_level = collections.Counter(t.meta["difficulty"] for t in tasks)
    assert set(by_level) == {"easy", "medium", "hard"} and min(by_level.values()) >= 15
    assert len({t.meta["category"] for t in tasks}) >= 6
    for t in tasks:
        fx = fixture(t)
        assert fx.signature.startswith(f"def {fx.entry_point}(")
        assert fx.examples.strip() and t.gold
        cases = [s for s in ut.split_tests(fx.tests) if s.kind == "case"]
        assert len(cases) >= 4, t.id
        assert fx.tests not in t.prompt


@needs_sandbox
def test_every_reference_passes_its_examples_and_hidden_tests() -> None:
    tasks = builtin_tasks()
    jobs = [ut.Job(t.gold, fixture(t).entry_point,
                   ut.split_tests(fixture(t).examples + "\n" + fixture(t).tests)) for t in tasks]
    runs = ut.run_suites(shared_sandbox(None), jobs, timeout_s=5.0)
    bad = {t.id: [o for o in r.outcomes if o.status != "passed"]
           for t, r in zip(tasks, runs, strict=True) if r.passed != len(r.outcomes)}
    assert not bad


@needs_sandbox
@pytest.mark.parametrize("body", ["return None", "return args[0] if args else None"])
def test_trivially_wrong_solutions_fail_a_hidden_test_of_every_task(body: str) -> None:
    tasks = builtin_tasks()
    jobs = [ut.Job(f"def {fixture(t).entry_point}(*args, **kwargs):\n    {body}\n",
                   fixture(t).entry_point, ut.split_tests(fixture(t).tests)) for t in tasks]
    runs = ut.run_suites(shared_sandbox(None), jobs, timeout_s=2.0)
    assert all(r.error is None for r in runs)
    fooled = [t.id for t, r in zip(tasks, runs, strict=True) if r.passed == len(r.outcomes)]
    assert not fooled


# ------------------------------------------------------------------------ user task files
GOOD = {"id": "add", "prompt": "Add two numbers.", "entry_point": "add",
        "tests": "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n",
        "solution": "def add(a, b):\n    return a + b\n"}


def write(tmp_path: Path, *rows: Any) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_user_task_file_loads_with_defaults(tmp_path: Path) -> None:
    tasks = load_task_file(write(tmp_path, GOOD, {**GOOD, "id": "add2", "examples":
                                                  "assert add(0, 0) == 0", "difficulty": "easy"}))
    assert [t.id for t in tasks] == ["add", "add2"]
    assert fixture(tasks[0]).signature == "def add(a, b):"
    assert tasks[0].meta == {"difficulty": "unknown", "category": "user"}
    assert fixture(tasks[1]).examples.startswith("assert")


@needs_sandbox
def test_make_with_a_user_task_file_plays_gold(tmp_path: Path) -> None:
    env = make("code-v0", tasks=str(write(tmp_path, GOOD)))
    out = run_episode(env, task_id="add")
    assert out.score is not None and out.score.value == 1.0
    env.close()


@pytest.mark.parametrize(("row", "field"), [
    ({k: v for k, v in GOOD.items() if k != "tests"}, "tests"),
    ({**GOOD, "id": ""}, "id"),
    ({**GOOD, "prompt": 5}, "prompt"),
    ({**GOOD, "entry_point": "add two"}, "entry_point"),
    ({**GOOD, "tests": "assert add(1,"}, "tests"),
    ({**GOOD, "tests": "x = 1"}, "tests"),
    ({**GOOD, "examples": "assert ("}, "examples"),
    ({**GOOD, "solution": "def plus(a, b): return a + b"}, "solution"),
    ({**GOOD, "solution": "def add(a, b) return"}, "solution"),
    ({**GOOD, "test": "assert True"}, "test"),
])
def test_malformed_rows_name_line_and_field(tmp_path: Path, row: dict[str, Any],
                                            field: str) -> None:
    path = write(tmp_path, {**GOOD, "id": "first"}, row)
    with pytest.raises(TaskFileError) as info:
        load_task_file(path)
    assert info.value.line == 2
    assert f"field {field!r}" in str(info.value)


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError, match="duplicate id"):
        load_task_file(write(tmp_path, GOOD, GOOD))
    with pytest.raises(TaskFileError, match="not valid JSON") as info:
        load_task_file(write(tmp_path, GOOD, "{oops"))
    assert info.value.line == 2
    with pytest.raises(TaskFileError, match="no tasks"):
        load_task_file(write(tmp_path, ""))
    with pytest.raises(TaskFileError, match="does not exist"):
        load_task_file(tmp_path / "missing.jsonl")
    with pytest.raises(TaskFileError, match="field 'test': unknown field; did you mean 'tests'"):
        load_task_file(write(tmp_path, {**GOOD, "test": "assert True"}))
