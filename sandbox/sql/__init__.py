"""Guarded execution of an agent's SQL on SQLite and PostgreSQL fixtures.

This is the public face of the SQL sandbox; the pieces live in :mod:`.types`
(errors, results, protocols), :mod:`.sqlite`, :mod:`.postgres` and
:mod:`.render`. An environment opens a :class:`SqlDatabase` per episode, passes
the agent's text to :meth:`SqlDatabase.query` and shows either
:func:`render_result` of the result or ``str()`` of the :class:`QueryError`. A
verifier receives :class:`DatabaseSource` objects and opens fresh handles itself.

What is protected against
    * **Writes of any kind** — DML, DDL, ``REPLACE``, ``VACUUM [INTO]``, ``REINDEX``,
      ``ANALYZE``, ``ATTACH``/``DETACH``, transactions and savepoints, PRAGMA changes,
      ``load_extension()``. SQLite: a first-keyword check, an authorizer that allows
      only reads, ``PRAGMA query_only``, ``SQLITE_LIMIT_ATTACHED=0``; each episode has
      its own in-memory copy (``deserialize``), so even a bypass could not reach the
      fixture or another episode; files open with ``mode=ro&immutable=1``.
      PostgreSQL: a ``SELECT``-only role, a ``READ ONLY`` transaction that is always
      rolled back, a server-side cursor (``DECLARE`` accepts one query, nothing else).
    * **Runaway queries** — infinite recursive CTEs, huge cross joins, ``pg_sleep``:
      a wall-clock deadline (SQLite progress handler; PostgreSQL ``statement_timeout``
      refreshed to the time left before every fetch) → ``QueryError("timeout")``.
    * **Huge results** — rows are streamed: ``max_rows`` kept, the rest counted up to
      ``count_cap``; SQLite values are capped at 1 MB each and kept rows at 64 MB.
    * **Several statements in one call**, oversized text (> 20,000 characters), lone
      surrogates and NUL characters — refused before any database sees them.
    * **Bad bytes in a user database** — invalid UTF-8 text is decoded with
      replacement characters instead of crashing the episode.
    * **Leaks between episodes on PostgreSQL** — ``SET`` changes and everything else
      transactional are rolled back; session advisory locks are released after every
      query; server-side prepared statements are disabled.

What is *not* protected against
    * **Memory inside one slow query** — SQLite sorts and hash tables, or PostgreSQL
      work memory, can grow until the deadline fires; there is no per-query memory cap
      (SQLite's heap limit is process-wide, so a library must not set it). A
      PostgreSQL value can be up to 1 GB (``repeat('x', 1e9)``) and is fetched whole.
    * **Reading what the role may read** — on PostgreSQL, catalogs and functions
      granted to ``PUBLIC`` (``version()``, ``pg_stat_activity`` rows of the same
      role) stay visible; the fixture loader's role must not be granted more.
    * **CPU starvation** — a query may use one core until its deadline.
    * **Untrusted fixtures** — database images and schemas are trusted input;
      :meth:`SqlDatabase.tables` and :meth:`SqlDatabase.describe` are trusted code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gymhub.sandbox.sql.postgres import PostgresDatabase, normalize_url
from gymhub.sandbox.sql.render import format_cell, render_result
from gymhub.sandbox.sql.sqlite import SqliteDatabase
from gymhub.sandbox.sql.types import (
    MAX_SQL_CHARS,
    ColumnInfo,
    DatabaseSource,
    QueryError,
    QueryResult,
    SqlDatabase,
    TableInfo,
    quote_ident,
    resolve_table,
)

__all__ = [
    "MAX_SQL_CHARS",
    "ColumnInfo",
    "DatabaseSource",
    "PostgresDatabase",
    "PostgresSource",
    "QueryError",
    "QueryResult",
    "SqlDatabase",
    "SqliteDatabase",
    "SqliteFileSource",
    "SqliteImageSource",
    "TableInfo",
    "format_cell",
    "normalize_url",
    "quote_ident",
    "render_result",
    "resolve_table",
]


@dataclass(frozen=True)
class SqliteImageSource:
    """A serialized SQLite database; every :meth:`open` is a private in-memory copy.

    Attributes:
        key: stable cache key, e.g. ``"retail/seed=1/scale=1"`` (same key, same bytes).
        image: the bytes of ``sqlite3.Connection.serialize()``.
        role: ``"fixture"`` or ``"perturbed"``.
    """

    key: str
    image: bytes
    role: str = "fixture"

    def open(self) -> SqliteDatabase:
        """A fresh, guarded copy of the image."""
        return SqliteDatabase.from_image(self.image, label=self.key)

    def __repr__(self) -> str:  # the image can be megabytes; keep reprs short
        return f"SqliteImageSource({self.key!r}, {len(self.image):,} bytes, role={self.role!r})"


@dataclass(frozen=True)
class SqliteFileSource:
    """A SQLite database file, opened read-only without a copy."""

    key: str
    path: Path
    role: str = "fixture"

    def open(self) -> SqliteDatabase:
        """A guarded read-only handle on the file."""
        return SqliteDatabase.from_file(self.path, label=self.key)


@dataclass(frozen=True)
class PostgresSource:
    """A schema in PostgreSQL, reached through a read-only role's URL."""

    key: str
    url: str
    schema: str
    role: str = "fixture"

    def open(self) -> PostgresDatabase:
        """A guarded handle (connections come from the shared pool on first use)."""
        return PostgresDatabase(self.url, self.schema, label=self.key)

    def __repr__(self) -> str:  # never print a URL that may hold a password
        return f"PostgresSource({self.key!r}, schema={self.schema!r}, role={self.role!r})"
