"""The guarded PostgreSQL layer (gymhub.sandbox.sql.postgres).

Tests marked ``postgres`` skip, with the reason, unless GYMHUB_TEST_POSTGRES_URL names a
reachable server where the test may create and drop a schema and a role.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from gymhub.errors import BackendError
from gymhub.sandbox.sql import (
    PostgresDatabase,
    QueryError,
    render_result,
)

PG_URL = os.environ.get("GYMHUB_TEST_POSTGRES_URL", "")


@pytest.fixture(scope="module")
def pg_reader() -> Iterator[tuple[str, str]]:
    """A private schema and a SELECT-only role; yields ``(reader_url, schema)``."""
    if not PG_URL:
        pytest.skip("GYMHUB_TEST_POSTGRES_URL is not set")
    psycopg = pytest.importorskip("psycopg")
    from psycopg.conninfo import conninfo_to_dict

    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    tag = uuid.uuid4().hex[:8]
    schema, role, password = f"gymhub_sqltest_{tag}", f"gymhub_sqltest_r_{tag}", uuid.uuid4().hex
    admin.execute(f"CREATE SCHEMA {schema}")
    admin.execute(f"CREATE TABLE {schema}.customers (id int PRIMARY KEY, name text NOT NULL)")
    admin.execute(f"CREATE TABLE {schema}.orders (id int PRIMARY KEY, "
                  f"customer_id int REFERENCES {schema}.customers(id), total numeric(10,2), "
                  "day date, note text)")
    admin.execute(f"INSERT INTO {schema}.customers VALUES (1, 'Ann'), (2, 'Bob')")
    admin.execute(f"INSERT INTO {schema}.orders VALUES (1, 1, 10.50, '2024-01-02', '50%'), "
                  "(2, 2, 3.25, NULL, NULL)")
    admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
    admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
    params = conninfo_to_dict(PG_URL)
    host, port = params.get("host") or "localhost", params.get("port") or "5432"
    url = f"postgresql://{role}:{password}@{host}:{port}/{params.get('dbname') or 'postgres'}"
    try:
        yield url, schema
    finally:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")
        admin.close()


@pytest.fixture
def pg(pg_reader: tuple[str, str]) -> PostgresDatabase:
    url, schema = pg_reader
    return PostgresDatabase(url, schema, label="pg-test")


def pg_count() -> int:
    import psycopg

    with psycopg.connect(PG_URL) as admin:
        row = admin.execute("SELECT count(*) FROM pg_namespace n JOIN pg_class c "
                            "ON c.relnamespace = n.oid WHERE n.nspname LIKE 'gymhub_sqltest_%'"
                            ).fetchone()
        return int(row[0]) if row else -1


@pytest.mark.postgres
def test_pg_reads_and_introspection(pg: PostgresDatabase) -> None:
    res = pg.query("SELECT id, total, day, note FROM orders ORDER BY id")
    assert res.columns == ("id", "total", "day", "note")
    assert str(res.rows[0][1]) == "10.50" and res.rows[1][2] is None
    text = render_result(res)
    assert "2024-01-02" in text and "NULL" in text and text.endswith("(2 rows)")
    assert pg.query("SELECT note FROM orders WHERE note LIKE '50%' AND ' :x ' <> ''").rows == (
        ("50%",),)
    assert pg.tables() == ["customers", "orders"]
    info = pg.describe("orders")
    cols = {c.name: c for c in info.columns}
    assert info.row_count == 2 and cols["id"].primary_key and not cols["id"].nullable
    assert cols["customer_id"].references == "customers.id"
    assert cols["total"].type == "numeric(10,2)"
    with pytest.raises(QueryError, match="did you mean 'orders'") as err:
        pg.describe("ordrs")
    assert err.value.kind == "runtime"


@pytest.mark.postgres
@pytest.mark.parametrize("sql", [
    "INSERT INTO orders VALUES (9, 1, 1, NULL, NULL)",
    "DELETE FROM orders",
    "DROP TABLE orders",
    "CREATE TABLE evil (x int)",
    "WITH gone AS (DELETE FROM orders RETURNING *) SELECT * FROM gone",
    "SELECT * FROM orders FOR UPDATE",
    "SELECT pg_read_file('/etc/passwd')",
    "SET search_path = public",
    "COPY orders TO STDOUT",
])
def test_pg_writes_and_privileged_reads_refused(pg: PostgresDatabase, sql: str) -> None:
    before = pg_count()
    with pytest.raises(QueryError) as info:
        pg.query(sql)
    assert info.value.kind == "refused", str(info.value)
    assert pg.query("SELECT count(*) FROM orders").rows == ((2,),)
    assert pg_count() == before


@pytest.mark.postgres
def test_pg_errors_and_timeout(pg: PostgresDatabase) -> None:
    for sql, kind in [("SELEC 1", "syntax"), ("SELECT * FROM ordrs", "syntax"),
                      ("SELECT 1/0", "runtime"), ("SELECT 1; SELECT 2", "refused"),
                      ("SELECT '\ud800'", "encoding")]:
        with pytest.raises(QueryError) as info:
            pg.query(sql)
        assert info.value.kind == kind, (sql, str(info.value))
    # pg_sleep(10) ends on its own only after 10 s: "timeout" is statement_timeout at work.
    with pytest.raises(QueryError) as info:
        pg.query("SELECT pg_sleep(10)", timeout_s=0.5)
    assert info.value.kind == "timeout"
    assert pg.query("SELECT 1").rows == ((1,),)


@pytest.mark.postgres
def test_pg_nothing_outlives_a_query(pg: PostgresDatabase) -> None:
    pg.query("SELECT set_config('search_path', 'public', false)")
    pg.query("SELECT pg_advisory_lock(4242)")
    assert pg.query("SELECT count(*) FROM customers").rows == ((2,),)  # search_path restored
    locks = pg.query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").rows
    assert locks == ((0,),)


@pytest.mark.postgres
def test_pg_large_result_streamed(pg: PostgresDatabase) -> None:
    res = pg.query("SELECT g FROM generate_series(1, 1000000) g", max_rows=50, timeout_s=10)
    assert len(res.rows) == 50 and res.row_count == 100_000 and res.more


def test_pg_dead_server_is_backend_error() -> None:
    pytest.importorskip("psycopg")
    dead = PostgresDatabase("postgresql://nobody@127.0.0.1:1/none", "s")
    with pytest.raises(BackendError):
        dead.query("SELECT 1")
    with pytest.raises(BackendError):
        dead.tables()
