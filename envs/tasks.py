"""Tasks are data: what an episode asks, the fixture it runs on, and the gold answer."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from gymhub.errors import TaskFileError
from gymhub.types import Task

__all__ = ["Task", "filter_tasks", "iter_jsonl", "resolve_tasks"]


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file.

    Raises:
        TaskFileError: the file is missing, not UTF-8, or a line is not a JSON object.
    """
    p = Path(path)
    if not p.is_file():
        raise TaskFileError(str(p), None, "task file does not exist")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskFileError(str(p), None, f"task file is not UTF-8 ({exc.reason})") from exc
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskFileError(str(p), lineno, f"not valid JSON: {exc.msg}") from exc
        if not isinstance(obj, dict):
            raise TaskFileError(str(p), lineno, "each line must be a JSON object")
        yield lineno, obj


def resolve_tasks(
    tasks: str | Path | Sequence[Task] | None,
    builtin: Callable[[], list[Task]],
    load_file: Callable[[str | Path], list[Task]],
) -> list[Task]:
    """The task argument every built-in environment accepts: ``None``, a file, or tasks."""
    if tasks is None:
        return builtin()
    if isinstance(tasks, str | Path):
        return load_file(tasks)
    return list(tasks)


def filter_tasks(tasks: list[Task], key: str, wanted: str | Sequence[str] | None) -> list[Task]:
    """Keep tasks whose ``meta[key]`` is ``wanted`` (one value or several); ``None`` keeps all."""
    if wanted is None:
        return tasks
    allowed = {wanted} if isinstance(wanted, str) else set(wanted)
    return [t for t in tasks if t.meta.get(key) in allowed]
