from __future__ import annotations

import sqlite3
import threading

import pytest
import sqlalchemy as sa

from gymhub.envs.sql.fixtures import (
    FixtureRef,
    ensure_postgres,
    perturbed,
    pg_schema_name,
    sqlite_image,
    table_row_counts,
)
from gymhub.envs.sql.schemas import SCHEMAS
from gymhub.errors import ConfigError


def _open(image: bytes) -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.deserialize(image)
    return con


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_shape(name: str) -> None:
    sdef = SCHEMAS[name]
    assert sdef.name == name and sdef.description
    tables = sdef.metadata.tables
    assert 3 <= len(tables) <= 8
    assert sum(len(t.foreign_keys) for t in tables.values()) >= 2
    kinds = {type(c.type).__name__ for t in tables.values() for c in t.columns}
    assert {"Integer", "Float", "Date"} <= kinds
    assert any(c.nullable for t in tables.values() for c in t.columns if not c.primary_key)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_nullable_columns_hold_nulls_and_fks_hold(name: str) -> None:
    con = _open(sqlite_image(FixtureRef(name)))
    nulls = 0
    for table in SCHEMAS[name].metadata.tables.values():
        for col in table.columns:
            n = con.execute(f'SELECT COUNT(*) FROM "{table.name}" WHERE "{col.name}" IS NULL')
            count = n.fetchone()[0]
            if not col.nullable:
                assert count == 0, f"{table.name}.{col.name}"
            nulls += count
    assert nulls > 0
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_dates_are_iso_text_in_sqlite() -> None:
    con = _open(sqlite_image(FixtureRef("retail")))
    (d,) = con.execute("SELECT order_date FROM orders LIMIT 1").fetchone()
    assert isinstance(d, str) and len(d) == 10 and d[4] == "-"


def test_images_deterministic_small_and_seed_dependent() -> None:
    for name in SCHEMAS:
        ref = FixtureRef(name)
        image = sqlite_image(ref)
        assert len(image) < 200_000
        assert sqlite_image(ref) is image  # cached
        from gymhub.envs.sql import fixtures

        assert fixtures._build_image(ref) == image  # rebuilt bytes are identical
        others = [sqlite_image(p) for p in perturbed(ref)]
        assert all(o != image for o in others)
        assert others[0] != others[1]


def test_image_cache_is_thread_safe() -> None:
    ref = FixtureRef("hr", seed=77)
    out: list[bytes] = []
    threads = [threading.Thread(target=lambda: out.append(sqlite_image(ref))) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(out) == 8 and all(o is out[0] for o in out)


def test_perturbed_refs() -> None:
    ref = FixtureRef("flights", seed=3, scale=2)
    refs = perturbed(ref, 3)
    assert len(refs) == 3 and len(set(refs)) == 3
    assert all(r.schema == "flights" and r.scale == 2 and r.seed != 3 for r in refs)
    assert refs == perturbed(ref, 3)
    assert set(refs).isdisjoint(perturbed(FixtureRef("flights", seed=4, scale=2), 3))
    assert ref.key == "flights/seed=3/scale=2"


def test_row_counts_scale() -> None:
    for name in SCHEMAS:
        one = table_row_counts(FixtureRef(name))
        ten = table_row_counts(FixtureRef(name, scale=10))
        assert list(one) == list(SCHEMAS[name].metadata.tables)
        assert 500 <= sum(one.values()) <= 2_000
        assert 8 * sum(one.values()) <= sum(ten.values()) <= 12 * sum(one.values())


def test_bad_refs() -> None:
    with pytest.raises(ConfigError):
        FixtureRef("Retail; DROP")
    with pytest.raises(ConfigError):
        FixtureRef("retail", seed=-1)
    with pytest.raises(ConfigError):
        FixtureRef("retail", scale=0)
    with pytest.raises(ConfigError, match="unknown fixture schema"):
        sqlite_image(FixtureRef("nosuch"))


@pytest.mark.postgres
def test_ensure_postgres_idempotent_and_matches_sqlite(postgres_url: str) -> None:
    ref = FixtureRef("library", seed=5)
    engine = sa.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {pg_schema_name(ref)} CASCADE")
        names: list[str] = []
        threads = [
            threading.Thread(target=lambda: names.append(ensure_postgres(ref, postgres_url)))
            for _ in range(4)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert names == [pg_schema_name(ref)] * 4
        assert ensure_postgres(ref, postgres_url) == names[0]
        with engine.connect() as conn:
            counts = {
                t: conn.exec_driver_sql(f"SELECT COUNT(*) FROM {names[0]}.{t}").scalar()
                for t in SCHEMAS["library"].metadata.tables
            }
            titles = conn.exec_driver_sql(
                f"SELECT title FROM {names[0]}.books ORDER BY title, book_id"
            ).scalars().all()
        assert counts == table_row_counts(ref)
        lite = _open(sqlite_image(ref))
        assert titles == [r[0] for r in lite.execute("SELECT title FROM books ORDER BY title, book_id")]
        with engine.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {names[0]} CASCADE")
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_reader_role_is_read_only(postgres_url: str) -> None:
    schema = ensure_postgres(FixtureRef("retail"), postgres_url)
    engine = sa.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SET ROLE gymhub_reader")
            assert conn.exec_driver_sql(f"SELECT COUNT(*) FROM {schema}.customers").scalar()
            conn.rollback()
            for stmt in (
                f"INSERT INTO {schema}.categories VALUES (99, 'X')",
                f"CREATE TABLE {schema}.evil (x int)",
                f"DELETE FROM {schema}.reviews",
            ):
                conn.exec_driver_sql("SET ROLE gymhub_reader")
                conn.exec_driver_sql("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
                with pytest.raises(sa.exc.ProgrammingError):
                    conn.exec_driver_sql(stmt)
                conn.rollback()
    finally:
        engine.dispose()
