"""The hub's schema history (Alembic), run from code rather than from an ``alembic.ini``.

The scripts live inside the package, so an installed hub migrates itself on start with
no file layout to get right; ``upgrade`` is idempotent and cheap when already at head.
Two hubs starting at once on PostgreSQL serialise on an advisory lock (SQLite's
``BEGIN IMMEDIATE`` does the same), so neither sees a half-applied revision.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext

__all__ = ["HEAD", "current", "downgrade", "upgrade"]

#: The newest revision this code knows.
HEAD = "0002"
_LOCK_KEY = 0x67796D68  # "gymh": the advisory lock migrations take on PostgreSQL


def _config(connection: sa.Connection) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).resolve().parent))
    cfg.attributes["connection"] = connection
    return cfg


def _locked(connection: sa.Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    """Bring the schema up to ``revision`` in one transaction."""
    with engine.begin() as conn:
        _locked(conn)
        command.upgrade(_config(conn), revision)


def downgrade(engine: sa.Engine, revision: str) -> None:
    """Take the schema back to ``revision`` (``"base"``: drop every hub table)."""
    with engine.begin() as conn:
        _locked(conn)
        command.downgrade(_config(conn), revision)


def current(engine: sa.Engine) -> str | None:
    """The revision the database is at, or ``None`` for one never migrated."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
