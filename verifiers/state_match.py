"""``state_match``: a world's end state against a gold end state, row by natural key.

A state is a snapshot ``{table: [row dicts]}``. Rows are matched by a natural key per
table (generated ids are listed in ``ignore`` and never compared), and the verdict is
a diff, not a hash: which rows are missing, which are extra (collateral changes) and
which fields of a matched row differ, gold value beside the value found. Rows sharing
a key are compared as a multiset, so order never matters and a duplicated write shows
up as an extra row.

Spec::

    {"type": "state_match",
     "keys": {"orders": ["customer", "sku", "created_at"]},  # natural key per table
     "ignore": {"*": ["id"], "handoffs": ["summary"]},        # never compared
     "tables": ["orders", "accounts"],   # optional: compare only these
     "gold": "state",                    # optional: task.gold[gold] is the gold snapshot
     "float_tol": 1e-6, "max_diffs": 20}

A table without a key is compared on all its compared columns (a multiset of rows).
The state comes from the ``state`` argument, or the submission when ``state`` is
``None`` (offline rescoring of a stored snapshot). A malformed state scores 0 with a
reason; a malformed gold is the verifier's failure (``Score.error``), never a 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from gymhub.errors import SpecError
from gymhub.types import Score

from .core import SpecReader, VerifyFn, verifier_kind
from .golden import GoldenCase

__all__: list[str] = []

Rows = list[Mapping[str, Any]]


def _str_lists(spec: SpecReader, name: str) -> dict[str, tuple[str, ...]]:
    raw = spec.get(name, dict, {})
    out: dict[str, tuple[str, ...]] = {}
    for table, cols in raw.items():
        if not isinstance(cols, list) or not all(isinstance(c, str) and c for c in cols):
            raise SpecError(spec._field(f"{name}.{table}"), "must be a list of column names")
        out[str(table)] = tuple(cols)
    return out


def _snapshot(value: Any, what: str) -> dict[str, Rows] | str:
    """The snapshot, or why it is not one."""
    if not isinstance(value, Mapping):
        return f"{what} is {type(value).__name__}, not a mapping of table -> rows"
    for table, rows in value.items():
        if not isinstance(rows, list | tuple):
            return f"{what}: table {table!r} is {type(rows).__name__}, not a list of rows"
        for i, row in enumerate(rows):
            if not isinstance(row, Mapping):
                return f"{what}: row {i} of table {table!r} is {type(row).__name__}, not a mapping"
    return {str(t): list(r) for t, r in value.items()}


def _equal(a: Any, b: Any, tol: float) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b or math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=tol)
    return bool(a == b)


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


@verifier_kind("state_match")
def build_state_match(spec: SpecReader) -> VerifyFn:
    """Compile a ``state_match`` spec (see the module docstring)."""
    keys = _str_lists(spec, "keys")
    ignore = _str_lists(spec, "ignore")
    for table, cols in keys.items():
        dropped = set(cols) & (set(ignore.get(table, ())) | set(ignore.get("*", ())))
        if dropped:
            raise SpecError(spec._field(f"keys.{table}"),
                            f"key column(s) {sorted(dropped)} are also ignored")
    only = spec.get("tables", list, None)
    if only is not None and not all(isinstance(t, str) for t in only):
        raise SpecError(spec._field("tables"), "must be a list of table names")
    gold_field = spec.get("gold", str, None)
    tol = spec.number("float_tol", 1e-6, lo=0.0)
    max_diffs = spec.integer("max_diffs", 20, lo=1)

    skips: dict[str, frozenset[str]] = {}

    def compared(table: str, row: Mapping[str, Any]) -> dict[str, Any]:
        skip = skips.get(table)
        if skip is None:
            skip = skips[table] = frozenset(ignore.get(table, ())) | frozenset(
                ignore.get("*", ()))
        return {k: v for k, v in row.items() if k not in skip}

    def key_of(table: str, row: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        cols = keys.get(table) or tuple(sorted(row))
        key = {c: row.get(c) for c in cols}
        values = tuple(key.values())
        try:
            hash(values)
        except TypeError:  # lists or dicts in a key column: fall back to canonical JSON
            return _canon(key), key
        return (cols, values), key

    def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
        return a.keys() == b.keys() and all(_equal(a[k], b[k], tol) for k in a)

    def diff_table(table: str, gold: Rows, got: Rows, out: dict[str, list[Any]]) -> None:
        if gold == got:  # the common case, decided in C: nothing to diff
            return
        groups: dict[Any, tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]] = {}
        for side, rows in ((0, gold), (1, got)):
            for row in rows:
                r = compared(table, row)
                k, key = key_of(table, r)
                group = groups.setdefault(k, (key, [], []))
                (group[1] if side == 0 else group[2]).append(r)
        for key, g_rows, a_rows in groups.values():
            left = list(a_rows)
            unmatched = []
            for g in g_rows:
                hit = next((i for i, a in enumerate(left) if same(g, a)), None)
                if hit is None:
                    unmatched.append(g)
                else:
                    left.pop(hit)
            for g, a in zip(unmatched, left, strict=False):
                fields = {c: {"gold": g.get(c), "got": a.get(c)}
                          for c in sorted(set(g) | set(a))
                          if not _equal(g.get(c), a.get(c), tol)}
                out["changed"].append({"table": table, "key": key, "fields": fields})
            for g in unmatched[len(left):]:
                out["missing"].append({"table": table, "key": key, "row": g})
            for a in left[len(unmatched):]:
                out["extra"].append({"table": table, "key": key, "row": a})

    def verify(submission: Any, task: Any, state: Any) -> Score:
        got = _snapshot(submission if state is None else state, "state")
        if isinstance(got, str):
            return Score(0.0, details={"reason": got})
        raw_gold = getattr(task, "gold", None)
        if gold_field is not None:
            if not isinstance(raw_gold, Mapping) or gold_field not in raw_gold:
                return Score.failed(f"task.gold has no field {gold_field!r} with the gold state")
            raw_gold = raw_gold[gold_field]
        gold = _snapshot(raw_gold, "gold state")
        if isinstance(gold, str):
            return Score.failed(gold)
        tables = list(dict.fromkeys([*gold, *got])) if only is None else list(only)
        out: dict[str, list[Any]] = {"missing": [], "extra": [], "changed": []}
        for table in tables:
            diff_table(table, gold.get(table, []), got.get(table, []), out)
        counts = {k: len(v) for k, v in out.items()}
        ok = not any(counts.values())
        reason = "match" if ok else "state differs: " + ", ".join(
            f"{n} {k}" for k, n in counts.items() if n)
        details: dict[str, Any] = {"reason": reason, "tables": len(tables), **{
            f"{k}_rows": n for k, n in counts.items()}}
        for k, items in out.items():
            if items:
                details[k] = items[:max_diffs]
        return Score(1.0 if ok else 0.0, details=details)

    return verify


_SPEC = {"type": "state_match", "keys": {"orders": ["customer", "sku"], "accounts": ["number"]},
         "ignore": {"*": ["id"]}}
_GOLD = {"orders": [{"id": "A1", "customer": "ann", "sku": "S1", "qty": 2},
                    {"id": "A2", "customer": "bob", "sku": "S2", "qty": 1}],
         "accounts": [{"number": "X", "balance": 10.0}]}

GOLDEN = [
    GoldenCase("pass", _SPEC, None, gold=_GOLD, note="other ids, other row order",
               state={"accounts": [{"number": "X", "balance": 10.0}],
                      "orders": [{"id": "Z9", "customer": "bob", "sku": "S2", "qty": 1},
                                 {"id": "Z8", "customer": "ann", "sku": "S1", "qty": 2}]}),
    GoldenCase("fail", _SPEC, None, gold=_GOLD, note="one field differs",
               state={**_GOLD, "accounts": [{"number": "X", "balance": 9.5}]}),
    GoldenCase("fail", _SPEC, None, gold=_GOLD, note="collateral: an extra row",
               state={**_GOLD, "orders": [*_GOLD["orders"],
                                          {"id": "A3", "customer": "ann", "sku": "S1", "qty": 2}]}),
    GoldenCase("fail", {**_SPEC, "gold": "state"}, None, gold={"state": _GOLD},
               note="a missing row, gold read from task.gold['state']",
               state={**_GOLD, "orders": _GOLD["orders"][:1]}),
    GoldenCase("malformed", _SPEC, "DROP TABLE orders", gold=_GOLD, note="not a snapshot"),
    GoldenCase("malformed", _SPEC, None, gold=_GOLD, state={"orders": "rows"},
               note="a table that is not a list of rows"),
    GoldenCase("error", {**_SPEC, "gold": "state"}, None, gold={"answer": 1}, state=_GOLD,
               note="the gold state is missing: the verifier cannot judge"),
]
