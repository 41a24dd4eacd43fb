"""Guarded, read-only SQLite databases: private in-memory copies or read-only files.

Layers, outermost first (see :mod:`gymhub.sandbox.sql` for the threat model):

1. text checks (length, encoding, emptiness) and a first-keyword check that refuses
   statements starting like a write (``INSERT``, ``VACUUM``...), naming what was tried;
2. an authorizer on the connection that allows only reads (``SELECT``, ``READ``,
   functions other than ``load_extension``, recursive CTEs, introspection PRAGMAs)
   and denies every write, DDL, ``ATTACH``/``DETACH``, transaction and PRAGMA change;
3. ``PRAGMA query_only=ON`` and, for files, ``mode=ro&immutable=1``;
4. a progress handler that aborts the statement at a wall-clock deadline, plus
   length limits so that one value (``randomblob(1e9)``) cannot take the memory;
5. and, for images, the copy itself: whatever happens, the fixture's bytes and other
   episodes' copies are untouched.
"""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from gymhub.errors import BackendError, GymhubError
from gymhub.sandbox.sql.image import restore_image
from gymhub.sandbox.sql.types import (
    READ_ONLY_MESSAGE,
    ColumnInfo,
    QueryError,
    QueryResult,
    TableInfo,
    check_sql_text,
    did_you_mean,
    quote_ident,
    refuse_non_read,
    resolve_table,
    timeout_message,
)

__all__ = ["SqliteDatabase"]

#: Largest string or blob a query may produce (SQLITE_LIMIT_LENGTH), in bytes.
MAX_VALUE_BYTES = 1_000_000
#: Largest total size of the rows a query keeps, in bytes of text and blobs.
MAX_RESULT_BYTES = 64_000_000
_FETCH_BATCH = 256
_PROGRESS_STEPS = 1_000
_TRUSTED_TIMEOUT_S = 30.0

# PRAGMAs whose argument names a table or index: reading schema, never changing it.
_SCHEMA_PRAGMAS = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "foreign_key_list",
})
# PRAGMAs that only report a setting when given no value.
_SETTING_PRAGMAS = frozenset({
    "collation_list", "function_list", "compile_options", "encoding", "user_version",
    "application_id", "foreign_keys", "page_size", "page_count", "query_only",
})
_ALLOWED = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
_ACTIONS = {
    getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ")
    for name in (
        "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE",
        "CREATE_TEMP_TRIGGER", "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW", "DELETE",
        "DROP_INDEX", "DROP_TABLE", "DROP_TEMP_INDEX", "DROP_TEMP_TABLE", "DROP_TEMP_TRIGGER",
        "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_VIEW", "INSERT", "TRANSACTION", "UPDATE",
        "ATTACH", "DETACH", "ALTER_TABLE", "REINDEX", "ANALYZE", "CREATE_VTABLE",
        "DROP_VTABLE", "SAVEPOINT",
    )
}
_RUNTIME_MARKERS = ("overflow", "malformed", "json", "out of range", "too many levels", "unable")


class _RetryLenient(GymhubError):
    """Internal: a decode error asks for a retry with the lenient text factory."""


def _lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


class SqliteDatabase:
    """A guarded SQLite connection; build one with :meth:`from_image` or :meth:`from_file`.

    A connection is used by one thread at a time but may be created in one thread and
    used in another (a server's thread pool), so it is opened with
    ``check_same_thread=False`` and every call holds a lock.
    """

    dialect = "sqlite"

    def __init__(self, conn: sqlite3.Connection, label: str = "") -> None:
        """Guard an open connection; prefer the ``from_*`` constructors."""
        self.label = label
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.Lock()
        self._deadline = math.inf
        self._denied: str | None = None
        try:
            conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
            conn.execute("PRAGMA query_only=ON")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise BackendError(f"{label or 'sqlite'}: not a usable SQLite database: {exc}") from exc
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 100_000)
        if hasattr(conn, "enable_load_extension"):  # absent when SQLite was built without it
            conn.enable_load_extension(False)
        conn.set_authorizer(self._authorize)
        conn.set_progress_handler(self._progress, _PROGRESS_STEPS)

    @classmethod
    def from_image(cls, image: bytes, label: str = "") -> SqliteDatabase:
        """A private in-memory copy of a serialized database (``Connection.serialize()``).

        ``deserialize`` copies the bytes, so nothing done through this handle can reach
        the image or another copy; for a ~100 KB image this takes tens of microseconds.

        Raises:
            BackendError: the bytes are not a SQLite database.
        """
        conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        try:
            restore_image(conn, image, label)
        except BackendError:
            conn.close()
            raise
        return cls(conn, label)

    @classmethod
    def from_file(cls, path: str | Path, label: str = "") -> SqliteDatabase:
        """Open a database file read-only (``mode=ro&immutable=1``), without copying it.

        ``immutable`` also tells SQLite that nobody else writes the file, so it takes no
        locks and creates no journal next to it.

        Raises:
            BackendError: the file is missing or not a SQLite database.
        """
        p = Path(path).resolve()
        if not p.is_file():
            raise BackendError(f"{label or 'sqlite'}: database file {str(p)!r} does not exist")
        uri = f"{p.as_uri()}?mode=ro&immutable=1"
        try:
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise BackendError(f"{label or 'sqlite'}: cannot open {str(p)!r}: {exc}") from exc
        return cls(conn, label or p.name)

    # ------------------------------------------------------------------ guards
    def _authorize(self, action: int, arg1: str | None, arg2: str | None,
                   db: str | None, source: str | None) -> int:
        if action in _ALLOWED:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and db == "main":
            # First use of an eponymous virtual table (json_each, pragma_table_info)
            # registers it with a nested "UPDATE sqlite_master". SQLite itself refuses
            # real writes to sqlite_master without writable_schema (a denied PRAGMA),
            # and query_only blocks any write, so allowing this check is safe.
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() != "load_extension":
                return sqlite3.SQLITE_OK
            self._denied = "loading an extension with load_extension()"
        elif action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in _SCHEMA_PRAGMAS or (name in _SETTING_PRAGMAS and arg2 is None):
                return sqlite3.SQLITE_OK
            self._denied = f"PRAGMA {arg1}" + (f" = {arg2}" if arg2 is not None else "")
        elif action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
            self._denied = f"transaction control ({' '.join(a for a in (arg1, arg2) if a)})"
        else:
            what = _ACTIONS.get(action, f"operation {action}")
            self._denied = f"{what} on {arg1!r}" if arg1 else what
        return sqlite3.SQLITE_DENY

    def _progress(self) -> int:
        return 1 if time.monotonic() > self._deadline else 0

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise BackendError(f"{self.label or 'sqlite'}: the database is closed")
        return self._conn

    # ------------------------------------------------------------------ queries
    def query(
        self, sql: str, *, max_rows: int = 200, timeout_s: float = 2.0, count_cap: int = 100_000
    ) -> QueryResult:
        """Run one read-only statement and return at most ``max_rows`` rows.

        Rows are streamed: ``max_rows`` are kept and the rest only counted, up to
        ``count_cap``, all before the deadline, so a huge result never sits in memory.

        Raises:
            QueryError: the statement is invalid, refused, too slow or too large.
            BackendError: the database is closed.
        """
        body = check_sql_text(sql)
        refuse_non_read(body)
        with self._lock:
            conn = self._connection()
            try:
                return self._run(conn, body, max_rows, timeout_s, count_cap)
            except _RetryLenient:  # invalid UTF-8 stored in the database: decode leniently
                conn.text_factory = _lenient_text
                try:
                    return self._run(conn, body, max_rows, timeout_s, count_cap)
                finally:
                    conn.text_factory = str

    def _run(self, conn: sqlite3.Connection, sql: str, max_rows: int, timeout_s: float,
             count_cap: int) -> QueryResult:
        start = time.perf_counter()
        self._deadline = time.monotonic() + timeout_s
        self._denied = None
        cap = max(count_cap, max_rows)
        kept: list[tuple[Any, ...]] = []
        count, more, size = 0, False, 0
        try:
            cur = conn.execute(sql)
            columns = tuple(d[0] for d in cur.description or ())
            while columns:
                batch = cur.fetchmany(_FETCH_BATCH)
                if not batch:
                    break
                room = max_rows - len(kept)
                if room > 0:
                    kept.extend(batch[:room])
                    size += sum(_row_bytes(r) for r in batch[:room])
                    if size > MAX_RESULT_BYTES:
                        raise QueryError("too_large", _too_large_result())
                count += len(batch)
                if count > cap:
                    count, more = cap, True
                    break
            cur.close()
        except sqlite3.Error as exc:
            raise self._translate(exc, timeout_s) from None
        finally:
            self._deadline = math.inf
        return QueryResult(
            columns=columns,
            rows=tuple(kept),
            row_count=count,
            more=more,
            truncated=more or len(kept) < count,
            elapsed_ms=(time.perf_counter() - start) * 1000.0,
        )

    def _translate(self, exc: sqlite3.Error, timeout_s: float) -> Exception:
        msg = str(exc)
        low = msg.lower()
        if low.startswith("could not decode to utf-8"):
            return _RetryLenient()
        if "one statement at a time" in low:
            return QueryError(
                "refused",
                "refused: send exactly one statement per query; this text contains more "
                "than one (remove everything after the first ';')",
            )
        if any(m in low for m in ("not authorized", "authorization denied", "readonly database")):
            what = f" (attempted: {self._denied})" if self._denied else ""
            return QueryError("refused", READ_ONLY_MESSAGE + what)
        if low == "interrupted" and time.monotonic() >= self._deadline - 0.001:
            return QueryError("timeout", timeout_message(timeout_s))
        if "too big" in low:
            return QueryError(
                "too_large",
                f"a value in the result is larger than {MAX_VALUE_BYTES:,} bytes ({msg}); "
                "select smaller values",
            )
        code = getattr(exc, "sqlite_errorcode", sqlite3.SQLITE_ERROR)
        if code == sqlite3.SQLITE_ERROR and not any(m in low for m in _RUNTIME_MARKERS):
            return QueryError("syntax", msg + self._table_hint(msg))
        return QueryError("runtime", msg)

    def _table_hint(self, msg: str) -> str:
        prefix = "no such table: "
        if not msg.startswith(prefix):
            return ""
        missing = msg[len(prefix):].split(".")[-1]
        names = self._table_names()
        return did_you_mean(missing, names)

    # ------------------------------------------------------------ introspection
    def _trusted(self, sql: str) -> list[tuple[Any, ...]]:
        with self._lock:
            conn = self._connection()
            self._deadline = time.monotonic() + _TRUSTED_TIMEOUT_S
            try:
                return conn.execute(sql).fetchall()
            finally:
                self._deadline = math.inf

    def _table_names(self) -> list[str]:
        rows = self._connection().execute(
            "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') "
            "AND substr(name, 1, 7) <> 'sqlite_' ORDER BY name"
        ).fetchall()
        return [str(r[0]) for r in rows]

    def tables(self) -> list[str]:
        """Names of the tables and views, sorted (SQLite's own tables left out)."""
        with self._lock:
            return self._table_names()

    def describe(self, table: str) -> TableInfo:
        """Columns, keys, foreign keys and row count of one table or view.

        Raises:
            QueryError: ``runtime`` for an unknown table, with a "did you mean".
        """
        match = resolve_table(table, self.tables())
        ident = quote_ident(match)
        cols = self._trusted(f"PRAGMA table_info({ident})")
        refs: dict[str, str] = {}
        for fk in self._trusted(f"PRAGMA foreign_key_list({ident})"):
            target_table, src, dst = str(fk[2]), str(fk[3]), fk[4]
            if dst is None:  # "REFERENCES t" without a column means t's primary key
                info = self._trusted(f"PRAGMA table_info({quote_ident(target_table)})")
                pk = [c for c in info if c[5]]
                dst = pk[0][1] if pk else "rowid"
            refs[src] = f"{target_table}.{dst}"
        count = self._trusted(f"SELECT count(*) FROM {ident}")[0][0]
        columns = tuple(
            ColumnInfo(
                name=str(c[1]),
                type=str(c[2] or ""),
                nullable=not (c[3] or c[5]),
                primary_key=bool(c[5]),
                references=refs.get(str(c[1])),
            )
            for c in cols
        )
        return TableInfo(name=match, columns=columns, row_count=int(count))

    def close(self) -> None:
        """Close the connection (a private copy is freed with it); idempotent."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> SqliteDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else "open"
        return f"SqliteDatabase({self.label!r}, {state})"


def _row_bytes(row: tuple[Any, ...]) -> int:
    return sum(len(v) for v in row if isinstance(v, str | bytes))


def _too_large_result() -> str:
    return (
        f"the result is larger than {MAX_RESULT_BYTES // 1_000_000} MB of text and blobs; "
        "select fewer rows or smaller columns"
    )
