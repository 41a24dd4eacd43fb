"""The template language of the built-in SQL tasks: dialect macros and parameter sources.

A :class:`Template` is one question pattern with gold SQL written once for both
backends. Dialect differences are written as macros, expanded per dialect by
:func:`render`:

- ``{YEAR(d)}`` / ``{MONTH(d)}``: ``CAST(strftime('%Y', d) AS INTEGER)`` in SQLite,
  ``CAST(EXTRACT(YEAR FROM d) AS INTEGER)`` in PostgreSQL.
- ``{YM(d)}``: ``strftime('%Y-%m', d)`` / ``to_char(d, 'YYYY-MM')``.
- ``{DAYS(a, b)}``: whole days from ``a`` to ``b`` (``julianday`` difference / ``b - a``).
- ``{ROUND2(x)}``: ``ROUND(x, 2)`` / ``ROUND(CAST(x AS NUMERIC), 2)`` (PostgreSQL has no
  ``ROUND(double precision, int)``).
- ``{FLOAT(x)}``: ``CAST(x AS REAL)`` / ``CAST(x AS DOUBLE PRECISION)`` (true division).

Everything else is written in the common subset: date literals as ``'YYYY-MM-DD'``
strings (PostgreSQL casts them to DATE on comparison), ``||`` for concatenation,
``TRUE``/``FALSE`` for booleans (SQLite >= 3.23 reads them as 1/0), every selected
column in ``GROUP BY``, aggregate expressions (not aliases) in ``HAVING``, and no
``ORDER BY`` on a nullable column (the backends place NULLs differently).
Macros may nest but their arguments may not hold parameters. After macro expansion,
``{name}`` placeholders are filled from the parameters.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CATEGORIES",
    "DIALECTS",
    "MONTHS",
    "Dialect",
    "ParamSource",
    "Template",
    "nums",
    "render",
    "t",
]

Difficulty = Literal["easy", "medium", "hard"]
Dialect = Literal["sqlite", "postgresql"]
DIALECTS: tuple[Dialect, ...] = ("sqlite", "postgresql")

#: The task categories ``meta["category"]`` takes.
CATEGORIES: tuple[str, ...] = (
    "filter", "aggregate", "join2", "join3", "group_having", "order_limit", "subquery",
    "null", "date",
)  # fmt: skip

#: A parameter source: a SQL query run on the seed-0 fixture (its column names become
#: parameter names) or a literal list of parameter dicts.
ParamSource = str | Sequence[Mapping[str, Any]]

_MONTH_NAMES = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
MONTHS: tuple[dict[str, Any], ...] = tuple(
    {"month": i, "month_name": name} for i, name in enumerate(_MONTH_NAMES, start=1)
)


@dataclass(frozen=True)
class Template:
    """One question pattern.

    Attributes:
        category: one of :data:`CATEGORIES`.
        difficulty: ``easy``, ``medium`` or ``hard``.
        question: ``str.format`` pattern over the parameters.
        sql: gold SQL with dialect macros and ``{name}`` placeholders.
        params: sources whose cartesian product gives the candidate parameter sets.
        cap: most tasks kept from this template.
    """

    category: str
    difficulty: Difficulty
    question: str
    sql: str
    params: tuple[ParamSource, ...] = ()
    cap: int = 4


def t(
    category: str, difficulty: Difficulty, question: str, sql: str, *params: ParamSource,
    cap: int = 4,
) -> Template:  # fmt: skip
    """Shorthand constructor used by the per-schema template lists."""
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}")
    return Template(category, difficulty, question, " ".join(sql.split()), params, cap)


def nums(name: str, *values: Any) -> list[dict[str, Any]]:
    """A literal parameter source: one parameter ``name`` taking each of ``values``."""
    return [{name: v} for v in values]


def _split_args(args: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in args:
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur.append(ch)
    out.append("".join(cur).strip())
    return out


def _macro(name: str, args: list[str], dialect: Dialect) -> str:
    lite = dialect == "sqlite"
    if name in ("YEAR", "MONTH"):
        (d,) = args
        if lite:
            return f"CAST(strftime('%{'Y' if name == 'YEAR' else 'm'}', {d}) AS INTEGER)"
        return f"CAST(EXTRACT({name} FROM {d}) AS INTEGER)"
    if name == "YM":
        (d,) = args
        return f"strftime('%Y-%m', {d})" if lite else f"to_char({d}, 'YYYY-MM')"
    if name == "DAYS":
        a, b = args
        return f"CAST(julianday({b}) - julianday({a}) AS INTEGER)" if lite else f"({b} - {a})"
    if name == "ROUND2":
        (x,) = args
        return f"ROUND({x}, 2)" if lite else f"ROUND(CAST({x} AS NUMERIC), 2)"
    if name == "FLOAT":
        (x,) = args
        return f"CAST({x} AS REAL)" if lite else f"CAST({x} AS DOUBLE PRECISION)"
    raise ValueError(f"unknown SQL macro {name!r}")


_MACRO = re.compile(r"\{([A-Z][A-Z0-9]*)\(([^{}]*)\)\}")


def render(sql: str, dialect: Dialect, params: Mapping[str, Any]) -> str:
    """Expand the dialect macros of ``sql``, then fill in ``params``.

    String parameters must not contain quotes: they come from fixed vocabularies and
    are pasted into SQL literals.
    """
    for key, value in params.items():
        if isinstance(value, str) and ("'" in value or "\\" in value):
            raise ValueError(f"parameter {key}={value!r} would need quoting")
    expanded, prev = sql, ""
    while expanded != prev:  # innermost macros first, so macros may nest
        prev = expanded
        expanded = _MACRO.sub(
            lambda m: _macro(m.group(1), _split_args(m.group(2)), dialect), expanded
        )
    return expanded.format(**params)


#: A function that runs a parameter-source query on the seed-0 fixture.
Runner = Callable[[str], list[dict[str, Any]]]
