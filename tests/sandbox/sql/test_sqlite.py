"""The guarded SQLite layer (gymhub.sandbox.sql.sqlite), its sources and shared helpers."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymhub.errors import BackendError
from gymhub.sandbox.sql import (
    MAX_SQL_CHARS,
    PostgresSource,
    QueryError,
    SqlDatabase,
    SqliteDatabase,
    SqliteFileSource,
    SqliteImageSource,
    normalize_url,
    quote_ident,
    render_result,
    resolve_table,
)

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id),
    amount REAL,
    note TEXT
);
CREATE TABLE tags (order_id INTEGER REFERENCES orders, tag TEXT);
CREATE INDEX orders_by_customer ON orders(customer_id);
CREATE VIEW big_orders AS SELECT * FROM orders WHERE amount > 10;
CREATE TABLE n (x INTEGER);
INSERT INTO customers VALUES (1, 'Ann', 'Paris'), (2, 'Bob', 'Berlin'), (3, 'Cid', NULL);
INSERT INTO orders VALUES (1, 1, 10.5, 'first'), (2, 1, 3.25, NULL), (3, 2, 42.0, 'two
lines');
INSERT INTO tags VALUES (1, 'gift');
WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 10000)
INSERT INTO n SELECT x FROM r;
"""


def build_conn() -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    conn.execute("INSERT INTO orders VALUES (4, 3, 1.0, CAST(x'ff41' AS TEXT))")  # bad UTF-8
    conn.commit()
    return conn


@pytest.fixture(scope="module")
def image() -> bytes:
    return build_conn().serialize()


@pytest.fixture
def db(image: bytes) -> Iterator[SqliteDatabase]:
    database = SqliteDatabase.from_image(image, label="test")
    yield database
    database.close()


def checksum(database: SqliteDatabase) -> str:
    """Digest of the schema and every row, read through the guarded handle itself."""
    h = hashlib.sha256()
    schema = database.query("SELECT type, name, sql FROM sqlite_schema ORDER BY name", max_rows=100)
    h.update(repr(schema.rows).encode())
    for table in ["customers", "orders", "tags"]:
        res = database.query(f"SELECT * FROM {table} ORDER BY rowid", max_rows=10_000)
        h.update(repr(res.rows).encode())
    h.update(repr(database.query("PRAGMA user_version").rows).encode())
    return h.hexdigest()


WRITES = [
    "INSERT INTO customers VALUES (9, 'Mal', 'X')",
    "insert into customers(name) values ('lower case')",
    "/* comment first */ INSERT INTO customers(name) VALUES ('x')",
    "UPDATE customers SET name = 'Z'",
    "DELETE FROM orders",
    "REPLACE INTO customers VALUES (1, 'Z', 'Z')",
    "DROP TABLE orders",
    "DROP VIEW big_orders",
    "DROP INDEX orders_by_customer",
    "CREATE TABLE evil (x)",
    "CREATE TEMP TABLE evil (x)",
    "CREATE VIEW evil AS SELECT 1",
    "CREATE TRIGGER evil AFTER INSERT ON tags BEGIN DELETE FROM orders; END",
    "CREATE INDEX evil ON customers(name)",
    "ALTER TABLE customers ADD COLUMN evil TEXT",
    "ALTER TABLE customers RENAME TO clients",
    "ATTACH DATABASE ':memory:' AS other",
    "DETACH DATABASE main",
    "PRAGMA journal_mode=OFF",
    "PRAGMA writable_schema=ON",
    "PRAGMA query_only=OFF",
    "PRAGMA user_version=7",
    "PRAGMA main.foreign_keys = OFF",
    "SELECT load_extension('/tmp/evil.so')",
    "BEGIN",
    "BEGIN IMMEDIATE",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT sp",
    "RELEASE sp",
    "VACUUM",
    "REINDEX",
    "ANALYZE",
    # These pass the first-keyword check and must be stopped by the authorizer.
    "WITH x AS (SELECT 1) INSERT INTO customers(name) VALUES ('cte')",
    "WITH x AS (SELECT 1) UPDATE customers SET name = 'cte'",
    "WITH x AS (SELECT 1) DELETE FROM orders",
    "EXPLAIN DELETE FROM orders",
]


@pytest.mark.parametrize("sql", WRITES)
def test_every_write_is_refused_and_data_unchanged(db: SqliteDatabase, sql: str) -> None:
    before = checksum(db)
    with pytest.raises(QueryError) as info:
        db.query(sql)
    assert info.value.kind == "refused", str(info.value)
    assert str(info.value).startswith("refused: this database is read-only")
    assert "attempted:" in str(info.value)
    assert checksum(db) == before
    assert db.query("SELECT count(*) FROM customers").rows == ((3,),)


@pytest.mark.parametrize("sql", [
    "INSERT INTO customers VALUES (9, 'Mal', 'X')",
    "DELETE FROM orders",
    "DROP TABLE orders",
    "CREATE TABLE evil (x)",
    "ATTACH DATABASE ':memory:' AS other",
    "PRAGMA writable_schema=ON",
    "BEGIN",
    "SAVEPOINT sp",
    "VACUUM",
])
def test_authorizer_alone_refuses_writes(db: SqliteDatabase, sql: str) -> None:
    # Bypass the friendly first-keyword check: the connection's own guard must hold.
    raw = db._connection()
    with pytest.raises(sqlite3.DatabaseError, match=r"not authorized|authorization denied|readonly"):
        raw.execute(sql)
    assert db.query("SELECT count(*) FROM orders").rows == ((4,),)


def test_query_only_is_a_second_layer(db: SqliteDatabase) -> None:
    raw = db._connection()
    raw.set_authorizer(None)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        raw.execute("DELETE FROM orders")


def test_vacuum_into_writes_no_file(db: SqliteDatabase, tmp_path: Path) -> None:
    target = tmp_path / "copy.db"
    with pytest.raises(QueryError) as info:
        db.query(f"VACUUM INTO '{target}'")
    assert info.value.kind == "refused"
    with pytest.raises(sqlite3.DatabaseError):
        db._connection().execute(f"VACUUM INTO '{target}'")
    assert not target.exists()


def test_episode_copies_are_independent(image: bytes) -> None:
    original = hashlib.sha256(image).hexdigest()
    a = SqliteDatabase.from_image(image)
    b = SqliteDatabase.from_image(image)
    # Even with every guard of copy A switched off, B and the image are untouched.
    raw = a._connection()
    raw.set_authorizer(None)
    raw.execute("PRAGMA query_only=OFF")
    raw.execute("DELETE FROM customers")
    assert a.query("SELECT count(*) FROM customers").rows == ((0,),)
    assert b.query("SELECT count(*) FROM customers").rows == ((3,),)
    c = SqliteDatabase.from_image(image)
    assert c.query("SELECT count(*) FROM customers").rows == ((3,),)
    assert hashlib.sha256(image).hexdigest() == original
    for x in (a, b, c):
        x.close()


def test_reads_that_must_work(db: SqliteDatabase) -> None:
    assert db.query("SELECT name FROM customers ORDER BY id").rows == (("Ann",), ("Bob",), ("Cid",))
    assert db.query("SELECT count(*) FROM big_orders").rows == ((2,),)
    assert db.query("PRAGMA table_info(orders)").row_count == 4
    assert db.query("PRAGMA foreign_key_list(orders)").row_count == 1
    assert db.query("PRAGMA index_list(orders)").row_count == 1
    assert db.query("SELECT name FROM pragma_table_info('customers')").row_count == 3
    assert db.query("SELECT value FROM json_each('[1, 2, 3]')").rows == ((1,), (2,), (3,))
    assert db.query("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 5) "
                    "SELECT sum(x) FROM r").rows == ((15,),)
    assert db.query("VALUES (1, 'a')").rows == ((1, "a"),)
    assert db.query("SELECT 1;").rows == ((1,),)
    assert db.query("SELECT 1; -- trailing comment").rows == ((1,),)
    assert db.query("SELECT 'ORDER; DROP TABLE x' AS s").rows == (("ORDER; DROP TABLE x",),)
    res = db.query("SELECT id, amount FROM orders WHERE id = 1")
    assert res.columns == ("id", "amount")
    assert (res.row_count, res.more, res.truncated) == (1, False, False)
    assert res.elapsed_ms >= 0


def test_multiple_statements_refused(db: SqliteDatabase) -> None:
    for sql in ["SELECT 1; SELECT 2", "SELECT 1; DROP TABLE customers", "SELECT 1;; SELECT 2"]:
        with pytest.raises(QueryError) as info:
            db.query(sql)
        assert info.value.kind == "refused"
        assert "one statement" in str(info.value)
    assert db.query("SELECT count(*) FROM customers").rows == ((3,),)


def test_syntax_and_runtime_errors(db: SqliteDatabase) -> None:
    cases = {
        "SELEC 1": "syntax",
        "SELECT FROM": "syntax",
        "SELECT nope FROM customers": "syntax",
        "SELECT * FROM ordrs": "syntax",
        "": "syntax",
        "  ;  ": "syntax",
        "-- only a comment": "syntax",
        "SELECT abs(-9223372036854775808)": "runtime",
    }
    for sql, kind in cases.items():
        with pytest.raises(QueryError) as info:
            db.query(sql)
        assert info.value.kind == kind, (sql, str(info.value))
    with pytest.raises(QueryError, match="did you mean 'orders'"):
        db.query("SELECT * FROM ordrs")
    with pytest.raises(QueryError) as info:
        db.query(42)
    assert info.value.kind == "syntax"


def test_encoding_and_size_limits(db: SqliteDatabase) -> None:
    with pytest.raises(QueryError) as info:
        db.query("SELECT '\ud800'")
    assert info.value.kind == "encoding" and "surrogate" in str(info.value)
    with pytest.raises(QueryError) as info:
        db.query("SELECT 1\x00")
    assert info.value.kind == "encoding"
    with pytest.raises(QueryError) as info:
        db.query("SELECT 1 -- " + "x" * MAX_SQL_CHARS)
    assert info.value.kind == "too_large" and "20,000" in str(info.value)
    with pytest.raises(QueryError) as info:
        db.query("SELECT zeroblob(5000000)")
    assert info.value.kind == "too_large"
    assert db.query("SELECT 'héllo 😀'").rows == (("héllo 😀",),)
    # Invalid UTF-8 stored in the database is shown with replacement characters.
    assert db.query("SELECT note FROM orders WHERE id = 4").rows == (("\ufffdA",),)
    assert db.query("SELECT note FROM orders WHERE id = 1").rows == (("first",),)


def test_infinite_recursive_cte_times_out(db: SqliteDatabase) -> None:
    # The query never ends on its own, so any answer at all is the deadline at work; the
    # typed kind and the message say which limit stopped it.
    sql = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
    with pytest.raises(QueryError) as info:
        db.query(sql, timeout_s=0.4)
    assert info.value.kind == "timeout"
    assert str(info.value).startswith("query stopped after 0.4 s")
    assert db.query("SELECT 1").rows == ((1,),)  # still usable afterwards


def test_huge_cross_join_times_out(db: SqliteDatabase) -> None:
    # 10^8 rows would take many seconds to count: "timeout" means the deadline stopped it.
    with pytest.raises(QueryError) as info:
        db.query("SELECT count(*) FROM n a, n b", timeout_s=0.4)
    assert info.value.kind == "timeout"
    assert str(info.value).startswith("query stopped after 0.4 s")


def test_million_row_result_is_streamed(db: SqliteDatabase) -> None:
    sql = "SELECT a.x, b.x FROM n a, n b WHERE b.x <= 100"  # 10^6 rows
    tracemalloc.start()
    try:
        res = db.query(sql, max_rows=200, timeout_s=10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(res.rows) == 200
    assert (res.row_count, res.more, res.truncated) == (100_000, True, True)
    assert peak < 20_000_000  # a materialised million rows would need >100 MB
    assert "(showing " in render_result(res) and "of at least 100,000 rows)" in render_result(res)
    exact = db.query("SELECT x FROM n", max_rows=5, count_cap=10_000)
    assert (exact.row_count, exact.more, exact.truncated, len(exact.rows)) == (10_000, False, True, 5)


def test_tables_and_describe(db: SqliteDatabase) -> None:
    assert db.tables() == ["big_orders", "customers", "n", "orders", "tags"]
    info = db.describe("orders")
    assert info.name == "orders" and info.row_count == 4
    cols = {c.name: c for c in info.columns}
    assert [c.name for c in info.columns] == ["id", "customer_id", "amount", "note"]
    assert cols["id"].primary_key and not cols["id"].nullable
    assert cols["customer_id"].references == "customers.id" and not cols["customer_id"].nullable
    assert cols["amount"].type == "REAL" and cols["amount"].nullable
    assert db.describe("tags").columns[0].references == "orders.id"  # implicit PK target
    assert db.describe("ORDERS").name == "orders"
    assert db.describe("big_orders").row_count == 2
    with pytest.raises(QueryError) as err:
        db.describe("ordrs")
    assert err.value.kind == "runtime"
    assert "did you mean 'orders'" in str(err.value) and "customers" in str(err.value)


def test_from_file_is_read_only(tmp_path: Path) -> None:
    path = tmp_path / "fixture db.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.close()
    before = path.read_bytes()
    source = SqliteFileSource(key="file", path=path)
    database = source.open()
    assert database.query("SELECT count(*) FROM customers").rows == ((3,),)
    for sql in ["DELETE FROM customers", "PRAGMA journal_mode=WAL", "VACUUM",
                "WITH x AS (SELECT 1) DELETE FROM customers"]:
        with pytest.raises(QueryError):
            database.query(sql)
    raw = database._connection()
    raw.set_authorizer(None)
    raw.execute("PRAGMA query_only=OFF")
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        raw.execute("DELETE FROM customers")  # mode=ro holds even with both guards off
    database.close()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fixture db.sqlite"]


def test_bad_fixtures_are_backend_errors(tmp_path: Path) -> None:
    with pytest.raises(BackendError):
        SqliteDatabase.from_file(tmp_path / "missing.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(BackendError):
        SqliteDatabase.from_file(junk)
    with pytest.raises(BackendError):
        SqliteDatabase.from_image(b"this is not a database" * 100)


def test_closed_database(db: SqliteDatabase) -> None:
    db.close()
    db.close()  # idempotent
    with pytest.raises(BackendError):
        db.query("SELECT 1")


def test_created_in_one_thread_used_in_another(image: bytes) -> None:
    database = SqliteDatabase.from_image(image)
    out: list[object] = []

    def work() -> None:
        out.append(database.query("SELECT count(*) FROM orders").rows)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert out == [((4,),)]
    database.close()


def test_sources_and_protocols(image: bytes) -> None:
    source = SqliteImageSource(key="retail/seed=1", image=image, role="perturbed")
    assert "bytes" in repr(source) and len(repr(source)) < 100
    database = source.open()
    assert isinstance(database, SqlDatabase)
    assert database.label == "retail/seed=1" and database.dialect == "sqlite"
    database.close()
    pg = PostgresSource(key="k", url="postgresql://u:secret@h/db", schema="s")
    assert "secret" not in repr(pg)
    assert normalize_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    # SQLAlchemy's default driver name is not installed: psycopg 3 serves it too.
    assert normalize_url("postgresql+psycopg2://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"
    assert normalize_url("sqlite:///x.db") == "sqlite:///x.db"


def test_resolve_table_and_quote_ident() -> None:
    names = ["Orders", "orders", "customers"]
    assert resolve_table("orders", names) == "orders"  # exact beats case-insensitive
    assert resolve_table("ORDERS", names) == "Orders"
    with pytest.raises(QueryError) as err:
        resolve_table("custmers", names)
    assert err.value.kind == "runtime" and "did you mean 'customers'" in str(err.value)
    assert quote_ident("order") == '"order"'
    assert quote_ident('we"ird name') == '"we""ird name"'
