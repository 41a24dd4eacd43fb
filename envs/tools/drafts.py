"""What a ``tools-v0`` task template works with: a world's data and a task draft.

:class:`W` wraps a world's generated rows with the lookups templates need (free
calendar slots, accounts, open tickets); a template returns a :class:`Draft`, the task
before its gold end state exists.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .world import WorldRef, world_rows

__all__ = ["MAIL", "MEMOS", "NEW_SUBJECTS", "SLOTS", "TITLES", "WORLDS", "Draft", "Template",
           "W", "c"]

WORLDS = 8
SLOTS = ["09:30", "10:00", "11:00", "11:30", "13:30", "14:00", "15:00", "15:30"]
TITLES = ["Budget check", "Roadmap chat", "Hiring sync", "Launch prep", "Vendor call",
          "Offsite plan", "Pricing review", "Incident retro"]
MAIL = [("Budget review", "Please send your Q3 figures by Friday."),
        ("Offsite dates", "Can you confirm the offsite dates?"),
        ("Laptop refresh", "Your new laptop is ready for pickup."),
        ("Quarterly goals", "Please review the draft goals before Thursday."),
        ("Expense report", "Your March expense report is missing a receipt.")]
MEMOS = ["rent share", "team lunch", "conference fee", "gift pool", "train tickets"]
NEW_SUBJECTS = ["Bulk discount request", "Warranty question", "Address change",
                "Return label", "Catalog request"]


def c(name: str, **arguments: Any) -> dict[str, Any]:
    """One call of a gold program."""
    return {"name": name, "arguments": arguments}


@dataclass
class Draft:
    """A task before its gold end state is computed."""

    prompt: str
    user: str
    program: list[dict[str, Any]]
    ending: str = "finish"
    answer: dict[str, Any] | None = None
    hidden: dict[str, Any] = field(default_factory=dict)
    followups: list[tuple[int, str]] = field(default_factory=list)


class W:
    """A world's data, with the lookups templates need."""

    def __init__(self, ref: WorldRef) -> None:
        self.ref, self.now = ref, ref.now
        self.rows = world_rows(ref)
        self.people = self.rows["people"]
        firsts = [p["name"].split()[0] for p in self.people]
        self.namesakes = [p for p, f in zip(self.people, firsts, strict=True)
                          if firsts.count(f) > 1]

    def day(self, rng: random.Random) -> dt.date:
        """A weekday after today (Tuesday to Friday: the clock is a Monday)."""
        return self.now.date() + dt.timedelta(days=rng.randint(1, 4))

    def accounts(self, email: str) -> list[dict[str, Any]]:
        """The accounts ``email`` owns."""
        return [a for a in self.rows["accounts"] if a["owner"] == email]

    def checking(self, email: str) -> dict[str, Any]:
        """``email``'s checking account (everyone has one)."""
        return next(a for a in self.accounts(email) if a["kind"] == "checking")

    def busy(self, email: str, day: dt.date, start: str, minutes: int) -> bool:
        """Whether ``email`` has a meeting overlapping that slot."""
        s = f"{day.isoformat()} {start}"
        e = (dt.datetime.fromisoformat(s) + dt.timedelta(minutes=minutes)).strftime(
            "%Y-%m-%d %H:%M")
        return any(m["start"] < e and s < m["end"] for m in self.rows["meetings"]
                   if m["organizer"] == email or email in m["attendees"].split(","))

    def free(self, emails: list[str], day: dt.date, start: str, minutes: int) -> bool:
        """Whether everyone in ``emails`` is free for that slot."""
        return all(not self.busy(e, day, start, minutes) for e in emails)

    def other(self, rng: random.Random, *not_: str) -> dict[str, Any]:
        """A random person other than ``not_``."""
        return rng.choice([p for p in self.people if p["email"] not in not_])

    def open_tickets(self, customer: str) -> list[str]:
        """Ids of ``customer``'s open tickets."""
        return [t["id"] for t in self.rows["tickets"]
                if t["customer"] == customer and t["status"] == "open"]


Template = Callable[[random.Random, W], Draft | None]
