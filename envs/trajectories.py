"""Stored episodes: one JSON object a line, written by ``gymhub eval --save``.

A record holds what it takes to play the episode again and to say what scored it::

    {"format": "gymhub.trajectory/1", "gymhub": "0.1.0",
     "env": "echo-v0", "env_kwargs": {}, "policy": "gold", "seed": 0,
     "task_id": "echo-0000", "turns": 1, "terminated": true, "truncated": false,
     "messages": [{"role": "system", ...}, {"role": "assistant", "tool_calls": [...]}, ...],
     "score": {"value": 1.0, "components": {}, "error": null, "details": {...},
               "verifier": "echo@3f2a..."}}

``messages`` is the whole transcript in :meth:`Message.to_dict` form (tool calls with
their arguments as objects); ``score`` is :meth:`Score.to_dict`, or ``null`` when the
episode ended without one. Lines are written as each episode ends, so an interrupted
run keeps the episodes it finished. Strings the JSON codec cannot hold as UTF-8 (a lone
surrogate an agent produced) are escaped, never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from gymhub.errors import ConfigError
from gymhub.types import Message, Score

from .rollout import EpisodeOutcome

__all__ = ["FORMAT", "TrajectoryRecord", "TrajectoryWriter", "read_trajectories"]

#: The ``format`` field of every record this module writes.
FORMAT = "gymhub.trajectory/1"


@dataclass
class TrajectoryRecord:
    """One stored episode (see the module docstring for the JSON form).

    Attributes:
        env: the environment id.
        env_kwargs: its constructor arguments.
        policy: who played (``gold``, ``noop``, ``model:PATH``...).
        seed: the seed ``reset`` was called with.
        task_id: the task played.
        messages: the transcript.
        score: the terminal score, or ``None``.
        turns: steps taken.
        terminated: ended by the agent.
        truncated: ended by the turn budget.
        gymhub: the gymhub version that wrote it.
        line: 1-based line in the file it was read from (0 when not read).
        extra: fields of the line this module does not know (kept, written back).
    """

    env: str
    env_kwargs: dict[str, Any]
    policy: str
    seed: int | None
    task_id: str
    messages: list[Message]
    score: Score | None
    turns: int = 0
    terminated: bool = False
    truncated: bool = False
    gymhub: str = ""
    line: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_outcome(
        cls,
        outcome: EpisodeOutcome,
        *,
        env: str,
        env_kwargs: Mapping[str, Any],
        policy: str,
        seed: int | None,
    ) -> TrajectoryRecord:
        """The record of an episode played by :func:`~gymhub.envs.run_episode`."""
        from gymhub import __version__

        return cls(
            env=env,
            env_kwargs=dict(env_kwargs),
            policy=policy,
            seed=seed,
            task_id=outcome.task_id,
            messages=list(outcome.transcript),
            score=outcome.score,
            turns=outcome.turns,
            terminated=outcome.terminated,
            truncated=outcome.truncated,
            gymhub=__version__,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of one line."""
        return {
            "format": FORMAT,
            "gymhub": self.gymhub,
            "env": self.env,
            "env_kwargs": self.env_kwargs,
            "policy": self.policy,
            "seed": self.seed,
            "task_id": self.task_id,
            "turns": self.turns,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "messages": [m.to_dict() for m in self.messages],
            "score": self.score.to_dict() if self.score is not None else None,
            **self.extra,
        }

    @classmethod
    def from_dict(cls, data: Any, line: int = 0) -> TrajectoryRecord:
        """Parse one line's object.

        Raises:
            ValueError: a field is missing or has the wrong type (the message names it).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        fmt = data.get("format")
        if fmt != FORMAT:
            raise ValueError(f"'format' must be {FORMAT!r}, got {fmt!r}")
        env, task_id = data.get("env"), data.get("task_id")
        if not isinstance(env, str) or not env:
            raise ValueError("'env' must be a non-empty string")
        if not isinstance(task_id, str):
            raise ValueError("'task_id' must be a string")
        kwargs = data.get("env_kwargs") or {}
        if not isinstance(kwargs, Mapping):
            raise ValueError("'env_kwargs' must be an object")
        seed = data.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ValueError("'seed' must be an integer or null")
        raw_messages = data.get("messages")
        if not isinstance(raw_messages, list):
            raise ValueError("'messages' must be a list")
        messages = []
        for i, m in enumerate(raw_messages):
            try:
                messages.append(Message.from_dict(m))
            except ValueError as exc:
                raise ValueError(f"messages[{i}]: {exc}") from exc
        raw_score = data.get("score")
        try:
            score = Score.from_dict(raw_score) if raw_score is not None else None
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"'score' is not a score: {exc!r}") from exc
        known = {"format", "gymhub", "env", "env_kwargs", "policy", "seed", "task_id", "turns",
                 "terminated", "truncated", "messages", "score"}
        return cls(
            env=env,
            env_kwargs=dict(kwargs),
            policy=str(data.get("policy") or ""),
            seed=seed,
            task_id=task_id,
            messages=messages,
            score=score,
            turns=int(data.get("turns") or 0),
            terminated=bool(data.get("terminated")),
            truncated=bool(data.get("truncated")),
            gymhub=str(data.get("gymhub") or ""),
            line=line,
            extra={k: v for k, v in data.items() if k not in known},
        )


class TrajectoryWriter:
    """Append records to a JSONL file, one line per episode, flushed as it is written.

    Args:
        path: the file; created or truncated.

    Raises:
        ConfigError: the file cannot be opened for writing.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self._file: IO[str] = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot write trajectories: {exc.strerror}") from exc
        self.written = 0

    def write(self, record: TrajectoryRecord) -> None:
        """Write one record as one line."""
        self._file.write(json.dumps(record.to_dict(), default=str) + "\n")
        self._file.flush()
        self.written += 1

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_trajectories(path: str | Path) -> Iterator[TrajectoryRecord]:
    """The records of a JSONL file, in order; blank lines are skipped.

    Raises:
        ConfigError: the file is missing or unreadable, or a line is not a record
            (the message gives ``path:line`` and what is wrong).
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        handle = file.open(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    with handle:
        try:
            for n, text in enumerate(handle, start=1):
                if not text.strip():
                    continue
                try:
                    data = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{n}: not JSON ({exc.msg})") from exc
                try:
                    yield TrajectoryRecord.from_dict(data, line=n)
                except ValueError as exc:
                    raise ConfigError(f"{path}:{n}: not a trajectory record: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})") from exc
