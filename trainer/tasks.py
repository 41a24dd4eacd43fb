"""The order in which training tasks are drawn: seeded, epoch by epoch, resumable."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["TaskSampler"]


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
