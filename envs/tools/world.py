"""The ``tools-v0`` world: a small company in one SQLite database per episode.

The tables are SQLAlchemy Core; the rows of world ``seed`` come from a seeded
generator and are built once per process into a serialized image
(:mod:`gymhub.sandbox.sql.image`, the same per-episode copy as ``sql-v0``). An
episode's :class:`World` restores that image into its own ``:memory:`` connection, so
every episode starts from identical bytes and nothing leaks between episodes.

Identifiers of rows the agent creates are *content-keyed* (a hash of what the row
says), not ``max(id)+1``: the same call gives the same id whatever happened before,
and scoring compares rows by natural keys anyway (ids ignored).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import random
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

from gymhub.errors import ConfigError
from gymhub.sandbox.sql.image import ImageCache, build_image, restore_image

__all__ = [
    "DOMAIN",
    "METADATA",
    "Snapshot",
    "World",
    "WorldRef",
    "content_id",
    "world_image",
    "world_rows",
]

#: The company's mail domain; mail to any other domain is external.
DOMAIN = "acme.example"
Snapshot = dict[str, list[dict[str, Any]]]

METADATA = sa.MetaData()
_T = sa.Text
sa.Table("teams", METADATA, sa.Column("id", sa.Integer, primary_key=True),
         sa.Column("name", _T, unique=True, nullable=False),
         sa.Column("manager", _T, nullable=False))
sa.Table("people", METADATA, sa.Column("id", sa.Integer, primary_key=True),
         sa.Column("email", _T, unique=True, nullable=False),
         sa.Column("name", _T, nullable=False), sa.Column("team", _T, nullable=False),
         sa.Column("role", _T, nullable=False))
sa.Table("meetings", METADATA, sa.Column("id", _T, primary_key=True),
         sa.Column("title", _T, nullable=False), sa.Column("organizer", _T, nullable=False),
         sa.Column("start", _T, nullable=False), sa.Column("end", _T, nullable=False),
         sa.Column("attendees", _T, nullable=False))
sa.Table("outbox", METADATA, sa.Column("id", _T, primary_key=True),
         sa.Column("sender", _T, nullable=False), sa.Column("to_addr", _T, nullable=False),
         sa.Column("subject", _T, nullable=False), sa.Column("body", _T, nullable=False),
         sa.Column("sent_at", _T, nullable=False))
sa.Table("products", METADATA, sa.Column("id", sa.Integer, primary_key=True),
         sa.Column("sku", _T, unique=True, nullable=False),
         sa.Column("name", _T, nullable=False), sa.Column("stock", sa.Integer, nullable=False),
         sa.Column("price", sa.Float, nullable=False))
sa.Table("orders", METADATA, sa.Column("id", _T, primary_key=True),
         sa.Column("customer", _T, nullable=False), sa.Column("sku", _T, nullable=False),
         sa.Column("quantity", sa.Integer, nullable=False),
         sa.Column("status", _T, nullable=False), sa.Column("created_at", _T, nullable=False))
sa.Table("accounts", METADATA, sa.Column("id", sa.Integer, primary_key=True),
         sa.Column("number", _T, unique=True, nullable=False),
         sa.Column("owner", _T, nullable=False), sa.Column("kind", _T, nullable=False),
         sa.Column("balance", sa.Float, nullable=False),
         sa.Column("frozen", sa.Boolean, nullable=False))
sa.Table("transfers", METADATA, sa.Column("id", _T, primary_key=True),
         sa.Column("from_account", _T, nullable=False), sa.Column("to_account", _T, nullable=False),
         sa.Column("amount", sa.Float, nullable=False), sa.Column("memo", _T, nullable=False),
         sa.Column("approval_id", _T), sa.Column("created_at", _T, nullable=False))
sa.Table("approvals", METADATA, sa.Column("id", _T, primary_key=True),
         sa.Column("from_account", _T, nullable=False), sa.Column("to_account", _T, nullable=False),
         sa.Column("amount", sa.Float, nullable=False), sa.Column("approver", _T, nullable=False),
         sa.Column("created_at", _T, nullable=False))
sa.Table("tickets", METADATA, sa.Column("id", _T, primary_key=True),
         sa.Column("customer", _T, nullable=False), sa.Column("subject", _T, nullable=False),
         sa.Column("status", _T, nullable=False), sa.Column("priority", _T, nullable=False),
         sa.Column("assignee", _T), sa.Column("created_at", _T, nullable=False))
sa.Table("handoffs", METADATA, sa.Column("id", _T, primary_key=True),
         sa.Column("requester", _T, nullable=False), sa.Column("reason", _T, nullable=False),
         sa.Column("summary", _T, nullable=False), sa.Column("created_at", _T, nullable=False))

#: Tables in insertion (and snapshot) order.
TABLES: tuple[str, ...] = tuple(METADATA.tables)


def content_id(prefix: str, *parts: Any) -> str:
    """A content-keyed id: ``PREFIX-`` and six hex digits of the parts' SHA-256."""
    text = json.dumps([str(p) for p in parts])  # framed: "a|b","c" and "a","b|c" differ
    return f"{prefix}-{hashlib.sha256(text.encode()).hexdigest()[:6].upper()}"


@dataclass(frozen=True)
class WorldRef:
    """A world: its data seed. Its frozen clock is part of the data (``now``)."""

    seed: int

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"world seed must be an int >= 0, got {self.seed!r}")

    @property
    def now(self) -> dt.datetime:
        """The frozen clock: a Monday, 08:30, one week later per seed."""
        return dt.datetime(2026, 3, 2, 8, 30) + dt.timedelta(weeks=self.seed)


FIRST = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Femi", "Greta", "Hiro", "Ines", "Jonas", "Kai",
         "Lena", "Marek", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tariq"]
LAST = ["Abbott", "Brandt", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Hoang", "Ivanova",
        "Jensen", "Kowalski", "Lopez", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Sato"]
TEAMS = ["Sales", "Support", "Finance", "Engineering"]
PRODUCTS = ["Desk Lamp", "Office Chair", "Standing Desk", "Monitor Arm", "Keyboard", "Webcam",
            "Headset", "Notebook Pack", "Whiteboard", "Cable Kit", "Docking Station", "Mouse Pad"]
CUSTOMERS = ["Northwind", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Soylent",
             "Wonka", "Tyrell", "Cyberdyne"]
SUBJECTS = ["Login fails", "Invoice missing", "Late delivery", "Damaged item", "Refund status",
            "Password reset", "Wrong size", "Billing address"]


def _email(first: str, last: str) -> str:
    return f"{first}.{last}@{DOMAIN}".lower()


def customer_email(name: str) -> str:
    """A customer's contact address (outside the company)."""
    return f"orders@{name.lower()}.example"


def world_rows(ref: WorldRef) -> dict[str, list[dict[str, Any]]]:
    """The rows of world ``ref`` in insertion order (a string-seeded RNG: same everywhere)."""
    rng = random.Random(f"gymhub-tools/world={ref.seed}")
    now = ref.now
    rows: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    # 16 people, 4 per team; two share a first name across teams (a built-in distractor).
    firsts = rng.sample(FIRST, 15)
    firsts.append(firsts[0])
    lasts = rng.sample(LAST, 16)
    people = []
    for i, (f, la) in enumerate(zip(firsts, lasts, strict=True)):
        team = TEAMS[i % 4]
        role = "manager" if i < 4 else "staff"
        people.append({"id": i + 1, "email": _email(f, la), "name": f"{f} {la}", "team": team,
                       "role": role})
    rows["people"] = people
    rows["teams"] = [{"id": i + 1, "name": t, "manager": people[i]["email"]}
                     for i, t in enumerate(TEAMS)]
    day = now.date()
    for i in range(18):
        p = people[rng.randrange(len(people))]
        others = rng.sample([str(q["email"]) for q in people if q is not p], rng.randint(1, 3))
        d = day + dt.timedelta(days=rng.randint(0, 4))
        h = rng.choice([9, 10, 11, 13, 14, 15, 16])
        start = dt.datetime.combine(d, dt.time(h, rng.choice([0, 30])))
        end = start + dt.timedelta(minutes=rng.choice([30, 60]))
        title = f"{rng.choice(['Sync', 'Review', '1:1', 'Planning', 'Demo'])} {i + 1}"
        rows["meetings"].append({
            "id": content_id("MTG", title, start), "title": title, "organizer": p["email"],
            "start": start.strftime("%Y-%m-%d %H:%M"), "end": end.strftime("%Y-%m-%d %H:%M"),
            "attendees": ",".join(sorted(others)),
        })
    sent = (now - dt.timedelta(days=3)).isoformat(" ", "minutes")
    rows["outbox"] = [{"id": "MAIL-0001", "sender": people[0]["email"],
                       "to_addr": people[1]["email"], "subject": "Welcome",
                       "body": "Welcome aboard.", "sent_at": sent}]
    for i, name in enumerate(PRODUCTS):
        rows["products"].append({"id": i + 1, "sku": f"SKU-{100 + i * 7 + ref.seed}",
                                 "name": name, "stock": rng.choice([0, 2, 3, 5, 8, 12, 20, 40]),
                                 "price": float(rng.randrange(9, 400))})
    for i in range(24):
        age = rng.choice([1, 3, 6, 10, 20, 45, 60, 90])
        rows["orders"].append({
            "id": f"ORD-{1001 + i}", "customer": customer_email(rng.choice(CUSTOMERS)),
            "sku": rng.choice(rows["products"])["sku"], "quantity": rng.randint(1, 6),
            "status": rng.choice(["placed", "placed", "shipped"]),
            "created_at": (day - dt.timedelta(days=age)).isoformat(),
        })
    n = 0
    for p in people:
        for kind in ("checking", "savings"):
            if kind == "savings" and rng.random() < 0.3:
                continue
            n += 1
            rows["accounts"].append({
                "id": n, "number": f"ACC-{ref.seed}{n:03d}", "owner": p["email"], "kind": kind,
                "balance": float(rng.randrange(200, 6000)),
                "frozen": kind == "savings" and rng.random() < 0.25,
            })
    seen: set[tuple[str, str]] = set()
    for i in range(26):
        cust, subj = customer_email(rng.choice(CUSTOMERS)), rng.choice(SUBJECTS)
        if (cust, subj) in seen:
            continue
        seen.add((cust, subj))
        rows["tickets"].append({
            "id": f"TKT-{501 + i}", "customer": cust, "subject": subj,
            "status": rng.choice(["open", "open", "pending", "closed"]),
            "priority": rng.choice(["low", "normal", "normal", "high"]),
            "assignee": rng.choice([None, rng.choice(people)["email"]]),
            "created_at": (day - dt.timedelta(days=rng.randint(0, 20))).isoformat(),
        })
    return rows


_images: ImageCache[WorldRef] = ImageCache()


def world_image(ref: WorldRef) -> bytes:
    """World ``ref`` as a serialized SQLite database, built once per process."""
    return _images.get(ref, lambda: build_image(METADATA, world_rows(ref)))


def _begin(conn: sa.Connection) -> None:
    conn.exec_driver_sql("BEGIN")


class World:
    """One episode's private, writable copy of a world.

    The connection (and its SQLAlchemy engine) lives as long as the environment;
    :meth:`load` swaps in a fresh copy of an image, which costs a ``deserialize``.
    """

    def __init__(self) -> None:
        self._con = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self.engine = sa.create_engine("sqlite://", creator=lambda: self._con,
                                       poolclass=StaticPool)
        # pysqlite's own transaction handling is off (isolation_level=None); SQLAlchemy
        # emits BEGIN itself, so a tool call is exactly one transaction.
        sa.event.listen(self.engine, "begin", _begin)
        self.ref: WorldRef | None = None

    def load(self, ref: WorldRef) -> None:
        """Replace the database with a fresh copy of world ``ref``."""
        restore_image(self._con, world_image(ref), f"tools world {ref.seed}")
        self._con.execute("PRAGMA foreign_keys=ON")
        self.ref = ref

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sa.Connection]:
        """One all-or-nothing transaction: an exception inside rolls everything back."""
        with self.engine.begin() as conn:
            yield conn

    def snapshot(self) -> Snapshot:
        """Every table's rows as dicts, ordered by primary key (raw SQLite values).

        Read straight through sqlite3: SQLAlchemy's row processing would cost ten
        times more here, and it runs twice per scored episode.
        """
        out: Snapshot = {}
        for name, table in METADATA.tables.items():
            cols = [c.name for c in table.columns]
            pk = ", ".join(f'"{c.name}"' for c in table.primary_key.columns)
            cur = self._con.execute(f'SELECT * FROM "{name}" ORDER BY {pk}')
            out[name] = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
        return out

    def close(self) -> None:
        """Free the connection for good."""
        self.engine.dispose()
        self._con.close()
