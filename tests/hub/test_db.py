"""The hub schema: migrations build exactly the models' schema, and come back down."""

from datetime import datetime

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from gymhub.hub.db import Base, HubDB, Owner, connect, default_db_url
from gymhub.hub.migrations import HEAD, current, downgrade, upgrade

TABLES = {"owners", "tokens", "packages", "versions", "version_ledger", "check_results",
          "check_jobs"}


def _diff(engine):
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}),
                                Base.metadata)


def test_upgrade_to_head_builds_exactly_the_models(db_url):
    engine = connect(db_url)
    assert current(engine) is None
    upgrade(engine)
    assert current(engine) == HEAD
    assert set(sa.inspect(engine).get_table_names()) >= TABLES
    assert _diff(engine) == []
    engine.dispose()


def test_downgrade_to_base_and_up_again(db_url):
    engine = connect(db_url)
    upgrade(engine)
    downgrade(engine, "base")
    assert current(engine) is None
    assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
    upgrade(engine)
    assert _diff(engine) == []
    engine.dispose()


def test_opening_twice_is_a_no_op_migration(db_url):
    HubDB(db_url).close()
    db = HubDB(db_url)
    assert current(db.engine) == HEAD
    db.close()


def test_the_ledger_has_no_foreign_keys_so_deletions_cannot_take_it_along(db):
    inspector = sa.inspect(db.engine)
    assert inspector.get_foreign_keys("version_ledger") == []
    pk = inspector.get_pk_constraint("version_ledger")["constrained_columns"]
    assert pk == ["owner_name", "normalized_name", "canonical_version"]


def test_times_are_aware_utc_and_naive_ones_are_refused(db):
    with db.write() as s:
        s.add(Owner(name="alice", created_at=db.clock()))
    with db.read() as s:
        created = s.scalars(sa.select(Owner.created_at)).one()
    assert created.utcoffset() is not None and created.utcoffset().total_seconds() == 0
    with pytest.raises(sa.exc.StatementError, match="naive"), db.write() as s:
        s.add(Owner(name="bob", created_at=datetime(2026, 1, 1)))
        s.flush()


def test_sqlite_writers_take_the_write_lock_up_front(tmp_path):
    db = HubDB(f"sqlite:///{tmp_path / 'hub.db'}")
    statements: list[str] = []
    sa.event.listen(db.engine, "before_cursor_execute",
                    lambda *a: statements.append(a[2]))
    sa.event.listen(db.engine, "begin", lambda conn: statements.append("<begin>"))
    with db.write() as s:
        s.scalar(sa.select(sa.literal(1)))
    with db.read() as s:
        s.scalar(sa.select(sa.literal(1)))
    assert "BEGIN IMMEDIATE" in statements and statements.count("BEGIN") == 1
    db.close()


def test_default_url_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GYMHUB_HUB_DB", "sqlite:///x.db")
    assert default_db_url() == "sqlite:///x.db"
    monkeypatch.delenv("GYMHUB_HUB_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_db_url() == f"sqlite:///{tmp_path}/gymhub/hub.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_db_url().endswith("/.local/share/gymhub/hub.db")
