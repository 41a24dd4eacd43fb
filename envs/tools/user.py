"""The deterministic user of ``tools-v0``: no LLM, only rules.

The request is stated up front. Two rules release more: a *follow-up* is said after a
given turn, whatever the agent did; a *hidden slot* (a value the request leaves out on
purpose) is told only when the agent asks for it by name with ``ask_user(field, ...)``.
The user remembers which slots it revealed, which is how a write that uses a value
nobody told the agent is caught as invented (see :mod:`.session`).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["FIELDS", "Field", "User", "UserScript"]

#: Slot names the agent may ask about (the ``field`` enum of ``ask_user``).
Field = Literal["date", "time", "duration", "amount", "quantity", "recipient", "account",
                "subject", "priority", "customer", "title"]
FIELDS: tuple[str, ...] = typing.get_args(Field)


@dataclass(frozen=True)
class UserScript:
    """What the user knows but did not say, and what it says later.

    Attributes:
        hidden: slot name -> value, told only when asked for that slot.
        followups: ``(after_turn, text)``: said at the end of that turn (1-based).
    """

    hidden: Mapping[str, Any] = field(default_factory=dict)
    followups: Sequence[tuple[int, str]] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (tasks are data)."""
        return {"hidden": dict(self.hidden), "followups": [list(f) for f in self.followups]}


class User:
    """One episode's user."""

    def __init__(self, script: UserScript) -> None:
        self.script = script
        self.revealed: set[str] = set()
        self.said: set[int] = set()

    def ask(self, field_name: str) -> str:
        """The user's answer to a question about ``field_name``."""
        if field_name in self.script.hidden:
            self.revealed.add(field_name)
            value = self.script.hidden[field_name]
            return f"The user answers: the {field_name} is {value}."
        return (f"The user answers: I don't have anything to add about the {field_name}; "
                "everything I know is in my request.")

    def after_turn(self, turn: int) -> list[str]:
        """Follow-ups due by the end of ``turn`` and not said yet.

        "Due by", not "due at": a turn whose action was malformed never reaches the
        environment's step, and its follow-up must still come, one turn late.
        """
        due = [(i, text) for i, (at, text) in enumerate(self.script.followups)
               if at <= turn and i not in self.said]
        self.said.update(i for i, _ in due)
        return [text for _, text in due]

    def pending(self) -> list[str]:
        """Every follow-up not said yet, now said: the user speaks up before the agent leaves."""
        due = [(i, text) for i, (_, text) in enumerate(self.script.followups)
               if i not in self.said]
        self.said.update(i for i, _ in due)
        return [text for _, text in due]

    def unrevealed(self) -> dict[str, Any]:
        """Hidden slots not yet told: a write using one of these values invented it."""
        return {k: v for k, v in self.script.hidden.items() if k not in self.revealed}
