r"""Tasks of ``code-v0``: the built-in programming tasks and user task files.

A task is a function to write: a prompt, the function's ``entry_point`` (and signature),
public examples shown to the agent, hidden assert-style tests and a reference solution.
Built-in tasks live in ``data/tasks.jsonl`` (one JSON object a line, written for gymhub,
graded ``easy``/``medium``/``hard``); ``tests/envs/code`` checks that every reference
solution passes its examples and hidden tests and that trivial solutions fail.

User task files use the same shape, with fewer required fields::

    {"id": "add", "prompt": "Add two numbers.", "entry_point": "add",
     "tests": "assert add(1, 2) == 3\nassert add(-1, 1) == 0",
     "solution": "def add(a, b):\n    return a + b"}

Optional fields: ``examples`` (assert-style source shown to the agent), ``signature``
(derived from the solution when absent), ``difficulty`` and ``category``. Every problem
is a :class:`~gymhub.errors.TaskFileError` naming the line and the field.
"""

from __future__ import annotations

import ast
import difflib
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gymhub.envs.tasks import Task, iter_jsonl
from gymhub.errors import TaskFileError
from gymhub.verifiers.unit_tests import split_tests

__all__ = ["DIFFICULTIES", "CodeFixture", "builtin_tasks", "load_task_file", "parse_task"]

#: Difficulty tags of the built-in tasks, easiest first.
DIFFICULTIES = ("easy", "medium", "hard")
_REQUIRED = ("id", "prompt", "entry_point", "tests", "solution")
_OPTIONAL = ("examples", "signature", "difficulty", "category")


@dataclass(frozen=True)
class CodeFixture:
    """What the verifier and the tools need besides the prompt.

    Attributes:
        entry_point: the function the tests call.
        tests: hidden assert-style test source.
        examples: public assert-style examples (may be empty).
        signature: the ``def`` line shown to the agent.
    """

    entry_point: str
    tests: str
    examples: str = ""
    signature: str = ""


@functools.lru_cache(maxsize=1)
def _builtin() -> tuple[Task, ...]:
    ref = resources.files("gymhub.envs.code").joinpath("data/tasks.jsonl")
    with resources.as_file(ref) as path:
        return tuple(_load(path, builtin=True))


def builtin_tasks() -> list[Task]:
    """The built-in tasks, in file order (parsed once per process)."""
    return list(_builtin())


def load_task_file(path: str | Path) -> list[Task]:
    """Load a user JSONL task file.

    Raises:
        TaskFileError: the file is missing or malformed; the message names line and field.
    """
    return _load(Path(path), builtin=False)


def _load(path: Path, *, builtin: bool) -> list[Task]:
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for lineno, obj in iter_jsonl(path):
        task = parse_task(obj, str(path), lineno, builtin=builtin)
        if task.id in seen:
            raise TaskFileError(str(path), lineno,
                                f"field 'id': duplicate id {task.id!r} (first on line "
                                f"{seen[task.id]})")
        seen[task.id] = lineno
        tasks.append(task)
    if not tasks:
        raise TaskFileError(str(path), None, "the task file has no tasks")
    return tasks


def parse_task(obj: Mapping[str, Any], path: str = "<tasks>", lineno: int | None = None,
               *, builtin: bool = False) -> Task:
    """Validate one task object and turn it into a :class:`Task`.

    Built-in tasks must also carry ``examples``, ``signature``, ``difficulty`` and
    ``category``.

    Raises:
        TaskFileError: naming the field that is missing or wrong.
    """

    def fail(field: str, message: str) -> TaskFileError:
        return TaskFileError(path, lineno, f"field {field!r}: {message}")

    for key in obj:
        if key not in _REQUIRED + _OPTIONAL:
            hint = difflib.get_close_matches(str(key), _REQUIRED + _OPTIONAL, n=1)
            raise fail(str(key), "unknown field" + (f"; did you mean {hint[0]!r}?" if hint
                                                      else ""))
    for key in _REQUIRED + (_OPTIONAL if builtin else ()):
        if key not in obj:
            raise fail(key, "is required")
    for key in _REQUIRED + _OPTIONAL:
        if key in obj and not isinstance(obj[key], str):
            raise fail(key, f"must be a string, got {type(obj[key]).__name__}")
    task_id, entry_point = obj["id"].strip(), obj["entry_point"]
    if not task_id:
        raise fail("id", "must not be empty")
    if not obj["prompt"].strip():
        raise fail("prompt", "must not be empty")
    if not entry_point.isidentifier():
        raise fail("entry_point", f"must be a Python identifier, got {entry_point!r}")
    for key in ("tests", "examples"):
        if obj.get(key, "").strip() or key == "tests":
            try:
                split_tests(obj[key])
            except ValueError as exc:
                raise fail(key, str(exc)) from None
    signature = _signature(obj["solution"], entry_point)
    if signature is None:
        raise fail("solution", f"does not parse or does not define {entry_point}()")
    difficulty = obj.get("difficulty", "unknown")
    if builtin and difficulty not in DIFFICULTIES:
        raise fail("difficulty", f"must be one of {list(DIFFICULTIES)}")
    fixture = CodeFixture(entry_point, obj["tests"], obj.get("examples", ""),
                          obj.get("signature") or signature)
    meta = {"difficulty": difficulty, "category": obj.get("category", "user")}
    return Task(id=task_id, prompt=obj["prompt"], fixture=fixture, gold=obj["solution"],
                meta=meta)


def _signature(solution: str, entry_point: str) -> str | None:
    """``def entry_point(...):`` as written in the solution, or ``None`` if absent."""
    try:
        tree = ast.parse(solution)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry_point:
            stub = ast.FunctionDef(name=node.name, args=node.args, body=[ast.Expr(
                ast.Constant(...))], decorator_list=[], returns=node.returns, type_comment=None)
            return ast.unparse(ast.fix_missing_locations(stub)).replace("\n    ...", "")
    return None
