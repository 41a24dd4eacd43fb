"""``coin-v0``, for the multi-process tests: two turns, then a coin flip on the answer's length.

The test copies this file next to a ``.dist-info`` that advertises it in the
``gymhub.envs`` entry-point group, so the processes ``gymhub train --nproc 2`` starts find
it the way they find any installed environment. A random tiny model's answers score 0
or 1 at random, so every group has reward variance and every step a real update.
"""

from __future__ import annotations

from gymhub.envs import TextEnv
from gymhub.envs.tasks import Task
from gymhub.types import Message, Score, StepResult


class CoinEnv(TextEnv):
    """Turn 1 is answered with "again"; turn 2 scores 1 when the answer's length is odd."""

    def __init__(self) -> None:
        super().__init__([Task(id=f"c{i}", prompt=f"word {i}") for i in range(8)], max_turns=2)

    def _start(self, task):
        return [Message(role="user", content=task.prompt)], {}

    def _step(self, action):
        if self.turn == 0:
            return StepResult([Message(role="user", content="again")], 0.0, False, False, {})
        score = Score(value=float(len(action.content) % 2))
        return StepResult([Message(role="user", content="ok")], 0.0, True, False, {"score": score})

    def gold_action(self):
        return Message(role="assistant", content="x")
