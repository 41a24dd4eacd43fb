"""Scoring a reference policy on an environment's tasks (``gymhub eval --policy``).

One episode per task, in task order, each reset with the same seed and picked by id,
so a run is reproducible and its stored trajectories replay exactly. The mean leaves
errored episodes out (an error is the environment's or the verifier's failure, not the
policy's) and counts them apart, overall and per ``meta["category"]``.

What counts as a failure depends on the policy: the gold policy must score 1.0 on every
task, so any lower score fails the run; the other policies are measurements, and only
errors fail them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gymhub.errors import ConfigError

from .core import TextEnv
from .policies import policy_named
from .rollout import EpisodeOutcome, run_episode
from .tasks import Task

__all__ = ["EvalReport", "evaluate_policy"]

#: Failures listed in a report (the saved trajectories hold every episode).
MAX_LISTED = 20


@dataclass
class EvalReport:
    """The episodes of one evaluation and their summary.

    Attributes:
        env: the environment id.
        policy: the policy's name.
        seed: the seed every episode was reset with.
        outcomes: each task with its episode, in task order.
        seconds: wall time of the episodes.
    """

    env: str
    policy: str
    seed: int | None
    outcomes: list[tuple[Task, EpisodeOutcome]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def errors(self) -> int:
        """Episodes without a valid score (no score, or the verifier could not judge)."""
        return sum(1 for _, out in self.outcomes if out.value is None)

    @property
    def mean(self) -> float:
        """Mean value of the scored episodes (0.0 when none)."""
        return _mean([v for _, out in self.outcomes if (v := out.value) is not None])

    def failures(self) -> list[dict[str, Any]]:
        """Episodes that fail this policy's expectation (see the module docstring)."""
        out: list[dict[str, Any]] = []
        for task, episode in self.outcomes:
            score = episode.score
            if score is None or not score.ok:
                out.append({"task_id": task.id,
                            "error": score.error if score is not None else "no score"})
            elif self.policy == "gold" and score.value < 1.0 - 1e-9:
                out.append({"task_id": task.id, "score": score.value, "details": score.details})
        return out

    def by_category(self) -> dict[str, dict[str, Any]]:
        """Episodes, mean and errors per ``meta["category"]`` (empty when no task has one)."""
        groups: dict[str, list[EpisodeOutcome]] = {}
        for task, episode in self.outcomes:
            category = task.meta.get("category")
            if category is not None:
                groups.setdefault(str(category), []).append(episode)
        return {
            name: {
                "episodes": len(eps),
                "mean_score": _mean([v for e in eps if (v := e.value) is not None]),
                "errors": sum(1 for e in eps if e.value is None),
            }
            for name, eps in sorted(groups.items())
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (what ``gymhub eval --json`` prints)."""
        n = len(self.outcomes)
        failures = self.failures()
        return {
            "env": self.env,
            "policy": self.policy,
            "seed": self.seed,
            "episodes": n,
            "scored": n - self.errors,
            "mean_score": self.mean,
            "errors": self.errors,
            "passed": sum(1 for _, o in self.outcomes if (o.value or 0.0) >= 1.0 - 1e-9),
            "by_category": self.by_category(),
            "episodes_per_s": n / self.seconds if self.seconds > 0 else 0.0,
            "seconds": self.seconds,
            "failed": len(failures),
            "failures": failures[:MAX_LISTED],
        }


def evaluate_policy(
    env: TextEnv,
    policy: str,
    *,
    env_id: str = "",
    seed: int | None = 0,
    tasks: int | Sequence[str] | None = None,
    on_episode: Callable[[Task, EpisodeOutcome], None] | None = None,
) -> EvalReport:
    """Play one episode of the named reference policy per task.

    Args:
        env: the environment (closed by the caller).
        policy: ``gold``, ``noop``, ``refuse`` or ``random``.
        env_id: its id, for the report.
        seed: the seed every episode is reset with, and the random policy's seed.
        tasks: the first N tasks, or these task ids; all tasks when ``None``.
        on_episode: called as each episode ends (``--save`` writes it there).

    Raises:
        ConfigError: an unknown policy.
        TaskNotFound: an unknown task id.
    """
    play = policy_named(policy, seed or 0)
    chosen = _choose(env, tasks)
    report = EvalReport(env=env_id or type(env).__name__, policy=policy, seed=seed)
    t0 = time.perf_counter()
    for task in chosen:
        outcome = run_episode(env, play, seed=seed, task_id=task.id)
        report.outcomes.append((task, outcome))
        if on_episode is not None:
            on_episode(task, outcome)
    report.seconds = time.perf_counter() - t0
    return report


def _choose(env: TextEnv, tasks: int | Sequence[str] | None) -> list[Task]:
    if tasks is None:
        return list(env.tasks)
    if isinstance(tasks, int):
        if tasks < 1:
            raise ConfigError(f"the number of tasks must be at least 1, got {tasks}")
        return list(env.tasks[:tasks])
    return [env.task_by_id(t) for t in tasks]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0

