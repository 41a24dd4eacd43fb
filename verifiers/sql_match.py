"""``sql_match``: execution match of a candidate query against the gold query.

Spec::

    {"type": "sql_match", "preset": "test_suite",        # | "bird" | "spider_strict"
     "order": "auto", "duplicates": "bag", "column_perm": true,   # optional overrides
     "float_tol": 1e-6, "timeout_s": 5, "max_rows": 100000}

The verifier's ``state`` is a non-empty sequence of
:class:`~gymhub.sandbox.sql.DatabaseSource`: the episode's fixture first, then
perturbed copies (same schema, different data). A query that is right only by
accident on the fixture — a hard-coded answer, a filter that happens to work —
fails on a copy; the score is 1.0 only when the candidate matches on every database.

Presets (see :mod:`.sql_compare` for the value rules):

============== ======================= ============ ============ =========
preset          order                   duplicates   column perm  float_tol
============== ======================= ============ ============ =========
test_suite      gold's top-level ORDER  bag          yes          1e-6
bird            ignored                 set          no           0
spider_strict   always                  bag          no           0
============== ======================= ============ ============ =========

Gold results are cached per ``(source.key, dialect, gold SQL)`` in a bounded LRU,
so the gold query runs once per database however often candidates are scored.
The candidate's failures (syntax, refused write, timeout, oversized text, a non-text
submission) are a 0 with a reason; failures of the judge itself (gold query broken,
database unavailable, bad state) are ``Score.error``, which the learner masks.

Components: ``fixture`` and ``perturbed`` (where it matched), and two measures of how
close a wrong query came, which a learner may add to its reward (``partial_credit``
in the trainer's config) but which never change the score: ``runs`` (it ran on the
fixture) and ``rows`` (the F1 of its rows against the gold rows there).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from gymhub.errors import BackendError, GymhubError
from gymhub.sandbox.sql import (
    DatabaseSource,
    QueryError,
    QueryResult,
    SqlDatabase,
    SqliteImageSource,
)
from gymhub.types import Score

from .core import SpecReader, VerifyFn, verifier_kind
from .golden import GoldenCase
from .sql_compare import compare_results, has_top_level_order_by, row_overlap

__all__ = ["GOLD_CACHE_SIZE", "PRESETS"]

#: Default switches of each preset: (order, duplicates, column_perm, float_tol).
PRESETS: dict[str, tuple[str, str, bool, float]] = {
    "test_suite": ("auto", "bag", True, 1e-6),
    "bird": ("ignore", "set", False, 0.0),
    "spider_strict": ("strict", "bag", False, 0.0),
}
#: Gold results kept per compiled verifier.
GOLD_CACHE_SIZE = 4096


class _GoldFailed(GymhubError):
    """The gold query failed: the judge, not the candidate, is broken."""


class _GoldCache:
    """A thread-safe, bounded LRU of gold results."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[tuple[str, ...], QueryResult] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, ...]) -> QueryResult | None:
        with self._lock:
            hit = self._data.get(key)
            if hit is not None:
                self._data.move_to_end(key)
            return hit

    def put(self, key: tuple[str, ...], value: QueryResult) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)


@verifier_kind("sql_match")
def build_sql_match(spec: SpecReader) -> VerifyFn:
    """Compile a ``sql_match`` spec (fields in the module docstring)."""
    preset = spec.choice("preset", list(PRESETS), "test_suite")
    d_order, d_dup, d_perm, d_tol = PRESETS[preset]
    order_mode = spec.choice("order", ["auto", "strict", "ignore"], d_order)
    bag = spec.choice("duplicates", ["bag", "set"], d_dup) == "bag"
    column_perm = bool(spec.get("column_perm", bool, d_perm))
    float_tol = spec.number("float_tol", d_tol, lo=0.0)
    timeout_s = spec.number("timeout_s", 5.0, lo=0.001, hi=600.0)
    max_rows = spec.integer("max_rows", 100_000, lo=1)
    cache = _GoldCache(GOLD_CACHE_SIZE)

    def gold_result(db: SqlDatabase, key: str, gold_sql: str) -> QueryResult:
        cache_key = (key, db.dialect, gold_sql)
        hit = cache.get(cache_key)
        if hit is not None:
            return hit
        try:
            result = db.query(gold_sql, max_rows=max_rows, timeout_s=timeout_s, count_cap=max_rows)
        except QueryError as exc:
            raise _GoldFailed(f"gold query failed on {key}: {exc.kind}: {exc}") from exc
        if result.truncated:
            raise _GoldFailed(f"gold result on {key} has more than {max_rows:,} rows; "
                              "raise max_rows or narrow the task")
        cache.put(cache_key, result)
        return result

    def check_one(source: DatabaseSource, task: Any,
                  sql: str) -> tuple[bool, str, bool, float]:
        """``(match, reason, candidate_failed, row overlap)`` on one database."""
        db = source.open()
        try:
            gold_sql = _gold_sql(task, db.dialect)
            gold = gold_result(db, source.key, gold_sql)
            try:
                cand = db.query(sql, max_rows=max_rows, timeout_s=timeout_s, count_cap=max_rows)
            except QueryError as exc:
                return False, f"candidate query failed ({exc.kind}): {exc}", True, 0.0
            if cand.truncated:
                return False, f"candidate returned more than {max_rows:,} rows", False, 0.0
            ordered = order_mode == "strict" or (
                order_mode == "auto" and has_top_level_order_by(gold_sql))
            ok, reason = compare_results(gold, cand, order=ordered, bag=bag,
                                         column_perm=column_perm, float_tol=float_tol)
            overlap = 1.0 if ok else row_overlap(gold, cand, float_tol=float_tol)
            return ok, reason, False, overlap
        finally:
            db.close()

    def verify(submission: Any, task: Any, state: Any) -> Score:
        sources, problem = _sources(state)
        if problem:
            return Score.failed(problem)
        if not isinstance(submission, str):
            return _zero(sources, f"malformed: submission is {type(submission).__name__}, "
                                  "not SQL text")
        if not submission.strip():
            return _zero(sources, "malformed: the submitted query is empty")
        results: list[dict[str, Any]] = []
        for i, source in enumerate(sources):
            try:
                ok, reason, failed, overlap = check_one(source, task, submission)
            except _GoldFailed as exc:
                return Score.failed(str(exc), key=source.key)
            except (BackendError, _NoGold) as exc:
                return Score.failed(f"{source.key}: {exc}", key=source.key)
            except Exception as exc:  # a source whose open() explodes is the judge's problem
                return Score.failed(f"cannot use database {source.key}: "
                                    f"{type(exc).__name__}: {exc}", key=source.key)
            results.append({"key": source.key, "role": _role(source, i), "match": ok,
                            "reason": reason, "ran": not failed, "rows": overlap})
            if failed:  # the same text fails the same way everywhere: skip the rest
                results.extend({"key": s.key, "role": _role(s, j), "match": False,
                                "reason": "skipped (the candidate query failed)",
                                "ran": False, "rows": 0.0}
                               for j, s in enumerate(sources[i + 1:], i + 1))
                return _score(results, reason)
        return _score(results, None)

    return verify


class _NoGold(GymhubError):
    """The task has no usable gold query for this database's dialect."""


def _gold_sql(task: Any, dialect: str) -> str:
    gold = getattr(task, "gold", task)
    if isinstance(gold, str) and gold.strip():
        return gold
    if isinstance(gold, Mapping):
        sql = gold.get(dialect)
        if sql is None and dialect == "postgresql":
            sql = gold.get("postgres")
        if isinstance(sql, str) and sql.strip():
            return sql
        raise _NoGold(f"task.gold has no query for dialect {dialect!r} (has {sorted(gold)})")
    raise _NoGold(f"task.gold must be SQL text or a mapping dialect -> SQL, got {gold!r:.80}")


def _sources(state: Any) -> tuple[list[DatabaseSource], str | None]:
    if isinstance(state, str | bytes) or not isinstance(state, Sequence):
        return [], (f"state must be a sequence of database sources, got {type(state).__name__}")
    if not state:
        return [], "no databases to verify against (state is empty)"
    for i, s in enumerate(state):
        if not (callable(getattr(s, "open", None)) and isinstance(getattr(s, "key", None), str)):
            return [], f"state[{i}] is not a database source (needs .key and .open()): {s!r:.80}"
    return list(state), None


def _role(source: DatabaseSource, index: int) -> str:
    return str(getattr(source, "role", "fixture" if index == 0 else "perturbed"))


def _components(results: list[dict[str, Any]]) -> dict[str, float]:
    """The verdict's parts, and partial credit a learner may shape its reward with.

    ``fixture``/``perturbed``: matched there (the score needs both). ``runs``: the
    query ran on the fixture. ``rows``: the F1 of its rows against the gold rows on
    the fixture (:func:`.sql_compare.row_overlap`). Neither of the last two is a
    verdict: they say how close a wrong query came.
    """
    fixture = [r for r in results if r["role"] == "fixture"] or results[:1]
    perturbed = [r for r in results if r not in fixture]
    fix = 1.0 if all(r["match"] for r in fixture) else 0.0
    pert = sum(r["match"] for r in perturbed) / len(perturbed) if perturbed else fix
    runs = 1.0 if all(r["ran"] for r in fixture) else 0.0
    rows = min(float(r["rows"]) for r in fixture)
    return {"fixture": fix, "perturbed": pert, "runs": runs, "rows": rows}


def _score(results: list[dict[str, Any]], reason: str | None) -> Score:
    comps = _components(results)
    all_ok = all(r["match"] for r in results)
    if reason is None:
        bad = [r for r in results if not r["match"]]
        if all_ok:
            reason = f"match on all {len(results)} database(s)"
        elif comps["fixture"] == 1.0:
            n_pert = sum(r["role"] != "fixture" for r in results)
            reason = (f"matches the fixture but not {len(bad)} of {n_pert} perturbed "
                      "database(s), so it is not correct in general; "
                      f"{bad[0]['key']}: {bad[0]['reason']}")
        else:
            reason = f"mismatch on {bad[0]['key']}: {bad[0]['reason']}"
    return Score(1.0 if all_ok else 0.0, components=comps,
                 details={"reason": reason, "databases": results})


def _zero(sources: list[DatabaseSource], reason: str) -> Score:
    results = [{"key": s.key, "role": _role(s, i), "match": False, "reason": reason,
                "ran": False, "rows": 0.0} for i, s in enumerate(sources)]
    return Score(0.0, components=_components(results), details={"reason": reason,
                                                                "databases": results})


def _golden_image(rows: str) -> bytes:
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript("CREATE TABLE staff (name TEXT, team TEXT, salary REAL);" + rows)
        return conn.serialize()
    finally:
        conn.close()


# A fixture and one perturbed copy (same schema, other rows): a few kB, built in ~1 ms.
_STATE = (
    SqliteImageSource("golden/fixture", _golden_image(
        "INSERT INTO staff VALUES ('ann', 'ops', 10), ('bob', 'dev', 20), ('cid', 'dev', 30);"),
        "fixture"),
    SqliteImageSource("golden/perturbed", _golden_image(
        "INSERT INTO staff VALUES ('dee', 'dev', 5), ('eve', 'ops', 50), ('fay', 'ops', 7);"),
        "perturbed"),
)
_SQL = {"type": "sql_match"}
_GOLD = "SELECT name FROM staff WHERE team = 'dev' ORDER BY name"

GOLDEN = [
    GoldenCase("pass", _SQL, "select s.name from staff s where s.team='dev' order by 1",
               gold=_GOLD, state=_STATE, note="same rows, other text"),
    GoldenCase("pass", _SQL, "SELECT team, name FROM staff WHERE salary > 15",
               gold="SELECT name, team FROM staff WHERE salary > 15", state=_STATE,
               note="test_suite: row order and column order free when gold has no ORDER BY"),
    GoldenCase("fail", _SQL, "SELECT name FROM staff WHERE salary > 15 ORDER BY name",
               gold=_GOLD, state=_STATE,
               note="right on the fixture only: the perturbed copy catches it"),
    GoldenCase("fail", _SQL, "SELECT name FROM staff WHERE team = 'dev' ORDER BY name DESC",
               gold=_GOLD, state=_STATE, note="gold orders, so order counts"),
    GoldenCase("malformed", _SQL, "SELEC name FROM staff", gold=_GOLD, state=_STATE,
               note="a syntax error"),
    GoldenCase("malformed", _SQL, {"sql": "SELECT 1"}, gold=_GOLD, state=_STATE,
               note="not SQL text"),
    GoldenCase("error", _SQL, "SELECT name FROM staff", gold="SELECT name FROM no_such_table",
               state=_STATE, note="a broken gold query is the judge's failure"),
    GoldenCase("error", _SQL, "SELECT 1", gold=_GOLD, state=None, note="no database to run on"),
]
