"""Render a :class:`~.types.QueryResult` as a compact text table for the agent.

The agent reads results as tokens, so the table is short and unambiguous: one header,
``|``-separated cells cut at ~40 characters, ``NULL`` for SQL NULL (never an empty
cell, which would look like ``''``), floats without binary noise, bytes as hex, and a
footer that always says how many rows exist and how many are shown. The output never
exceeds ``max_chars``: rows are dropped from the end first, then the text is cut.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from gymhub.sandbox.sql.types import QueryResult

__all__ = ["format_cell", "render_result"]

CELL_CHARS = 40
_NUMERIC = (int, float, decimal.Decimal)


def format_cell(value: Any, width: int = CELL_CHARS) -> str:
    """One value as the agent sees it, at most ``width`` characters."""
    if value is None:
        text = "NULL"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float):
        text = _float(value)
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        text = "x'" + raw[: width // 2].hex() + ("…" if len(raw) > width // 2 else "'")
    elif isinstance(value, dt.date | dt.time):
        text = value.isoformat()
    else:
        text = str(value)
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return text if len(text) <= width else text[: width - 1] + "…"


def _float(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return f"{value:.1f}"
    return f"{value:.10g}"


def _footer(shown: int, result: QueryResult) -> str:
    total = result.row_count
    noun = "row" if total == 1 and not result.more else "rows"
    if shown == total and not result.more:
        return f"({total:,} {noun})"
    at_least = "at least " if result.more else ""
    return f"(showing {shown:,} of {at_least}{total:,} {noun})"


def render_result(result: QueryResult, *, max_chars: int = 4000) -> str:
    """A compact, capped text table of ``result``.

    Example::

        id | name  | total
        ---+-------+------
         1 | Alice |  3.5
         2 | NULL  | 12.0
        (2 rows)

    Args:
        result: what :meth:`SqlDatabase.query` returned.
        max_chars: hard cap on the length of the returned text.
    """
    if not result.columns:
        return _cut(_footer(0, result) if result.row_count else "(no result columns)", max_chars)
    header = [format_cell(c) for c in result.columns]
    cells = [[format_cell(v) for v in row] for row in result.rows]
    numeric = [
        all(isinstance(r[i], _NUMERIC) and not isinstance(r[i], bool)
            for r in result.rows if r[i] is not None)
        for i in range(len(header))
    ]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]

    def line(values: list[str], align: bool) -> str:
        parts = [
            v.rjust(w) if align and num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return " | ".join(parts).rstrip()

    lines = [line(header, False), "-+-".join("-" * w for w in widths)]
    used = sum(len(x) + 1 for x in lines)
    shown = 0
    worst_footer = len(_footer(0, result)) + 2
    for row in cells:
        text = line(row, True)
        if used + len(text) + 1 + worst_footer > max_chars:
            break
        lines.append(text)
        used += len(text) + 1
        shown += 1
    lines.append(_footer(shown, result))
    return _cut("\n".join(lines), max_chars)


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[: max(0, max_chars - 1)] + "…" if max_chars > 0 else ""
