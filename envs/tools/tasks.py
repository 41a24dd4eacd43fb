"""The seeded task generator of ``tools-v0``.

Every template (:mod:`.templates`) yields a fixed number of tasks; each task's gold
end state is never written by hand: :func:`builtin_tasks` runs every gold program on a
fresh copy of its world, through the same code the agent's calls go through, and
refuses to ship a task whose program errors, ends the wrong way, or leaves a
"do-nothing" agent right (a write task whose gold changes nothing, a question without
an answer). Tasks are ordered round-robin over templates, so neighbours always differ
in kind.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any

from gymhub.errors import ConfigError, TaskFileError, ToolError
from gymhub.types import Task

from ..tasks import iter_jsonl
from .drafts import WORLDS, Draft, Template, W
from .session import Session
from .templates import CATEGORIES, TEMPLATES
from .user import UserScript
from .world import WorldRef

__all__ = ["CATEGORIES", "TEMPLATES", "attach_gold_states", "build_task", "builtin_tasks",
           "load_task_file", "make_task", "run_gold"]


@functools.lru_cache(maxsize=WORLDS)
def _world(seed: int) -> W:
    return W(WorldRef(seed))


def make_task(template: Template, category: str, index: int) -> Task:
    """Draw task ``index`` of ``template`` (deterministic), without its gold end state."""
    name = template.__name__
    for attempt in range(200):
        rng = random.Random(f"gymhub-tools/task/{name}/{index}/{attempt}")
        w = _world((index + attempt) % WORLDS)
        draft = template(rng, w)
        if draft is not None:
            break
    else:
        raise ConfigError(f"template {name} found no task for index {index}")
    for value in draft.hidden.values():
        if str(value) in draft.prompt:
            raise ConfigError(f"{name}/{index}: the hidden value {value!r} is in the prompt")
    return build_task(f"{name}-{index:02d}", draft, w.ref, category, name)


def build_task(task_id: str, draft: Draft, ref: WorldRef, category: str,
               template: str = "") -> Task:
    """A task from a draft, without its gold end state (see :func:`attach_gold_states`)."""
    script = UserScript(draft.hidden, tuple(draft.followups))
    return Task(
        id=task_id,
        prompt=draft.prompt,
        fixture=ref,
        gold={"program": draft.program, "ending": draft.ending, "answer": draft.answer,
              "user": script.to_dict()},
        meta={"category": category, "template": template, "user": draft.user,
              "now": ref.now.strftime("%Y-%m-%d %H:%M (%A)"), "calls": len(draft.program),
              "world": ref.seed},
    )


def run_gold(task: Task, session: Session) -> None:
    """Play ``task``'s gold program on ``session``; a failing step is a generator bug.

    Raises:
        ConfigError: a step was refused or the program ended the wrong way.
    """
    for i, call in enumerate(task.gold["program"]):
        session.user.after_turn(i)  # one call a turn: what the user said by now, as live
        try:
            session.run(call["name"], call["arguments"])
        except ToolError as exc:
            raise ConfigError(f"gold program of {task.id} fails at step {i + 1} "
                              f"({call['name']}): {exc}") from exc
    got = session.ending[0] if session.ending else None
    if got != task.gold["ending"]:
        raise ConfigError(f"gold program of {task.id} ends with {got}, not "
                          f"{task.gold['ending']}")


def attach_gold_states(tasks: list[Task]) -> None:
    """Run each task's gold program on a fresh world and store the end state in its gold.

    Raises:
        ConfigError: a program fails, ends the wrong way, or a do-nothing agent would
            be right (no change, no question, ``finish`` expected).
    """
    from .scoring import initial_snapshot
    from .world import World

    world = World()
    bases: dict[WorldRef, dict[str, Any]] = {}
    try:
        for task in tasks:
            session = Session(world, task)
            run_gold(task, session)
            assert isinstance(task.fixture, WorldRef)
            if task.fixture not in bases:
                bases[task.fixture] = initial_snapshot(task.fixture)
            before = bases[task.fixture]
            after = world.snapshot()
            # unchanged tables share the per-world initial lists: 368 gold states stay small
            state = {t: (before[t] if rows == before[t] else rows) for t, rows in after.items()}
            if task.gold["answer"] is None and task.gold["ending"] == "finish" and \
                    state == before:
                raise ConfigError(f"{task.id}: a do-nothing agent would be right (no change, "
                                  "no question)")
            task.gold["state"] = state
    finally:
        world.close()


@functools.lru_cache(maxsize=1)
def builtin_tasks() -> tuple[Task, ...]:
    """All built-in tasks with their gold end states, round-robin over templates."""
    drafts = [[make_task(t, cat, i) for i in range(n)] for t, cat, n in TEMPLATES]
    ordered = [row[i] for i in range(max(len(r) for r in drafts)) for row in drafts
               if i < len(row)]
    attach_gold_states(ordered)
    return tuple(ordered)


_ENDINGS = ("finish", "refuse", "handoff")


def load_task_file(path: str | Path) -> list[Task]:
    """Tasks from a JSONL file, one object a line, their gold end states computed.

    Fields: ``id``, ``prompt``, ``world`` (a world seed), ``user`` (the requester's
    email), ``program`` (``[{"name", "arguments"}]``, ending included), ``ending``
    (``finish``/``refuse``/``handoff``); optional ``answer`` (``{"type": "number" |
    "ids", "value"}``), ``hidden`` (slot -> value), ``followups`` (``[[turn, text]]``),
    ``category``.

    Raises:
        TaskFileError: a line is malformed, or its gold program does not run.
    """
    tasks = []
    for line, obj in iter_jsonl(path):
        try:
            draft = Draft(prompt=_field(obj, "prompt", str), user=_field(obj, "user", str),
                          program=_field(obj, "program", list), ending=_field(obj, "ending", str),
                          answer=obj.get("answer"), hidden=dict(obj.get("hidden") or {}),
                          followups=[(int(a), str(t)) for a, t in obj.get("followups") or ()])
            if draft.ending not in _ENDINGS:
                raise ValueError(f"'ending' must be one of {list(_ENDINGS)}")
            task = build_task(_field(obj, "id", str), draft, WorldRef(_field(obj, "world", int)),
                              str(obj.get("category") or "custom"))
            attach_gold_states([task])
        except (ValueError, TypeError, ConfigError) as exc:
            raise TaskFileError(str(path), line, str(exc)) from exc
        tasks.append(task)
    return tasks


def _field(obj: dict[str, Any], name: str, kind: type) -> Any:
    value = obj.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"field {name!r} must be {kind.__name__}, got {value!r}")
    return value
