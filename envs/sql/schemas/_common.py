"""Shared pieces of the fixture schemas: the schema record, column types, vocabularies.

Every generator draws from a caller-supplied :class:`random.Random` only (never the
global RNG, never ``hash()``-ordered containers), so the same seed and scale give the
same rows in every process. Vocabularies (names, cities, ...) are fixed module-level
lists shared by all seeds: a question's constants then exist in every perturbed copy,
while which rows use them, and how many, changes with the seed.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa

__all__ = [
    "FIRST_NAMES",
    "LAST_NAMES",
    "Generator",
    "Rows",
    "SchemaDef",
    "maybe",
    "rand_date",
    "text",
    "weighted",
]

Rows = dict[str, list[dict[str, Any]]]
Generator = Callable[[random.Random, int], Rows]
T = TypeVar("T")


@dataclass(frozen=True)
class SchemaDef:
    """One fixture schema: its tables and a seeded generator of their rows.

    Attributes:
        name: short identifier (``retail``, ``hr``, ...); part of fixture keys.
        description: one paragraph shown to the agent in the system prompt.
        metadata: the SQLAlchemy tables (3-8, related by foreign keys).
        generate: ``(rng, scale) -> {table: rows}`` in foreign-key-safe insertion
            order; ``scale`` multiplies the row counts of the non-vocabulary tables.
    """

    name: str
    description: str
    metadata: sa.MetaData
    generate: Generator


def text(length: int | None = None) -> sa.types.TypeEngine[str]:
    """A text column type that sorts bytewise on both backends.

    SQLite compares text with the BINARY collation; PostgreSQL would use the
    database's locale. Declaring ``COLLATE "C"`` on the PostgreSQL variant makes
    ``ORDER BY name`` give the same order on both, so ordered gold results agree.
    """
    base = sa.String(length) if length else sa.Text()
    variant = sa.String(length, collation="C") if length else sa.Text(collation="C")
    return base.with_variant(variant, "postgresql")


def rand_date(rng: random.Random, start: dt.date, end: dt.date) -> dt.date:
    """A uniformly drawn date in ``[start, end]``."""
    return start + dt.timedelta(days=rng.randint(0, (end - start).days))


def weighted(rng: random.Random, choices: Sequence[tuple[T, float]]) -> T:
    """Pick one value from ``(value, weight)`` pairs."""
    values = [c[0] for c in choices]
    weights = [c[1] for c in choices]
    return rng.choices(values, weights=weights, k=1)[0]


def maybe(rng: random.Random, p_null: float, value: T) -> T | None:
    """``None`` with probability ``p_null``, else ``value`` (the draw always happens)."""
    return None if rng.random() < p_null else value


FIRST_NAMES: tuple[str, ...] = (
    "Alice", "Bruno", "Chloe", "Daniel", "Elena", "Felix", "Grace", "Hugo", "Irene",
    "Jonas", "Karin", "Liam", "Maria", "Nina", "Oscar", "Paula", "Quentin", "Rosa",
    "Samuel", "Tessa", "Ulrich", "Vera", "Walter", "Xenia", "Yusuf", "Zoe", "Anton",
    "Bianca", "Carlos", "Dora",
)  # fmt: skip

LAST_NAMES: tuple[str, ...] = (
    "Martin", "Bernard", "Dubois", "Schmidt", "Muller", "Weber", "Garcia", "Lopez",
    "Rossi", "Russo", "Silva", "Santos", "Jansen", "de Vries", "Novak", "Horvat",
    "Murphy", "Kelly", "Nielsen", "Hansen", "Larsen", "Costa", "Ferrari", "Moreau",
    "Fischer", "Wagner", "Becker", "Romero", "Navarro", "Peeters",
)  # fmt: skip
