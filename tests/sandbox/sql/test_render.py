"""Rendering query results for the agent (gymhub.sandbox.sql.render)."""

from __future__ import annotations

import pytest

from gymhub.sandbox.sql import (
    QueryResult,
    render_result,
)


def result(columns: tuple[str, ...], rows: list[tuple[object, ...]], count: int | None = None,
           more: bool = False) -> QueryResult:
    n = len(rows) if count is None else count
    return QueryResult(columns, tuple(rows), n, more, more or len(rows) < n, 1.0)


def test_render_basic() -> None:
    text = render_result(result(("id", "name", "score", "blob"),
                                [(1, "Ann", 0.1 + 0.2, b"\x00\xff"), (22, None, 3.0, None)]))
    lines = text.splitlines()
    assert lines[0].split(" | ")[0].strip() == "id"
    assert set(lines[1]) <= {"-", "+"}
    assert "0.3 " in lines[2] + " " and "x'00ff'" in lines[2]
    assert "NULL" in lines[3] and "3.0" in lines[3]
    assert lines[-1] == "(2 rows)"
    assert render_result(result(("x",), [(1,)])).endswith("(1 row)")
    assert render_result(result(("x",), [])).endswith("(0 rows)")


def test_render_truncation_and_footers() -> None:
    long = "y" * 100
    text = render_result(result(("s",), [(long,), ("a\nb",)]))
    assert "y" * 39 + "…" in text and "y" * 41 not in text
    assert "a\\nb" in text
    assert render_result(result(("x",), [(i,) for i in range(20)], count=1234)).endswith(
        "(showing 20 of 1,234 rows)")
    assert render_result(result(("x",), [(i,) for i in range(200)], count=100_000, more=True)
                         ).endswith("(showing 200 of at least 100,000 rows)")


@pytest.mark.parametrize("max_chars", [0, 1, 10, 40, 100, 500, 4000])
def test_render_never_exceeds_max_chars(max_chars: int) -> None:
    wide = result(tuple(f"column_{i}" for i in range(30)),
                  [tuple("v" * 60 for _ in range(30)) for _ in range(50)])
    for res in (wide, result(("x",), [(i,) for i in range(5000)])):
        text = render_result(res, max_chars=max_chars)
        assert len(text) <= max_chars
    text = render_result(result(("x",), [(i,) for i in range(5000)]), max_chars=500)
    assert text.endswith("of 5,000 rows)")
