"""Re-scoring stored trajectories offline (``gymhub rescore``), for when a verifier changes.

Each trajectory is *replayed*, not re-judged from its last message: a fresh environment
(same id and constructor arguments, reset with the same seed and task) receives the
recorded assistant actions one by one, and its terminal score is the new score. That
is the only way that works for every environment, because what a verifier judges (a
submitted query, the state a world was left in) is the environment's to compute.

A replay must reproduce the recording. The opening messages and the answer to every
action but the last must equal the recorded ones, and the episode must end on the last
recorded action, the way it ended then; otherwise the environment (its tasks, tools or
fixtures) is no longer the one the trajectory was played on, and re-scoring would judge
actions that never saw what they answered. Such a trajectory is reported as an error
and keeps its old score. The answer to the *last* action is only compared in shape
(roles and tool names): it is where environments announce the verdict ("Score: 1"),
which is exactly what may change. An action the environment refused as invalid (not an
assistant message, or too large) left no message of its own, only the reply that it was
invalid; it is replayed as an invalid action.

With ``verifier``, each environment's verifier is replaced by that compiled spec
(:meth:`~gymhub.envs.TextEnv.replace_verifier`) before replaying.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gymhub.errors import GymhubError, TaskNotFound
from gymhub.types import Message, Score

from .core import INVALID_ACTION_REPLY, TextEnv
from .trajectories import TrajectoryRecord

__all__ = ["RescoreReport", "Rescored", "rescore"]

#: Builds an environment from its id and constructor arguments.
EnvFactory = Callable[[str, dict[str, Any]], TextEnv]


class _Diverged(GymhubError):
    """The replay did not reproduce the recording (the message says where); never leaves here."""


@dataclass
class Rescored:
    """One trajectory's old and new score."""

    line: int
    env: str
    task_id: str
    old: Score | None
    new: Score | None

    @property
    def changed(self) -> bool:
        """The value or the judged/unjudged status differs (a new verifier id alone is not)."""
        if self.old is None or self.new is None:
            return (self.old is None) != (self.new is None)
        if self.old.ok != self.new.ok:
            return True
        return self.old.ok and abs(self.old.value - self.new.value) > 1e-9

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "line": self.line,
            "env": self.env,
            "task_id": self.task_id,
            "old": _brief(self.old),
            "new": _brief(self.new),
            "old_verifier": self.old.verifier if self.old else None,
            "new_verifier": self.new.verifier if self.new else None,
        }


@dataclass
class RescoreReport:
    """What re-scoring a file found."""

    results: list[Rescored] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def changed(self) -> list[Rescored]:
        """Trajectories whose score changed."""
        return [r for r in self.results if r.changed]

    def verifier_changes(self) -> dict[str, int]:
        """``"old_id -> new_id"``: how many trajectories each pair of verifier ids covers."""
        pairs: dict[str, int] = {}
        for r in self.results:
            key = f"{_verifier_id(r.old)} -> {_verifier_id(r.new)}"
            pairs[key] = pairs.get(key, 0) + 1
        return pairs

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (what ``gymhub rescore --json`` prints)."""
        changed = self.changed
        return {
            "trajectories": len(self.results) + len(self.errors),
            "rescored": len(self.results),
            "changed": len(changed),
            "unchanged": len(self.results) - len(changed),
            "errors": len(self.errors),
            "verifiers": self.verifier_changes(),
            "changes": [r.to_dict() for r in changed],
            "failures": self.errors,
        }


def rescore(
    records: Sequence[TrajectoryRecord],
    make_env: EnvFactory,
    *,
    verifier: Any = None,
) -> RescoreReport:
    """Replay each record on a fresh episode and compare the new score with the stored one.

    Args:
        records: the trajectories (from :func:`~gymhub.envs.trajectories.read_trajectories`).
        make_env: builds an environment from ``(env_id, kwargs)``; one is built per
            distinct pair and reused across its trajectories.
        verifier: a compiled :class:`~gymhub.verifiers.Verifier` to score with instead
            of each environment's own.

    Raises:
        GymhubError: an environment cannot be built (unknown id, bad arguments) or its
            verifier cannot be replaced; a replay that diverges is reported instead.
    """
    report = RescoreReport()
    envs: dict[str, TextEnv] = {}
    try:
        for rec in records:
            key = json.dumps([rec.env, rec.env_kwargs], sort_keys=True, default=str)
            if key not in envs:
                env = make_env(rec.env, dict(rec.env_kwargs))
                envs[key] = env
                if verifier is not None:
                    env.replace_verifier(verifier)
            try:
                new = _replay(envs[key], rec)
            except _Diverged as exc:
                report.errors.append(_failure(rec, f"replay diverged: {exc}"))
                continue
            except Exception as exc:  # the environment broke: this trajectory, not the run
                envs[key].end_episode()
                report.errors.append(_failure(rec, f"replay failed: {type(exc).__name__}: {exc}"))
                continue
            if (verifier is not None and new is not None and new.verifier
                    and new.verifier != verifier.id):
                # The environment kept scoring its own way: "unchanged" would be a lie.
                report.errors.append(_failure(
                    rec, f"the environment scored with {new.verifier}, not the replacement "
                         f"{verifier.id}"))
                continue
            report.results.append(Rescored(rec.line, rec.env, rec.task_id, rec.score, new))
    finally:
        for env in envs.values():
            env.close()
    return report


def _replay(env: TextEnv, record: TrajectoryRecord) -> Score | None:
    """Play ``record``'s actions on ``env`` and return the terminal score.

    The transcript is walked as the environment answers: each action's answer is as many
    recorded messages as the replay's answer has, so an answer of several messages, or
    one that happens to read like an invalid action's reply, is never cut wrong. Where an
    action is due and the recording holds the environment's reply to an invalid action
    (see :func:`_invalid_reply`), the agent sent something the environment refused (not
    an assistant message, or too large), which left no message of its own: an invalid
    action is replayed in its place, and the reply compared as a reply to one (the
    problem's wording was the action's).

    Raises:
        _Diverged: the environment answered differently from the recording, has no
            such task, or the episode did not end where it ended then.
    """
    messages = record.messages
    try:
        observation, info = env.reset(seed=record.seed, options={"task_id": record.task_id})
    except TaskNotFound as exc:
        raise _Diverged(str(exc)) from exc
    pos = len(observation)
    if messages[:pos] != observation:
        where = _first_difference(observation, messages[:pos])
        raise _Diverged(f"the opening messages differ: {where}")
    if pos >= len(messages):
        raise _Diverged("the trajectory has no action to replay")
    terminated = truncated = False
    actions = 0
    while pos < len(messages):
        action: Message | None
        if messages[pos].role == "assistant":
            action = messages[pos]
            pos += 1
        elif _invalid_reply(messages[pos]):
            action = None  # not a message: the environment refuses it as an invalid action
        else:
            raise _Diverged(f"message {pos} answers no action: {_clip(messages[pos])}")
        actions += 1
        observation, _, terminated, truncated, info = env.step(action)
        end = pos + len(observation)
        if terminated or truncated:
            # the last answer is compared in shape only: it announces the verdict
            rest = messages[pos:]
            if any(m.role == "assistant" for m in rest):
                raise _Diverged(f"the episode ended after action {actions}; the recording goes "
                                "on")
            if _shape(observation) != _shape(rest):
                raise _Diverged(f"the answer to the last action has another shape: "
                                f"{_shape(observation)} instead of {_shape(rest)}")
            break
        if end >= len(messages):
            env.end_episode()
            raise _Diverged(f"the episode did not end after the last recorded action ({actions})")
        expected = messages[pos:end]
        if action is None:
            same = all(_invalid_reply(m) for m in (*observation, *expected))
        else:
            same = observation == expected
        if not same:
            where = _first_difference(observation, expected)
            raise _Diverged(f"the answer to action {actions} differs: {where}")
        pos = end
    if (terminated, truncated) != (record.terminated, record.truncated):
        how = "terminated" if terminated else "truncated"
        raise _Diverged(f"the episode was {how}, unlike the recording")
    score = info.get("score")
    return score if isinstance(score, Score) else None


def _invalid_reply(message: Message) -> bool:
    """``TextEnv.step``'s answer to an action it refused as invalid."""
    return message.role == "user" and message.content.startswith(INVALID_ACTION_REPLY)


def _failure(rec: TrajectoryRecord, error: str) -> dict[str, Any]:
    return {"line": rec.line, "env": rec.env, "task_id": rec.task_id, "error": error}


def _shape(messages: Sequence[Message]) -> list[tuple[str, str | None]]:
    return [(m.role, m.name) for m in messages]


def _first_difference(got: Sequence[Message], want: Sequence[Message]) -> str:
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"message {i}: got {_clip(g)}, recorded {_clip(w)}"
    return f"{len(got)} messages instead of {len(want)}"


def _clip(m: Message) -> str:
    text = json.dumps(m.to_dict(), default=str)
    return text if len(text) <= 160 else text[:157] + "..."


def _verifier_id(score: Score | None) -> str:
    """A score's verifier id; ``-`` when no verifier made it (a truncated episode's 0)."""
    return (score.verifier or "-") if score is not None else "(no score)"


def _brief(score: Score | None) -> float | str | None:
    """A score as one value: the number, or ``"error: ..."`` when it could not judge."""
    if score is None:
        return None
    return score.value if score.ok else f"error: {score.error}"
