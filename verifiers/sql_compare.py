"""Pure comparison of two query results, as the SQL execution-match verifier needs it.

One function, :func:`compare_results`, covers the three families of published
semantics through four switches:

* test-suite (Zhong et al. 2020, Spider's official metric): rows as a multiset, order
  only when the gold query orders, any permutation of columns, here with a float
  tolerance;
* BIRD: ``set(candidate) == set(gold)`` — order and duplicates ignored, columns fixed;
* Spider's original exec match: ordered lists, duplicates and column order matter.

Values are normalised first so that drivers and engines agree: ``bool`` → int,
``Decimal`` → float, dates and times → ISO strings, ``memoryview`` → bytes, lists →
tuples; ``3 == 3.0`` (Python's own rule) and NULLs equal each other. Strings never
equal numbers (``'3'`` is not ``3``), and NULL is not ``''``.

As in every reference implementation, two empty results match whatever their
columns: nothing distinguishes them on that database (perturbed copies will).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from gymhub.sandbox.sql import QueryResult
from gymhub.sandbox.sql.types import iter_words

__all__ = ["compare_results", "has_top_level_order_by", "normalize_value", "row_overlap"]

Row = tuple[Any, ...]

#: Column permutations tried at most before giving up (after pruning, usually 1).
MAX_PERMUTATIONS = 2_000
#: Largest leftover group matched pair by pair when floats are off by noise.
_MAX_BIPARTITE = 300


class _NaN:
    """NaN as a hashable value equal only to itself, so NaN rows compare equal."""

    def __repr__(self) -> str:
        return "nan"


NAN = _NaN()


def normalize_value(value: Any) -> Any:
    """Map a driver value to the comparable form described in the module docstring."""
    if value is None or (isinstance(value, str | int) and not isinstance(value, bool)):
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return NAN if math.isnan(value) else value
    if isinstance(value, decimal.Decimal):
        return NAN if value.is_nan() else float(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return tuple(normalize_value(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def has_top_level_order_by(sql: str) -> bool:
    """True when ``sql`` orders its final result (an ``ORDER BY`` outside parentheses).

    ``ORDER BY`` inside subqueries, CTEs, window specs and aggregate calls does not
    order the result, and words inside strings, quoted identifiers and comments are
    not keywords at all.
    """
    previous: tuple[str, int] | None = None
    for word, depth in iter_words(sql):
        if word == "BY" and depth == 0 and previous == ("ORDER", 0):
            return True
        previous = (word, depth)
    return False


def compare_results(
    gold: QueryResult,
    candidate: QueryResult,
    *,
    order: bool,
    bag: bool,
    column_perm: bool,
    float_tol: float,
) -> tuple[bool, str]:
    """Compare a candidate's result with the gold result.

    Args:
        gold: the reference query's result.
        candidate: the submitted query's result.
        order: rows must come in the same order.
        bag: duplicates count (a multiset); False compares distinct rows (a set).
        column_perm: the candidate's columns may be in any order.
        float_tol: relative and absolute tolerance for numbers (0: exact).

    Returns:
        ``(match, reason)``; the reason names the first difference found, using the
        candidate's values only (never the gold's), so it is safe to log or show.
    """
    g = [tuple(normalize_value(v) for v in r) for r in gold.rows]
    c = [tuple(normalize_value(v) for v in r) for r in candidate.rows]
    if not g and not c:
        return True, "match (both results are empty)"
    width_g = len(gold.columns) or (len(g[0]) if g else 0)
    width_c = len(candidate.columns) or (len(c[0]) if c else 0)
    if width_g != width_c:
        return False, (f"candidate has {_count(width_c, 'column')}, "
                       f"the expected result has {_count(width_g, 'column')}")
    if not bag:
        g, c = _distinct(g), _distinct(c)
    if len(g) != len(c):
        what = "row" if bag else "distinct row"
        return False, (f"candidate has {_count(len(c), what)}, "
                       f"the expected result has {_count(len(g), what)}")
    identity = tuple(range(width_g))
    ok, reason = _rows_match(g, c, order, float_tol)
    if ok or not column_perm or width_g < 2:
        return ok, reason
    tried = 0
    for perm in _permutations(g, c, order, bag, float_tol):
        if perm == identity:
            continue
        tried += 1
        if tried > MAX_PERMUTATIONS:
            return False, f"{reason} (gave up after {MAX_PERMUTATIONS} column orders)"
        permuted = [tuple(r[j] for j in perm) for r in c]
        if _rows_match(g, permuted, order, float_tol)[0]:
            return True, "match (columns in a different order)"
    return False, reason + ("" if tried == 0 else " (no column order matches either)")


def row_overlap(gold: QueryResult, candidate: QueryResult, *, float_tol: float) -> float:
    """Partial credit in [0, 1]: the F1 of the two results' rows, as multisets.

    A match is all-or-nothing, so a learner gets no signal from a query that returns
    most of the right rows or the right rows with an extra column. This measures how
    close a wrong result came: each row is compared as the multiset of its values
    (column order and names ignored; numbers rounded as the tolerance allows), and
    rows, duplicates counted, are matched between the two results; two empty results
    overlap fully. It is never a verdict: 1.0 does not mean the query is right (order,
    extra columns and perturbed copies are not looked at).
    """
    g = Counter(_value_bag(r, float_tol) for r in gold.rows)
    c = Counter(_value_bag(r, float_tol) for r in candidate.rows)
    total = sum(g.values()) + sum(c.values())
    if total == 0:
        return 1.0
    return 2 * sum((g & c).values()) / total


def _value_bag(row: Sequence[Any], tol: float) -> tuple[tuple[int, Any], ...]:
    return tuple(sorted(_coarse_key(tuple(normalize_value(v) for v in row), tol)))


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _distinct(rows: list[Row]) -> list[Row]:
    return list(dict.fromkeys(rows))


def _sort_key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (0, 0)
    if isinstance(value, int | float):
        return (1, value)
    if value is NAN:
        return (2, 0)
    if isinstance(value, str):
        return (3, value)
    if isinstance(value, bytes):
        return (4, value)
    return (5, repr(value))


def _coarse_key(row: Row, tol: float) -> tuple[tuple[int, Any], ...]:
    digits = max(1, min(15, int(-math.log10(tol)))) if tol > 0 else 17
    return tuple(
        (1, float(f"{v:.{digits}g}")) if isinstance(v, int | float) else _sort_key(v) for v in row
    )


def _close(a: Any, b: Any, tol: float) -> bool:
    if a == b:
        return True
    if tol > 0 and isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=tol, abs_tol=tol)
    return False


def _row_close(a: Row, b: Row, tol: float) -> bool:
    return all(_close(x, y, tol) for x, y in zip(a, b, strict=True))


def _show(row: Row) -> str:
    text = repr(row)
    return text if len(text) <= 120 else text[:119] + "…"


def _rows_match(g: list[Row], c: list[Row], order: bool, tol: float) -> tuple[bool, str]:
    """Same rows (ordered or as a multiset), both lists already of equal length."""
    if order:
        for i, (a, b) in enumerate(zip(g, c, strict=True)):
            if not _row_close(a, b, tol):
                if _multiset_match(g, c, tol):
                    return False, ("same rows in a different order, and row order matters "
                                   f"here (first difference at row {i + 1})")
                return False, f"row {i + 1} differs: candidate has {_show(b)}"
        return True, "match"
    if _multiset_match(g, c, tol):
        return True, "match"
    extra = next(iter(Counter(c) - Counter(g)), None)
    if extra is None:
        return False, "rows differ"
    return False, f"candidate row {_show(extra)} is not in the expected result"


def _multiset_match(g: list[Row], c: list[Row], tol: float) -> bool:
    cg, cc = Counter(g), Counter(c)
    if cg == cc:
        return True
    if tol <= 0:
        return False
    left = sorted((cg - cc).elements(), key=lambda r: _coarse_key(r, tol))
    right = sorted((cc - cg).elements(), key=lambda r: _coarse_key(r, tol))
    if len(left) != len(right):
        return False
    if all(_row_close(a, b, tol) for a, b in zip(left, right, strict=True)):
        return True
    return len(left) <= _MAX_BIPARTITE and _bipartite(left, right, tol)


def _bipartite(left: list[Row], right: list[Row], tol: float) -> bool:
    """A perfect matching of rows under tolerance (Kuhn's augmenting paths)."""
    edges = [[j for j, b in enumerate(right) if _row_close(a, b, tol)] for a in left]
    owner: list[int] = [-1] * len(right)

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j not in seen:
                seen.add(j)
                if owner[j] < 0 or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    return all(augment(i, set()) for i in range(len(left)))


def _column_compatible(gcol: Sequence[Any], ccol: Sequence[Any], order: bool, bag: bool,
                       tol: float) -> bool:
    """A necessary condition for gold column ``gcol`` to be candidate column ``ccol``."""
    if order:
        return all(_close(a, b, tol) for a, b in zip(gcol, ccol, strict=True))
    if bag:
        a = sorted(gcol, key=lambda v: _coarse_key((v,), tol))
        b = sorted(ccol, key=lambda v: _coarse_key((v,), tol))
        if all(_close(x, y, tol) for x, y in zip(a, b, strict=True)):
            return True
        # Noise may reorder near-equal numbers; the rest must still agree exactly.
        return tol > 0 and _exact_part(gcol, bag) == _exact_part(ccol, bag)
    if tol <= 0:
        return set(gcol) == set(ccol)
    return _exact_part(gcol, bag) == _exact_part(ccol, bag)


def _exact_part(col: Sequence[Any], bag: bool) -> tuple[Any, ...]:
    """The values a tolerance cannot change: non-numbers, and (for bags) how many numbers."""
    words = [v for v in col if not isinstance(v, int | float)]
    if bag:
        return (Counter(words), len(col) - len(words))
    return (set(words),)


def _permutations(g: list[Row], c: list[Row], order: bool, bag: bool,
                  tol: float) -> Iterator[tuple[int, ...]]:
    """Column orders worth trying, pruned by per-column values, identity-like first."""
    width = len(g[0])
    gcols = [[r[i] for r in g] for i in range(width)]
    ccols = [[r[j] for r in c] for j in range(width)]
    options = [
        [j for j in [i, *(k for k in range(width) if k != i)]
         if _column_compatible(gcols[i], ccols[j], order, bag, tol)]
        for i in range(width)
    ]
    chosen: list[int] = []
    used: set[int] = set()

    def walk(i: int) -> Iterator[tuple[int, ...]]:
        if i == width:
            yield tuple(chosen)
            return
        for j in options[i]:
            if j not in used:
                used.add(j)
                chosen.append(j)
                yield from walk(i + 1)
                chosen.pop()
                used.discard(j)

    yield from walk(0)
