"""In-process episodes with a scripted policy: the cheapest end-to-end check of an env.

The learner has its own token-level rollout; this one works on messages and serves
``gymhub eval --policy gold``, ``check_env`` and the benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gymhub.types import Message, Score

from .core import TextEnv

__all__ = ["EpisodeOutcome", "Policy", "gold_policy", "run_episode"]

#: A policy sees the environment, the messages of the last turn and the info dict.
Policy = Callable[[TextEnv, list[Message], dict[str, Any]], Any]


def gold_policy(env: TextEnv, observation: list[Message], info: dict[str, Any]) -> Message:
    """The environment's reference solution."""
    return env.gold_action()


@dataclass
class EpisodeOutcome:
    """How one episode ended.

    Attributes:
        task_id: the task played.
        score: the terminal score (``None`` if the policy stopped early).
        turns: steps taken.
        terminated: ended by the agent (submit or final answer).
        truncated: ended by the turn budget.
        transcript: every message of the episode.
    """

    task_id: str
    score: Score | None
    turns: int
    terminated: bool
    truncated: bool
    transcript: list[Message] = field(default_factory=list)

    @property
    def value(self) -> float | None:
        """The score's value, or ``None`` when there is none or the verifier could not judge.

        Never 0.0 for an error: an unjudged episode is not a failed one.
        """
        return self.score.value if self.score is not None and self.score.ok else None


def run_episode(
    env: TextEnv,
    policy: Policy = gold_policy,
    *,
    seed: int | None = None,
    task_id: str | None = None,
) -> EpisodeOutcome:
    """Play one episode to its end."""
    options = {"task_id": task_id} if task_id is not None else None
    observation, info = env.reset(seed=seed, options=options)
    tid = str(info["task_id"])
    terminated = truncated = False
    turns = 0
    while not (terminated or truncated):
        action = policy(env, observation, info)
        observation, _, terminated, truncated, info = env.step(action)
        turns += 1
    score = info.get("score")
    return EpisodeOutcome(
        task_id=tid,
        score=score if isinstance(score, Score) else None,
        turns=turns,
        terminated=terminated,
        truncated=truncated,
        transcript=list(env.history),
    )
