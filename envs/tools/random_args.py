"""Plausible random arguments for ``tools-v0``'s tools: the ``random`` reference policy.

A random policy that sends junk only measures argument validation. This one draws
real emails, SKUs, account numbers, order and ticket ids of the task's world and dates
near its clock, so its calls mostly run, and its score (near 0) says that acting
without reading the request does not pay.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any

from gymhub.types import Task

from .scoring import initial_snapshot
from .user import FIELDS
from .world import WorldRef

__all__ = ["random_arguments"]


def random_arguments(name: str, rng: random.Random, task: Task) -> dict[str, Any]:
    """Plausible arguments for ``name``: real emails, SKUs, accounts and ids of the world."""
    assert isinstance(task.fixture, WorldRef)
    snap = initial_snapshot(task.fixture)

    def pick(table: str, col: str) -> Any:
        return rng.choice(snap[table])[col]

    date = (task.fixture.now.date() + dt.timedelta(days=rng.randint(0, 6))).isoformat()
    start = rng.choice(["08:00", "09:30", "11:00", "14:00", "16:30", "19:00"])
    customer = pick("orders", "customer")
    amount = float(rng.choice([20, 150, 600, 1500, 5000]))
    own = [a["number"] for a in snap["accounts"] if a["owner"] == task.meta["user"]]
    table: dict[str, Callable[[], dict[str, Any]]] = {
        "find_person": lambda: {"query": pick("people", "name").split()[rng.randint(0, 1)]},
        "list_team": lambda: {"team": pick("teams", "name")},
        "get_calendar": lambda: {"email": pick("people", "email"), "date": date},
        "schedule_meeting": lambda: {"title": "Sync", "attendees": [pick("people", "email")],
                                     "date": date, "start": start,
                                     "duration_minutes": rng.choice([30, 60])},
        "cancel_meeting": lambda: {"meeting_id": pick("meetings", "id")},
        "send_email": lambda: {"to": rng.choice([pick("people", "email"), customer]),
                               "subject": "Hello", "body": "Just checking in."},
        "search_products": lambda: {"query": pick("products", "name")},
        "place_order": lambda: {"customer": customer, "sku": pick("products", "sku"),
                                "quantity": rng.randint(1, 5)},
        "get_order": lambda: {"order_id": pick("orders", "id")},
        "cancel_order": lambda: {"order_id": pick("orders", "id")},
        "list_accounts": lambda: {},
        "get_account": lambda: {"number": rng.choice(own)},
        "request_approval": lambda: {"from_account": rng.choice(own),
                                     "to_account": pick("accounts", "number"), "amount": amount},
        "transfer_funds": lambda: {"from_account": rng.choice(own),
                                   "to_account": pick("accounts", "number"), "amount": amount,
                                   "memo": "misc"},
        "list_tickets": lambda: {"customer": customer},
        "create_ticket": lambda: {"customer": customer, "subject": "Question",
                                  "priority": rng.choice(["low", "normal", "high"])},
        "update_ticket": lambda: {"ticket_id": pick("tickets", "id"),
                                  "status": rng.choice(["open", "pending", "closed"])},
        "ask_user": lambda: {"field": rng.choice(FIELDS), "question": "Could you tell me more?"},
        "finish": lambda: {"answer": str(rng.choice([0, 3, 12, 450.0]))},
        "refuse": lambda: {"reason": "Not possible."},
        "transfer_to_human": lambda: {"reason": rng.choice(["account_frozen", "billing_dispute",
                                                            "other"]),
                                      "summary": "Needs a human."},
    }
    return table[name]()
