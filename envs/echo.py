"""``echo-v0``: the smallest real environment, for protocol tests and server benchmarks.

The agent is shown a word and must submit it back, optionally after ``look``-ing at it
again. It exercises every part of the contract (tools, validation, a compiled
verifier, the terminal score) at almost no cost, so benchmarks of the server measure
the server, not the environment.
"""

from __future__ import annotations

import functools
from typing import Any

from gymhub.types import Message, Score, ToolCall
from gymhub.verifiers import compile as compile_verifier

from .core import VerifierCase
from .tasks import Task
from .tools import Final, ToolEnv, tool

__all__ = ["EchoEnv"]

_WORDS = [
    "apple",
    "river",
    "stone",
    "cloud",
    "ember",
    "maple",
    "orbit",
    "quartz",
    "tulip",
    "zephyr",
]


def echo_tasks(n: int = 100) -> list[Task]:
    """``n`` deterministic tasks: echo a word-number pair."""
    return list(_echo_tasks(n))


@functools.cache
def _echo_tasks(n: int) -> tuple[Task, ...]:
    # built once per size: a rollout makes an environment per episode, and building
    # 100 tasks was most of what making one cost (~0.5 ms, on the rollout's critical path)
    return tuple(
        Task(
            id=f"echo-{i:04d}",
            prompt=f"{_WORDS[i % len(_WORDS)]}-{i}",
            gold=f"{_WORDS[i % len(_WORDS)]}-{i}",
            meta={"difficulty": "easy"},
        )
        for i in range(n)
    )


class EchoEnv(ToolEnv):
    """Submit the word you were shown.

    Args:
        n_tasks: size of the task set.
        max_turns: turn budget.
        render_mode: ``"ansi"`` or ``None``.
    """

    def __init__(self, n_tasks: int = 100, max_turns: int = 4, render_mode: str | None = None):
        super().__init__(echo_tasks(n_tasks), max_turns=max_turns, render_mode=render_mode)
        self.verifier = compile_verifier({"type": "exact_match"}, name="echo")

    def _start(self, task: Task) -> tuple[list[Message], dict[str, Any]]:
        return [
            Message(role="system", content="Repeat the user's word with the submit tool."),
            Message(role="user", content=task.prompt),
        ], {"verifier": self.verifier.id}

    @tool
    def look(self) -> str:
        """Show the word again."""
        assert self.task is not None
        return self.task.prompt

    @tool
    def submit(self, answer: str) -> Final:
        """Submit your answer and end the episode.

        Args:
            answer: the word, exactly as shown.
        """
        assert self.task is not None
        score = self.verify(answer, self.task)
        return Final(f"Submitted. Score: {score.value:g}", score)

    def verify(self, submission: Any, task: Task) -> Score:
        """Exact match against the word."""
        return self.verifier(submission, task)

    def gold_action(self) -> Message:
        """Submit the word."""
        assert self.task is not None
        call = ToolCall(id="gold", name="submit", arguments={"answer": self.task.gold})
        return Message(role="assistant", content="", tool_calls=(call,))

    def verifier_cases(self, task: Task) -> list[VerifierCase]:
        """The word passes; another word fails; a non-string is malformed."""
        return [
            VerifierCase(task.gold, "pass"),
            VerifierCase(f"{task.gold}!", "fail"),
            VerifierCase(123, "malformed"),
        ]
