"""Guarded PostgreSQL access: a low-privilege role, read-only transactions, a deadline.

Every agent query runs as: check out a pooled connection of the reader role, start a
``READ ONLY`` transaction, set ``statement_timeout`` and ``search_path`` locally, run
the statement through a server-side cursor (``DECLARE ... CURSOR FOR``: exactly one
statement, rows streamed in batches so a huge result never crosses the wire whole),
then roll back and release any advisory locks, so nothing the query did outlives it.

SQLAlchemy owns the pool (one small engine per URL, shared by every database handle);
execution goes through the psycopg connection underneath so that the agent's text is
sent as is — no bind-parameter parsing of ``:name`` or ``%``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from gymhub.errors import BackendError
from gymhub.sandbox.sql.types import (
    READ_ONLY_MESSAGE,
    ColumnInfo,
    QueryError,
    QueryResult,
    TableInfo,
    check_sql_text,
    did_you_mean,
    refuse_non_read,
    resolve_table,
    timeout_message,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

__all__ = ["PostgresDatabase", "normalize_url"]

_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()
_FETCH_BATCH = 1_000
_TRUSTED_TIMEOUT_S = 30.0
_CURSOR = "gymhub_query"
_MISSING_TABLE = re.compile(r'relation "(?:[^"]*\.)?([^".]+)" does not exist')
_BACKEND_STATES = {"57P01", "57P02", "57P03", "53300", "28000", "28P01", "3D000"}

_COLUMNS_SQL = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       coalesce(a.attnum = ANY(pk.conkey), false)
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_constraint pk ON pk.conrelid = c.oid AND pk.contype = 'p'
WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
_FKEYS_SQL = """
SELECT a.attname, fc.relname, fa.attname
FROM pg_constraint k
JOIN pg_class c ON c.oid = k.conrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_class fc ON fc.oid = k.confrelid
CROSS JOIN LATERAL unnest(k.conkey, k.confkey) AS u(src, dst)
JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.src
JOIN pg_attribute fa ON fa.attrelid = k.confrelid AND fa.attnum = u.dst
WHERE k.contype = 'f' AND n.nspname = %s AND c.relname = %s
"""
_TABLES_SQL = """
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'v', 'm', 'p', 'f') ORDER BY 1
"""


def normalize_url(url: str) -> str:
    """Point a PostgreSQL URL at SQLAlchemy's psycopg 3 driver (the one installed).

    ``postgresql://``, ``postgres://`` and ``postgresql+psycopg2://`` (SQLAlchemy's
    default and a common copy-paste) all become ``postgresql+psycopg://``; anything
    else, including an explicit ``postgresql+psycopg://``, is returned unchanged.
    """
    for prefix in ("postgresql+psycopg2://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def _engine(url: str) -> Engine:
    """The shared engine for ``url``: a small pool, pinged before use."""
    with _ENGINES_LOCK:
        engine = _ENGINES.get(url)
        if engine is None:
            from sqlalchemy import create_engine

            engine = create_engine(
                url,
                pool_size=2,
                max_overflow=8,
                pool_pre_ping=True,
                pool_recycle=1800,
                connect_args={
                    "prepare_threshold": None,  # no server-side prepared statements to leak
                    "connect_timeout": 5,
                    "application_name": "gymhub-sql",
                },
            )
            _ENGINES[url] = engine
        return engine


class PostgresDatabase:
    """One schema of a PostgreSQL database, seen through a read-only role.

    Construction is free (no connection is made); the first query or introspection
    call connects. Connection failures raise :class:`~gymhub.errors.BackendError`.

    Args:
        url: URL of a low-privilege role (``SELECT`` only), e.g.
            ``postgresql://gymhub_reader@host/db``.
        schema: the schema the agent sees (``search_path``).
        label: a name for messages.
    """

    dialect = "postgresql"

    def __init__(self, url: str, schema: str, label: str = "") -> None:
        if not isinstance(schema, str) or not schema:
            raise ValueError("schema must be a non-empty string")
        self._url = normalize_url(url)
        self.schema = schema
        self.label = label or schema
        self._closed = False

    # ------------------------------------------------------------------ plumbing
    @contextmanager
    def _transaction(self, timeout_s: float) -> Iterator[Any]:
        """A psycopg connection inside a fresh READ ONLY transaction, rolled back after."""
        import psycopg

        if self._closed:
            raise BackendError(f"{self.label}: the database is closed")
        try:
            fairy = _engine(self._url).raw_connection()
        except Exception as exc:  # sqlalchemy wraps psycopg's OperationalError
            raise BackendError(f"{self.label}: cannot connect to PostgreSQL: {exc}") from exc
        conn: Any = fairy.driver_connection
        broken = False
        try:
            conn.read_only = True
            conn.execute(
                "SELECT set_config('statement_timeout', %s, true), "
                "set_config('search_path', %s, true)",
                (str(max(1, int(timeout_s * 1000))), '"' + self.schema.replace('"', '""') + '"'),
            )
            yield conn
        except psycopg.Error as exc:
            broken = conn.closed or exc.sqlstate is None or _is_backend_state(exc.sqlstate)
            raise
        finally:
            try:
                conn.rollback()
                conn.execute("SELECT pg_advisory_unlock_all()")  # session locks survive rollback
                conn.rollback()
            except psycopg.Error:
                broken = True
            if broken:
                fairy.invalidate()
            fairy.close()

    def _trusted(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        try:
            with self._transaction(_TRUSTED_TIMEOUT_S) as conn:
                rows: list[tuple[Any, ...]] = conn.execute(sql, params).fetchall()
                return rows
        except psycopg.Error as exc:
            raise _translate(exc, _TRUSTED_TIMEOUT_S, self.label) from None

    # ------------------------------------------------------------------ queries
    def query(
        self, sql: str, *, max_rows: int = 200, timeout_s: float = 2.0, count_cap: int = 100_000
    ) -> QueryResult:
        """Run one read-only statement and return at most ``max_rows`` rows.

        Raises:
            QueryError: the statement is invalid, refused, too slow or too large.
            BackendError: the server cannot be reached or dropped the connection.
        """
        import psycopg

        body = check_sql_text(sql)
        refuse_non_read(body)
        start = time.perf_counter()
        deadline = time.monotonic() + timeout_s
        cap = max(count_cap, max_rows)
        kept: list[tuple[Any, ...]] = []
        count, more = 0, False
        try:
            with self._transaction(timeout_s) as conn, conn.cursor(name=_CURSOR) as cur:
                cur.execute(body)
                columns = tuple(d.name for d in cur.description or ())
                while columns:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise QueryError("timeout", timeout_message(timeout_s))
                    conn.execute("SELECT set_config('statement_timeout', %s, true)",
                                 (str(max(1, int(left * 1000))),))
                    batch = cur.fetchmany(_FETCH_BATCH)
                    if not batch:
                        break
                    room = max_rows - len(kept)
                    if room > 0:
                        kept.extend(batch[:room])
                    count += len(batch)
                    if count > cap:
                        count, more = cap, True
                        break
        except psycopg.Error as exc:
            err = _translate(exc, timeout_s, self.label)
            missing = _MISSING_TABLE.match(str(getattr(exc.diag, "message_primary", "")))
            if missing and isinstance(err, QueryError):
                err = QueryError(err.kind, f"{err}{did_you_mean(missing.group(1), self.tables())}")
            raise err from None
        return QueryResult(
            columns=columns,
            rows=tuple(kept),
            row_count=count,
            more=more,
            truncated=more or len(kept) < count,
            elapsed_ms=(time.perf_counter() - start) * 1000.0,
        )

    # ------------------------------------------------------------ introspection
    def tables(self) -> list[str]:
        """Tables and views of the schema, sorted."""
        return [str(r[0]) for r in self._trusted(_TABLES_SQL, (self.schema,))]

    def describe(self, table: str) -> TableInfo:
        """Columns, keys, foreign keys and row count of one table or view.

        Raises:
            QueryError: ``runtime`` for an unknown table, with a "did you mean".
        """
        from psycopg import sql as pgsql

        match = resolve_table(table, self.tables())
        cols = self._trusted(_COLUMNS_SQL, (self.schema, match))
        refs = {str(a): f"{t}.{c}" for a, t, c in self._trusted(_FKEYS_SQL, (self.schema, match))}
        count_sql = pgsql.SQL("SELECT count(*) FROM {}.{}").format(
            pgsql.Identifier(self.schema), pgsql.Identifier(match)
        )
        count = self._trusted(count_sql, ())[0][0]  # type: ignore[arg-type]
        columns = tuple(
            ColumnInfo(
                name=str(name),
                type=str(typ),
                nullable=not (notnull or pk),
                primary_key=bool(pk),
                references=refs.get(str(name)),
            )
            for name, typ, notnull, pk in cols
        )
        return TableInfo(name=match, columns=columns, row_count=int(count))

    def close(self) -> None:
        """Mark the handle closed; pooled connections stay with the shared engine."""
        self._closed = True

    def __enter__(self) -> PostgresDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresDatabase({self.label!r}, schema={self.schema!r})"


def _is_backend_state(state: str) -> bool:
    return state.startswith("08") or state in _BACKEND_STATES


def _translate(exc: Any, timeout_s: float, label: str) -> Exception:
    """Map a psycopg error to a :class:`QueryError` kind, or to ``BackendError``."""
    state: str = exc.sqlstate or ""
    diag = getattr(exc, "diag", None)
    primary = (getattr(diag, "message_primary", None) or str(exc).splitlines()[0]).strip()
    hint = getattr(diag, "message_hint", None)
    msg = primary + (f" (hint: {hint})" if hint else "")
    if not state or _is_backend_state(state):
        return BackendError(f"{label}: PostgreSQL connection failed: {msg}")
    if state == "57014":
        return QueryError("timeout", timeout_message(timeout_s))
    if state == "42501":
        return QueryError("refused", f"refused: {msg}; this role may only read the task's tables")
    if state in ("25006", "0A000"):
        return QueryError("refused", f"{READ_ONLY_MESSAGE} ({msg})")
    if "multiple commands" in primary:
        return QueryError(
            "refused",
            "refused: send exactly one statement per query; this text contains more than "
            "one (remove everything after the first ';')",
        )
    if state.startswith("42"):
        return QueryError("syntax", msg)
    if state.startswith("54"):
        return QueryError("too_large", f"the query is too complex or too large: {msg}")
    return QueryError("runtime", msg)
