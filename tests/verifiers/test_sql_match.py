from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from gymhub.errors import SpecError
from gymhub.sandbox.sql import QueryResult, SqliteDatabase, SqliteImageSource
from gymhub.verifiers import compile
from gymhub.verifiers.sql_compare import compare_results, has_top_level_order_by, row_overlap

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT, email TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers,
                     amount REAL, status TEXT);
"""
FIXTURE = """
INSERT INTO customers VALUES (1, 'Ann', 'Paris', 'ann@x.org'), (2, 'Bob', 'Berlin', 'bob@x.org'),
    (3, 'Cid', 'Paris', NULL), (4, 'Dee', 'Rome', ''), (5, 'Eve', 'Berlin', 'eve@x.org');
INSERT INTO orders VALUES (1, 1, 10.0, 'paid'), (2, 1, 20.5, 'paid'), (3, 2, 7.25, 'refunded'),
    (4, 3, 30.0, 'paid'), (5, 3, 30.0, 'paid'), (6, 5, 0.1, 'paid'), (7, 5, 0.2, 'pending');
"""
PERTURBED = [
    """
INSERT INTO customers VALUES (1, 'Ann', 'Rome', 'a@y.org'), (2, 'Bob', 'Paris', NULL),
    (3, 'Cid', 'Paris', 'c@y.org'), (4, 'Dee', 'Berlin', 'd@y.org'), (5, 'Eve', 'Paris', ''),
    (6, 'Fay', 'Oslo', 'f@y.org');
INSERT INTO orders VALUES (1, 2, 10.0, 'paid'), (2, 2, 12.0, 'pending'), (3, 4, 99.0, 'paid'),
    (4, 6, 5.5, 'paid'), (5, 1, 10.0, 'refunded'), (6, 5, 0.1, 'paid'), (7, 5, 0.2, 'paid'),
    (8, 3, 1.0, 'paid');
""",
    """
INSERT INTO customers VALUES (1, 'Ann', 'Berlin', NULL), (2, 'Bob', 'Berlin', 'b@z.org'),
    (3, 'Cid', 'Rome', 'c@z.org'), (4, 'Dee', 'Paris', 'd@z.org'), (7, 'Gus', 'Paris', '');
INSERT INTO orders VALUES (1, 4, 8.0, 'paid'), (2, 4, 8.0, 'paid'), (3, 1, 15.0, 'paid'),
    (4, 2, 10.0, 'pending'), (5, 7, 45.0, 'paid'), (6, 3, 2.5, 'refunded');
""",
]


def make_image(data: str) -> bytes:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA + data)
    conn.commit()
    return conn.serialize()


FIXTURE_IMAGE = make_image(FIXTURE)
PERTURBED_IMAGES = [make_image(d) for d in PERTURBED]


@pytest.fixture(scope="module")
def state() -> list[SqliteImageSource]:
    return [SqliteImageSource("shop/fixture", FIXTURE_IMAGE, "fixture")] + [
        SqliteImageSource(f"shop/perturbed={i}", img, "perturbed")
        for i, img in enumerate(PERTURBED_IMAGES)
    ]


def task(gold: Any) -> SimpleNamespace:
    return SimpleNamespace(id="t", gold=gold)


PAID = "SELECT DISTINCT c.name FROM customers c JOIN orders o ON o.customer_id = c.id " \
       "WHERE o.status = 'paid'"

# (case id, preset, gold, candidate, expected value)
GOLDEN: list[tuple[str, str, str, str, float]] = [
    # --- equivalent rewrites pass (test_suite)
    ("join_vs_subquery", "test_suite", PAID,
     "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders WHERE status = 'paid')",
     1.0),
    ("in_vs_exists", "test_suite",
     "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders)",
     "SELECT name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id)",
     1.0),
    ("swapped_columns", "test_suite", "SELECT id, name FROM customers",
     "SELECT name, id FROM customers", 1.0),
    ("swapped_three_columns", "test_suite", "SELECT id, customer_id, amount FROM orders",
     "SELECT amount, id, customer_id FROM orders", 1.0),
    ("aliasing", "test_suite", "SELECT name AS customer_name FROM customers",
     "SELECT c.name FROM customers AS c", 1.0),
    ("count_star_vs_count_1", "test_suite", "SELECT count(*) FROM orders WHERE status = 'paid'",
     "SELECT COUNT(1) FROM orders WHERE status = 'paid'", 1.0),
    ("between_vs_range", "test_suite", "SELECT id FROM orders WHERE amount BETWEEN 10 AND 30",
     "SELECT id FROM orders WHERE amount >= 10 AND NOT amount > 30", 1.0),
    ("unordered_gold_any_order", "test_suite", "SELECT name FROM customers",
     "SELECT name FROM customers ORDER BY name DESC", 1.0),
    ("float_noise", "test_suite", "SELECT 0.3", "SELECT 0.1 + 0.2", 1.0),
    ("float_noise_in_data", "test_suite",
     "SELECT customer_id, round(sum(amount), 2) FROM orders GROUP BY customer_id",
     "SELECT customer_id, sum(amount) FROM orders GROUP BY customer_id", 1.0),
    ("int_equals_float", "test_suite", "SELECT count(*) FROM orders",
     "SELECT CAST(count(*) AS REAL) FROM orders", 1.0),
    ("ordered_same_order", "test_suite", "SELECT id FROM orders ORDER BY amount DESC, id",
     "SELECT id FROM orders ORDER BY -amount, id ASC", 1.0),
    ("both_empty", "test_suite", "SELECT name FROM customers WHERE city = 'Lima'",
     "SELECT name FROM customers WHERE 1 = 0", 1.0),
    ("having_vs_subquery", "test_suite",
     "SELECT customer_id FROM orders GROUP BY customer_id HAVING count(*) > 1",
     "SELECT DISTINCT customer_id FROM orders o WHERE "
     "(SELECT count(*) FROM orders p WHERE p.customer_id = o.customer_id) >= 2", 1.0),
    ("left_join_vs_correlated", "test_suite",
     "SELECT c.name, count(o.id) FROM customers c LEFT JOIN orders o ON o.customer_id = c.id "
     "GROUP BY c.id",
     "SELECT name, (SELECT count(*) FROM orders WHERE customer_id = customers.id) FROM customers",
     1.0),
    ("order_by_in_subquery_only", "test_suite",
     "SELECT * FROM (SELECT name FROM customers ORDER BY name) AS t",
     "SELECT name FROM customers ORDER BY name DESC", 1.0),
    ("order_by_in_string_only", "test_suite",
     "SELECT name FROM customers WHERE name <> 'x ORDER BY y' -- ORDER BY name",
     "SELECT name FROM customers ORDER BY id DESC", 1.0),
    ("union_vs_in", "test_suite",
     "SELECT name FROM customers WHERE city = 'Paris' UNION SELECT name FROM customers "
     "WHERE city = 'Rome'",
     "SELECT DISTINCT name FROM customers WHERE city IN ('Paris', 'Rome')", 1.0),
    ("cte_vs_subquery", "test_suite",
     "WITH big AS (SELECT customer_id FROM orders WHERE amount > 9) "
     "SELECT DISTINCT customer_id FROM big",
     "SELECT DISTINCT customer_id FROM (SELECT * FROM orders WHERE amount > 9)", 1.0),
    ("distinct_on_unique_key", "test_suite", "SELECT DISTINCT id FROM customers",
     "SELECT id FROM customers", 1.0),
    ("nulls_equal_nulls", "test_suite", "SELECT email FROM customers WHERE email IS NULL",
     "SELECT CASE WHEN 1 THEN NULL END FROM customers WHERE email IS NULL", 1.0),
    ("trailing_semicolon_and_comment", "test_suite", "SELECT count(*) FROM customers",
     "SELECT count(*) FROM customers; -- done", 1.0),
    # --- near misses fail (test_suite)
    ("off_by_one_comparison", "test_suite", "SELECT id FROM orders WHERE amount >= 10",
     "SELECT id FROM orders WHERE amount > 10", 0.0),
    ("missing_distinct", "test_suite", "SELECT DISTINCT customer_id FROM orders",
     "SELECT customer_id FROM orders", 0.0),
    ("wrong_order_when_gold_ordered", "test_suite",
     "SELECT id FROM orders ORDER BY amount DESC, id", "SELECT id FROM orders ORDER BY amount, id",
     0.0),
    ("extra_column", "test_suite", "SELECT name FROM customers",
     "SELECT id, name FROM customers", 0.0),
    ("missing_row", "test_suite", "SELECT name FROM customers WHERE city = 'Paris'",
     "SELECT name FROM customers WHERE city = 'Paris' AND id > 1", 0.0),
    ("null_vs_empty_string", "test_suite", "SELECT coalesce(email, '') FROM customers",
     "SELECT email FROM customers", 0.0),
    ("swapped_limit", "test_suite", "SELECT id FROM orders ORDER BY amount DESC, id LIMIT 2",
     "SELECT id FROM orders ORDER BY amount ASC, id LIMIT 2", 0.0),
    ("limit_offset_swapped", "test_suite", "SELECT id FROM orders ORDER BY id LIMIT 2 OFFSET 1",
     "SELECT id FROM orders ORDER BY id LIMIT 1 OFFSET 2", 0.0),
    ("wrong_aggregate", "test_suite", "SELECT sum(amount) FROM orders",
     "SELECT avg(amount) FROM orders", 0.0),
    ("text_is_not_number", "test_suite", "SELECT id FROM customers",
     "SELECT CAST(id AS TEXT) FROM customers", 0.0),
    ("case_of_strings", "test_suite", "SELECT name FROM customers",
     "SELECT upper(name) FROM customers", 0.0),
    ("float_beyond_tolerance", "test_suite", "SELECT 0.3", "SELECT 0.3001", 0.0),
    ("inner_vs_left_join", "test_suite",
     "SELECT c.name, o.id FROM customers c LEFT JOIN orders o ON o.customer_id = c.id",
     "SELECT c.name, o.id FROM customers c JOIN orders o ON o.customer_id = c.id", 0.0),
    ("empty_vs_rows", "test_suite", "SELECT name FROM customers WHERE city = 'Lima'",
     "SELECT name FROM customers WHERE city = 'Rome'", 0.0),
    # --- right on the fixture by accident, wrong on perturbed copies
    ("hard_coded_ids", "test_suite", "SELECT name FROM customers WHERE city = 'Paris'",
     "SELECT name FROM customers WHERE id IN (1, 3)", 0.0),
    ("hard_coded_count", "test_suite", "SELECT count(*) FROM orders", "SELECT 7", 0.0),
    ("coincidental_filter", "test_suite",
     "SELECT name FROM customers WHERE email IS NULL OR email = ''",
     "SELECT name FROM customers WHERE id IN (3, 4)", 0.0),
    # --- bird: set semantics, fixed column order, exact values
    ("bird_duplicates_ignored", "bird", "SELECT DISTINCT customer_id FROM orders",
     "SELECT customer_id FROM orders", 1.0),
    ("bird_order_ignored_even_if_gold_orders", "bird",
     "SELECT id FROM orders ORDER BY amount DESC, id", "SELECT id FROM orders ORDER BY amount, id",
     1.0),
    ("bird_columns_fixed", "bird", "SELECT id, name FROM customers",
     "SELECT name, id FROM customers", 0.0),
    ("bird_float_exact", "bird", "SELECT 0.3", "SELECT 0.1 + 0.2", 0.0),
    ("bird_null_vs_empty", "bird", "SELECT coalesce(email, '') FROM customers",
     "SELECT email FROM customers", 0.0),
    ("bird_equivalent_join", "bird", PAID,
     "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders WHERE status = 'paid')",
     1.0),
    # --- spider_strict: ordered lists, duplicates and column order matter, exact values
    ("spider_order_matters_without_order_by", "spider_strict", "SELECT name FROM customers",
     "SELECT name FROM customers ORDER BY name DESC", 0.0),
    ("spider_duplicates_matter", "spider_strict", "SELECT DISTINCT customer_id FROM orders",
     "SELECT customer_id FROM orders", 0.0),
    ("spider_columns_fixed", "spider_strict", "SELECT id, name FROM customers",
     "SELECT name, id FROM customers", 0.0),
    ("spider_float_exact", "spider_strict", "SELECT 0.3", "SELECT 0.1 + 0.2", 0.0),
    ("spider_same_query_passes", "spider_strict", "SELECT id, name FROM customers ORDER BY id",
     "select id, name from customers order by id", 1.0),
    ("spider_int_equals_float", "spider_strict", "SELECT count(*) FROM orders",
     "SELECT CAST(count(*) AS REAL) FROM orders", 1.0),
]


@pytest.mark.parametrize(("preset", "gold", "candidate", "expected"),
                         [c[1:] for c in GOLDEN], ids=[c[0] for c in GOLDEN])
def test_golden_cases(state: list[SqliteImageSource], preset: str, gold: str, candidate: str,
                      expected: float) -> None:
    verifier = compile({"type": "sql_match", "preset": preset})
    score = verifier(candidate, task(gold), state)
    assert score.ok, score.error
    assert score.value == expected, score.details["reason"]
    assert [d["key"] for d in score.details["databases"]] == [s.key for s in state]
    # The gold query always scores 1.0 against itself: the cheapest end-to-end check.
    assert verifier(gold, task(gold), state).value == 1.0


def test_golden_case_count() -> None:
    assert len(GOLDEN) >= 40
    assert {c[1] for c in GOLDEN} == {"test_suite", "bird", "spider_strict"}
    assert sum(c[4] == 0.0 for c in GOLDEN) >= 15


def test_fixture_only_match_is_reported(state: list[SqliteImageSource]) -> None:
    verifier = compile({"type": "sql_match"})
    score = verifier("SELECT name FROM customers WHERE id IN (1, 3)",
                     task("SELECT name FROM customers WHERE city = 'Paris'"), state)
    assert score.value == 0.0
    assert score.components == {"fixture": 1.0, "perturbed": 0.0, "runs": 1.0, "rows": 1.0}
    assert "matches the fixture but not 2 of 2 perturbed" in score.details["reason"]
    dbs = score.details["databases"]
    assert [d["match"] for d in dbs] == [True, False, False]
    assert {"key", "match", "reason"} <= set(dbs[0])
    good = verifier("SELECT name FROM customers WHERE city = 'Paris'",
                    task("SELECT name FROM customers WHERE city = 'Paris'"), state)
    assert good.components == {"fixture": 1.0, "perturbed": 1.0, "runs": 1.0, "rows": 1.0}
    assert good.details["reason"] == "match on all 3 database(s)"


def test_partial_perturbed_fraction(state: list[SqliteImageSource]) -> None:
    # Right on the fixture and the first copy, wrong on the second.
    score = compile({"type": "sql_match"})(
        "SELECT count(*) FROM orders WHERE amount > 0.05 AND id < 8",
        task("SELECT count(*) FROM orders"), state)
    assert score.value == 0.0
    assert score.components == {"fixture": 1.0, "perturbed": 0.5, "runs": 1.0, "rows": 1.0}


@pytest.mark.parametrize(("submission", "reason"), [
    (None, "malformed"), (42, "malformed"), ({"sql": "SELECT 1"}, "malformed"),
    ("", "malformed"), ("   ", "malformed"),
    ("SELEC name FROM customers", "syntax"),
    ("SELECT nope FROM customers", "syntax"),
    ("DELETE FROM customers", "refused"),
    ("DROP TABLE orders", "refused"),
    ("ATTACH ':memory:' AS x", "refused"),
    ("SELECT 1; DROP TABLE orders", "refused"),
    ("SELECT '" + "x" * 30_000 + "'", "too_large"),
    ("SELECT '\ud800'", "encoding"),
])
def test_bad_candidates_score_zero_with_reason(state: list[SqliteImageSource], submission: Any,
                                               reason: str) -> None:
    score = compile({"type": "sql_match"})(submission, task("SELECT name FROM customers"), state)
    assert score.ok and score.value == 0.0
    assert reason in score.details["reason"]
    assert score.components == {"fixture": 0.0, "perturbed": 0.0, "runs": 0.0, "rows": 0.0}
    assert all(not d["match"] for d in score.details["databases"])


def test_candidate_timeout_scores_zero_and_skips_the_rest(state: list[SqliteImageSource]) -> None:
    verifier = compile({"type": "sql_match", "timeout_s": 0.3})
    score = verifier("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                     "SELECT count(*) FROM r", task("SELECT 1"), state)
    assert score.ok and score.value == 0.0 and "timeout" in score.details["reason"]
    # The deadline is paid once, not once per database: the copies are never queried.
    assert len(score.details["databases"]) == len(state) > 1
    assert all(d["reason"].startswith("skipped") for d in score.details["databases"][1:])


@dataclass
class CountingSource:
    """Wraps an image source and records opens, closes and queries."""

    inner: SqliteImageSource
    log: dict[str, int] = field(default_factory=dict)
    fail_open: bool = False

    @property
    def key(self) -> str:
        return self.inner.key

    @property
    def role(self) -> str:
        return self.inner.role

    def open(self) -> CountingDb:
        if self.fail_open:
            raise OSError("fixture volume is gone")
        self.log["open"] = self.log.get("open", 0) + 1
        return CountingDb(self.inner.open(), self.log)


class CountingDb:
    def __init__(self, db: SqliteDatabase, log: dict[str, int]) -> None:
        self.db, self.log = db, log
        self.label, self.dialect = db.label, db.dialect

    def query(self, sql: str, **kw: Any) -> QueryResult:
        self.log[sql] = self.log.get(sql, 0) + 1
        return self.db.query(sql, **kw)

    def tables(self) -> list[str]:
        return self.db.tables()

    def describe(self, table: str) -> Any:
        return self.db.describe(table)

    def close(self) -> None:
        self.log["close"] = self.log.get("close", 0) + 1
        self.db.close()


def test_gold_runs_once_and_every_database_is_closed(state: list[SqliteImageSource]) -> None:
    sources = [CountingSource(s) for s in state]
    verifier = compile({"type": "sql_match"})
    gold = "SELECT name FROM customers WHERE city = 'Paris'"
    for candidate in ["SELECT name FROM customers WHERE 'Paris' = city", "SELECT 1",
                      "SELECT name FROM customers WHERE city = 'Paris' ORDER BY 1"]:
        verifier(candidate, task(gold), sources)
    for s in sources:
        assert s.log[gold] == 1  # cached after the first verification
        assert s.log["open"] == s.log["close"] == 3
    # A different compiled verifier has its own cache; a different gold is a new entry.
    other = "SELECT count(*) FROM customers"
    verifier("SELECT 1", task(other), sources)
    assert all(s.log[other] == 1 for s in sources)


def test_infrastructure_failures_are_errors(state: list[SqliteImageSource]) -> None:
    verifier = compile({"type": "sql_match"})
    gold = task("SELECT name FROM customers")
    broken_gold = verifier("SELECT name FROM customers", task("SELEC broken"), state)
    assert not broken_gold.ok and "gold query failed" in (broken_gold.error or "")
    write_gold = verifier("SELECT 1", task("DELETE FROM orders"), state)
    assert not write_gold.ok
    failing = [state[0], CountingSource(state[1], fail_open=True)]
    assert "fixture volume is gone" in (verifier("SELECT 1", gold, failing).error or "")
    bad_image = [SqliteImageSource("junk", b"not a database" * 50)]
    assert not verifier("SELECT 1", gold, bad_image).ok
    for bad_state in ([], None, "shop", [object()]):
        score = verifier("SELECT name FROM customers", gold, bad_state)
        assert not score.ok and score.value == 0.0, bad_state
    assert not verifier("SELECT 1", task(None), state).ok
    assert not verifier("SELECT 1", task({"postgresql": "SELECT 1"}), state).ok
    # Infra errors win over a bad submission: a judge that cannot judge says so.
    assert not verifier(None, gold, []).ok


def test_gold_per_dialect(state: list[SqliteImageSource]) -> None:
    gold = task({"sqlite": "SELECT name FROM customers", "postgresql": "SELECT 'wrong'"})
    score = compile({"type": "sql_match"})("SELECT name FROM customers", gold, state)
    assert score.ok and score.value == 1.0


def test_max_rows_limits(state: list[SqliteImageSource]) -> None:
    verifier = compile({"type": "sql_match", "max_rows": 3})
    big_gold = verifier("SELECT 1", task("SELECT * FROM orders"), state)
    assert not big_gold.ok and "more than 3 rows" in (big_gold.error or "")
    big_cand = verifier("SELECT * FROM orders", task("SELECT 1"), state)
    assert big_cand.ok and big_cand.value == 0.0
    assert "more than 3 rows" in big_cand.details["databases"][0]["reason"]


def test_overrides_change_semantics(state: list[SqliteImageSource]) -> None:
    gold, cand = "SELECT customer_id FROM orders", "SELECT DISTINCT customer_id FROM orders"
    assert compile({"type": "sql_match"})(cand, task(gold), state).value == 0.0
    assert compile({"type": "sql_match", "duplicates": "set"})(cand, task(gold), state).value == 1.0
    strict = compile({"type": "sql_match", "order": "strict"})
    assert strict("SELECT name FROM customers ORDER BY name DESC",
                  task("SELECT name FROM customers"), state).value == 0.0
    no_tol = compile({"type": "sql_match", "float_tol": 0})
    assert no_tol("SELECT 0.1 + 0.2", task("SELECT 0.3"), state).value == 0.0
    loose = compile({"type": "sql_match", "preset": "bird", "float_tol": 0.01})
    assert loose("SELECT 0.301", task("SELECT 0.3"), state).value == 1.0
    ignore = compile({"type": "sql_match", "order": "ignore"})
    assert ignore("SELECT id FROM orders ORDER BY id DESC",
                  task("SELECT id FROM orders ORDER BY id"), state).value == 1.0
    fixed = compile({"type": "sql_match", "column_perm": False})
    assert fixed("SELECT name, id FROM customers", task("SELECT id, name FROM customers"),
                 state).value == 0.0


@pytest.mark.parametrize(("spec", "field_name"), [
    ({"preset": "spider"}, "preset"),
    ({"preset": 3}, "preset"),
    ({"float_tol": -0.1}, "float_tol"),
    ({"float_tol": "small"}, "float_tol"),
    ({"order": "sometimes"}, "order"),
    ({"duplicates": "multiset"}, "duplicates"),
    ({"column_perm": "yes"}, "column_perm"),
    ({"timeout_s": 0}, "timeout_s"),
    ({"max_rows": 0}, "max_rows"),
    ({"float_tolerance": 1e-3}, "float_tolerance"),
])
def test_spec_errors_name_the_field(spec: dict[str, Any], field_name: str) -> None:
    with pytest.raises(SpecError) as info:
        compile({"type": "sql_match", **spec})
    assert info.value.field == field_name
    if field_name == "float_tolerance":
        assert "did you mean 'float_tol'" in str(info.value)


def test_verifier_id() -> None:
    a = compile({"type": "sql_match"})
    b = compile({"type": "sql_match", "preset": "bird"})
    assert re.fullmatch(r"sql_match@[0-9a-f]{12}", a.id)
    assert a.id != b.id
    assert a.id == compile({"type": "sql_match"}).id


# ------------------------------------------------------------ pure comparison
def qr(columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> QueryResult:
    return QueryResult(columns, tuple(rows), len(rows), False, False, 0.0)


def cmp(gold: QueryResult, cand: QueryResult, **kw: Any) -> tuple[bool, str]:
    opts: dict[str, Any] = {"order": False, "bag": True, "column_perm": True, "float_tol": 1e-6}
    opts.update(kw)
    return compare_results(gold, cand, **opts)


def test_compare_value_normalisation() -> None:
    import datetime as dt
    from decimal import Decimal

    g = qr(("a", "b", "c", "d"), [(Decimal("1.50"), dt.date(2024, 1, 2), True, memoryview(b"x"))])
    c = qr(("a", "b", "c", "d"), [(1.5, "2024-01-02", 1, b"x")])
    assert cmp(g, c, column_perm=False, float_tol=0)[0]
    assert cmp(qr(("x",), [(float("nan"),)]), qr(("x",), [(float("nan"),)]))[0]
    assert not cmp(qr(("x",), [(None,)]), qr(("x",), [("",)]))[0]
    assert not cmp(qr(("x",), [("3",)]), qr(("x",), [(3,)]))[0]


def test_compare_tolerance_with_reordered_noise() -> None:
    gold = qr(("k", "v"), [(1.0, 6), (1.0000001, 5), (2.0, 7)])
    cand = qr(("k", "v"), [(1.0000000001, 6), (1.0, 5), (2.0000000001, 7)])
    assert cmp(gold, cand)[0]
    assert cmp(gold, qr(("v", "k"), [(r[1], r[0]) for r in cand.rows]))[0]
    assert not cmp(gold, cand, float_tol=0)[0]


def test_compare_reasons() -> None:
    g = qr(("x",), [(1,), (2,)])
    assert cmp(g, qr(("x", "y"), [(1, 1), (2, 2)]))[1].startswith("candidate has 2 columns")
    assert "3 rows" in cmp(g, qr(("x",), [(1,), (2,), (2,)]))[1]
    ok, why = cmp(g, qr(("x",), [(2,), (1,)]), order=True)
    assert not ok and "different order" in why
    assert "row 2 differs" in cmp(g, qr(("x",), [(1,), (3,)]), order=True)[1]
    assert "(3,)" in cmp(g, qr(("x",), [(1,), (3,)]))[1]
    assert cmp(qr(("a",), []), qr(("a", "b"), []))[0]  # both empty: as in the references


def test_compare_column_permutation_search() -> None:
    rows = [(i, i % 3, f"n{i}", i * 0.5) for i in range(50)]
    gold = qr(("a", "b", "c", "d"), rows)
    perm = qr(("d", "c", "a", "b"), [(r[3], r[2], r[0], r[1]) for r in rows])
    assert cmp(gold, perm)[0]
    assert cmp(gold, perm, order=True)[0]
    assert not cmp(gold, perm, column_perm=False)[0]
    same_values = qr(("a", "b"), [(1, 2), (2, 1)])
    assert cmp(same_values, qr(("a", "b"), [(2, 1), (1, 2)]))[0]


@pytest.mark.parametrize(("sql", "ordered"), [
    ("SELECT a FROM t ORDER BY a", True),
    ("select a from t order  by a desc limit 3", True),
    ("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", True),
    ("SELECT a FROM t", False),
    ("SELECT * FROM (SELECT a FROM t ORDER BY a) s", False),
    ("WITH s AS (SELECT a FROM t ORDER BY a) SELECT * FROM s", False),
    ("SELECT a, row_number() OVER (ORDER BY a) FROM t", False),
    ("SELECT string_agg(a, ',' ORDER BY a) FROM t", False),
    ("SELECT 'ORDER BY a' FROM t", False),
    ('SELECT "ORDER BY" FROM t', False),
    ("SELECT a FROM t -- ORDER BY a", False),
    ("SELECT a FROM t /* ORDER BY a */", False),
    ("SELECT $$ ORDER BY $$ FROM t", False),
    ("SELECT a AS \"order\" FROM t ORDER BY \"order\"", True),
    ("SELECT a FROM t WHERE b = 'it''s' ORDER BY a", True),
])
def test_has_top_level_order_by(sql: str, ordered: bool) -> None:
    assert has_top_level_order_by(sql) is ordered


@pytest.mark.parametrize(("candidate", "runs", "rows"), [
    # Ann and Cid live in Paris on the fixture: one of the two rows, no extra ones
    ("SELECT name FROM customers WHERE name = 'Ann'", 1.0, 2 / 3),
    # both gold rows plus the others: recall 1, precision below
    ("SELECT name FROM customers", 1.0, None),
    # the right rows with an extra column share no row (a row is all its values)
    ("SELECT name, city FROM customers WHERE city = 'Paris'", 1.0, 0.0),
    # the same rows in another order (the gold does not order)
    ("SELECT name FROM customers WHERE city = 'Paris' ORDER BY name DESC", 1.0, 1.0),
    ("SELECT nme FROM customers", 0.0, 0.0),
])
def test_partial_credit_components(state: list[SqliteImageSource], candidate: str, runs: float,
                                   rows: float | None) -> None:
    gold = "SELECT name FROM customers WHERE city = 'Paris'"
    score = compile({"type": "sql_match"})(candidate, task(gold), state)
    assert score.components["runs"] == runs
    if rows is None:  # F1 of 2 gold rows within all the fixture's customers
        n = len(state[0].open().query("SELECT * FROM customers").rows)
        rows = 2 * 2 / (2 + n)
    assert score.components["rows"] == pytest.approx(rows)
    # partial credit never changes the verdict
    assert score.value == (1.0 if rows == 1.0 else 0.0)


def test_row_overlap_counts_duplicates_ignores_column_order_and_float_noise() -> None:
    def result(*rows: tuple[Any, ...]) -> QueryResult:
        return QueryResult(columns=("a", "b"), rows=tuple(rows), row_count=len(rows),
                           more=False, truncated=False, elapsed_ms=0.0)

    gold = result((1, "x"), (1, "x"), (2.5, None))
    assert row_overlap(gold, gold, float_tol=1e-6) == 1.0
    # columns swapped, a float off by noise: still the same rows
    assert row_overlap(gold, result(("x", 1), ("x", 1.0), (None, 2.5 + 1e-9)),
                       float_tol=1e-6) == 1.0
    # one of the duplicates missing: 2 shared rows of 3 + 2
    assert row_overlap(gold, result((1, "x"), (2.5, None)), float_tol=1e-6) == pytest.approx(0.8)
    assert row_overlap(gold, result(), float_tol=1e-6) == 0.0
    assert row_overlap(result(), result(), float_tol=1e-6) == 1.0
    # strings never equal numbers
    assert row_overlap(result((1, "2")), result(("1", 2)), float_tol=1e-6) == 0.0
