"""Reference policies: what an environment's score must say about agents we understand.

* ``gold`` plays the environment's reference solution and must score 1.0 everywhere.
* ``noop`` ends each episode at once having done nothing; it must score 0 (in 23 of
  tau2-bench's 50 airline tasks it scored 1.0, because the goal state was the start
  state). ``check_env`` fails an environment where it passes a task gold passes.
* ``refuse`` declines every task; it should pass only tasks that must be refused.
* ``random`` makes schema-valid calls of random tools; it should stay near 0.

Each policy asks the environment (:meth:`~gymhub.envs.TextEnv.noop_action` and its
siblings), so an environment with its own way of ending episodes says what doing
nothing means there. The random policy draws every action from a generator seeded by
``(seed, task id, turn)``: an episode's actions do not depend on which other tasks ran
before it or in what order, so ``--tasks 10`` replays the first ten episodes of a full
run exactly.
"""

from __future__ import annotations

import random
from typing import Any

from gymhub.errors import ConfigError
from gymhub.types import Message

from .core import TextEnv
from .rollout import Policy, gold_policy

__all__ = [
    "POLICIES",
    "gold_policy",
    "noop_policy",
    "policy_named",
    "random_policy",
    "refuse_policy",
]

#: The names ``policy_named`` (and ``gymhub eval --policy``) accept.
POLICIES = frozenset({"gold", "noop", "refuse", "random"})


def noop_policy(env: TextEnv, observation: list[Message], info: dict[str, Any]) -> Message:
    """End the episode at once, doing nothing."""
    return env.noop_action()


def refuse_policy(env: TextEnv, observation: list[Message], info: dict[str, Any]) -> Message:
    """Decline the task."""
    return env.refuse_action()


def random_policy(seed: int = 0) -> Policy:
    """Schema-valid random tool calls, reproducible from ``seed`` per task and turn."""

    def policy(env: TextEnv, observation: list[Message], info: dict[str, Any]) -> Message:
        task_id = env.task.id if env.task is not None else ""
        # A string seed is hashed with SHA-512 by random.Random: stable across runs
        # and interpreters, unlike hash() of a tuple.
        return env.random_action(random.Random(f"gymhub-random:{seed}:{task_id}:{env.turn}"))

    return policy


def policy_named(name: str, seed: int = 0) -> Policy:
    """The reference policy called ``name``.

    Raises:
        ConfigError: no such policy (the message lists the available ones).
    """
    if name == "gold":
        return gold_policy
    if name == "noop":
        return noop_policy
    if name == "refuse":
        return refuse_policy
    if name == "random":
        return random_policy(seed)
    raise ConfigError(f"unknown policy {name!r}; available: {', '.join(sorted(POLICIES))}")
