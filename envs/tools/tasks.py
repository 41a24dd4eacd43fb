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
from typing import Any

from gymhub.errors import ConfigError, ToolError
from gymhub.types import Task

from .drafts import WORLDS, Template, W
from .session import Session
from .templates import CATEGORIES, TEMPLATES
from .user import UserScript
from .world import WorldRef

__all__ = ["CATEGORIES", "TEMPLATES", "builtin_tasks", "make_task", "run_gold"]


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
    script = UserScript(draft.hidden, tuple(draft.followups))
    return Task(
        id=f"{name}-{index:02d}",
        prompt=draft.prompt,
        fixture=w.ref,
        gold={"program": draft.program, "ending": draft.ending, "answer": draft.answer,
              "user": script.to_dict()},
        meta={"category": category, "template": name, "user": draft.user,
              "now": w.now.strftime("%Y-%m-%d %H:%M (%A)"), "calls": len(draft.program),
              "world": w.ref.seed},
    )


def run_gold(task: Task, session: Session) -> None:
    """Play ``task``'s gold program on ``session``; a failing step is a generator bug.

    Raises:
        ConfigError: a step was refused or the program ended the wrong way.
    """
    for i, call in enumerate(task.gold["program"]):
        try:
            session.run(call["name"], call["arguments"])
        except ToolError as exc:
            raise ConfigError(f"gold program of {task.id} fails at step {i + 1} "
                              f"({call['name']}): {exc}") from exc
    got = session.ending[0] if session.ending else None
    if got != task.gold["ending"]:
        raise ConfigError(f"gold program of {task.id} ends with {got}, not "
                          f"{task.gold['ending']}")


@functools.lru_cache(maxsize=1)
def builtin_tasks() -> tuple[Task, ...]:
    """All built-in tasks with their gold end states, round-robin over templates."""
    from .scoring import initial_snapshot
    from .world import World

    drafts = [[make_task(t, cat, i) for i in range(n)] for t, cat, n in TEMPLATES]
    ordered = [row[i] for i in range(max(len(r) for r in drafts)) for row in drafts
               if i < len(row)]
    world = World()
    bases: dict[WorldRef, dict[str, Any]] = {}
    try:
        for task in ordered:
            session = Session(world, task)
            run_gold(task, session)
            assert isinstance(task.fixture, WorldRef)
            before = bases.setdefault(task.fixture, initial_snapshot(task.fixture))
            after = world.snapshot()
            # share unchanged tables with the cached initial snapshot's layout
            state = {t: (before[t] if rows == before[t] else rows) for t, rows in after.items()}
            if task.gold["answer"] is None and task.gold["ending"] == "finish" and \
                    state == before:
                raise ConfigError(f"{task.id}: a do-nothing agent would be right (no change, "
                                  "no question)")
            task.gold["state"] = state
    finally:
        world.close()
    return tuple(ordered)
