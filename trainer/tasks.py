"""Which tasks a run trains and evaluates on, and the order it draws them in.

:func:`select_tasks` filters an environment's tasks on their metadata and splits off a
held-out set; :class:`TaskSampler` draws training tasks in a seeded, epoch-wise,
resumable order.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TaskSampler", "select_tasks"]


@dataclass
class TaskSampler:
    """Seeded, epoch-wise shuffled task order with a resumable position."""

    tasks: list[tuple[str, str]]
    seed: int
    epoch: int = 0
    position: int = 0
    _order: list[int] = field(default_factory=list, repr=False)

    def _shuffle(self) -> None:
        self._order = list(range(len(self.tasks)))
        random.Random(self.seed * 7919 + self.epoch).shuffle(self._order)

    def next(self, n: int) -> list[tuple[str, str]]:
        """The next ``n`` tasks, starting a new epoch when one runs out."""
        if not self.tasks:
            raise ValueError("no training tasks")
        if not self._order:
            self._shuffle()
        out = []
        for _ in range(n):
            if self.position >= len(self._order):
                self.epoch, self.position = self.epoch + 1, 0
                self._shuffle()
            out.append(self.tasks[self._order[self.position]])
            self.position += 1
        return out

    def state(self) -> dict[str, int]:
        """What a checkpoint needs."""
        return {"epoch": self.epoch, "position": self.position}

    def restore(self, state: dict[str, int]) -> None:
        """Continue from a checkpointed position."""
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._shuffle()


async def select_tasks(
    backend: Any,
    env_ids: list[str],
    task_filter: dict[str, str] | None = None,
    eval_tasks: int = 0,
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Training and held-out ``(env_id, task_id)`` lists.

    Tasks are first filtered on their ``meta`` (``task_filter``: key -> comma-separated
    allowed values; needs a backend with ``tasks()``). Then, per environment, the
    ``eval_tasks`` tasks whose SHA-256 of ``"env/task_id"`` sorts first are held out:
    deterministic, balanced across whatever order the environment lists its tasks in
    (the last N of an ordered list would all be one category), and never trained on.

    Raises:
        ValueError: the filter needs task metadata the backend cannot give, or it
            leaves no training task.
    """
    wanted = {k: {v.strip() for v in vals.split(",")} for k, vals in (task_filter or {}).items()}
    train: list[tuple[str, str]] = []
    held: list[tuple[str, str]] = []
    for env in env_ids:
        if wanted:
            lister = getattr(backend, "tasks", None)
            if lister is None:
                raise ValueError("task_filter needs a backend that lists task metadata")
            rows = await lister(env)
            ids = [
                str(r["id"])
                for r in rows
                if all(str((r.get("meta") or {}).get(k)) in vs for k, vs in wanted.items())
            ]
        else:
            ids = await backend.task_ids(env)
        ranked = sorted(ids, key=lambda t: hashlib.sha256(f"{env}/{t}".encode()).hexdigest())
        out = set(ranked[:eval_tasks])
        train += [(env, t) for t in ids if t not in out]
        held += [(env, t) for t in ranked[:eval_tasks]]
    if not train:
        raise ValueError(f"no training tasks left in {env_ids} after filtering and hold-out")
    return train, held
