"""Shared vocabulary of the SQL sandbox: errors, results, schema info and a tiny lexer.

The backends (:mod:`.sqlite`, :mod:`.postgres`) and the renderer import from
here so that :mod:`gymhub.sandbox.sql`, the public facade, can re-export everything
without import cycles. The lexer is deliberately small: it only needs to find words
outside strings, quoted identifiers and comments, with their parenthesis depth, which
is enough to pick the statement's first keyword and to spot a top-level ``ORDER BY``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from gymhub.errors import QueryError

__all__ = [
    "MAX_SQL_CHARS",
    "READ_ONLY_MESSAGE",
    "ColumnInfo",
    "DatabaseSource",
    "QueryError",
    "QueryResult",
    "SqlDatabase",
    "TableInfo",
    "check_sql_text",
    "did_you_mean",
    "first_keyword",
    "iter_words",
    "quote_ident",
    "refuse_non_read",
    "resolve_table",
    "timeout_message",
]

#: Queries longer than this are refused before they reach a database (``too_large``).
MAX_SQL_CHARS = 20_000

#: The start of every refusal, so that agents learn one sentence.
READ_ONLY_MESSAGE = "refused: this database is read-only; only SELECT queries are allowed"

#: First keywords of statements that write or change state; refused before preparing.
#: Unknown words are left to the database, which answers with a syntax error.
WRITE_STARTS = frozenset({
    "INSERT", "UPDATE", "DELETE", "REPLACE", "MERGE", "UPSERT", "TRUNCATE", "CREATE", "DROP",
    "ALTER", "ATTACH", "DETACH", "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT",
    "SAVEPOINT", "RELEASE", "VACUUM", "REINDEX", "ANALYZE", "GRANT", "REVOKE", "COPY", "SET",
    "RESET", "LOCK", "LISTEN", "NOTIFY", "UNLISTEN", "DO", "CALL", "PREPARE", "EXECUTE",
    "DEALLOCATE", "DISCARD", "CLUSTER", "COMMENT", "REFRESH", "SECURITY", "LOAD", "IMPORT",
    "CHECKPOINT", "DECLARE", "FETCH", "MOVE", "CLOSE",
})


@dataclass(frozen=True)
class QueryResult:
    """The (possibly capped) result of one query.

    Attributes:
        columns: column names as the database reports them.
        rows: at most ``max_rows`` rows, in the order the database produced them.
        row_count: rows produced, counted up to ``count_cap``.
        more: True when counting stopped at ``count_cap`` ("at least row_count rows").
        truncated: True when ``rows`` does not hold the whole result.
        elapsed_ms: wall time spent executing and fetching.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    row_count: int
    more: bool
    truncated: bool
    elapsed_ms: float


@dataclass(frozen=True)
class ColumnInfo:
    """One column of a table, as shown to the agent by ``describe``.

    Attributes:
        name: column name.
        type: declared type (SQLite may leave it empty).
        nullable: False when the column is ``NOT NULL`` or part of the primary key.
        primary_key: the column belongs to the primary key.
        references: ``"table.column"`` for a foreign key, else ``None``.
    """

    name: str
    type: str
    nullable: bool
    primary_key: bool
    references: str | None = None


@dataclass(frozen=True)
class TableInfo:
    """A table (or view) with its columns and current row count."""

    name: str
    columns: tuple[ColumnInfo, ...]
    row_count: int


@runtime_checkable
class SqlDatabase(Protocol):
    """A database the agent may query, guarded so that queries can only read."""

    label: str
    dialect: str

    def query(
        self, sql: str, *, max_rows: int = 200, timeout_s: float = 2.0, count_cap: int = 100_000
    ) -> QueryResult:
        """Run one read-only statement; raises :class:`QueryError`."""
        ...

    def tables(self) -> list[str]:
        """Names of the tables and views the agent can query, sorted."""
        ...

    def describe(self, table: str) -> TableInfo:
        """Columns and row count of one table; unknown names raise ``QueryError``."""
        ...

    def close(self) -> None:
        """Release the connection; calling it twice is harmless."""
        ...


@runtime_checkable
class DatabaseSource(Protocol):
    """Something that can open a fresh, private :class:`SqlDatabase` (a verifier's state)."""

    @property
    def key(self) -> str:
        """Stable cache key, e.g. ``retail/seed=1/scale=1``."""
        ...

    @property
    def role(self) -> str:
        """``fixture`` or ``perturbed``."""
        ...

    def open(self) -> SqlDatabase:
        """Open a new database handle; the caller closes it."""
        ...


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_sql_text(sql: object) -> str:
    """Validate a query's text before any backend sees it.

    Returns:
        The query with trailing whitespace and semicolons removed (a trailing ``;``
        is harmless and should not count as a second statement).

    Raises:
        QueryError: not text, empty, too long, a lone surrogate or a NUL character.
    """
    if not isinstance(sql, str):
        raise QueryError("syntax", f"the query must be text, got {type(sql).__name__}")
    if len(sql) > MAX_SQL_CHARS:
        raise QueryError(
            "too_large",
            f"the query is {len(sql):,} characters long; the limit is {MAX_SQL_CHARS:,}. "
            "Write a shorter query (use joins or aggregates instead of long literal lists).",
        )
    bad = _SURROGATE.search(sql)
    if bad is not None:
        raise QueryError(
            "encoding",
            f"the query contains an invalid Unicode character (lone surrogate "
            f"U+{ord(bad.group()):04X} at position {bad.start()}); send valid UTF-8 text",
        )
    if "\x00" in sql:
        raise QueryError(
            "encoding",
            f"the query contains a NUL character at position {sql.index(chr(0))}; remove it",
        )
    body = sql.rstrip()
    while body.endswith(";"):
        body = body[:-1].rstrip()
    if first_keyword(body) is None:
        raise QueryError("syntax", "the query is empty; send one SELECT statement")
    return body


def iter_words(sql: str) -> Iterator[tuple[str, int]]:
    """Yield ``(WORD, depth)`` for each bare word, ``(`` and ``;`` outside literals.

    Words are upper-cased; ``depth`` is the parenthesis depth *before* the token.
    String literals (``'...'``, ``E'...'``, ``$tag$...$tag$``), quoted identifiers
    (``"..."``, backticks, ``[...]``) and comments are skipped, so a keyword inside
    them is never reported. Unterminated literals simply end the scan.
    """
    i, n, depth = 0, len(sql), 0
    while i < n:
        ch = sql[i]
        if ch.isspace():
            i += 1
        elif ch == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif ch == "/" and sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif ch in "'\"`":
            i = _skip_quoted(sql, i, ch)
        elif ch == "[":
            j = sql.find("]", i + 1)
            i = n if j < 0 else j + 1
        elif ch == "$" and (m := _DOLLAR.match(sql, i)) is not None:
            j = sql.find(m.group(), m.end())
            i = n if j < 0 else j + len(m.group())
        elif ch == "(":
            yield "(", depth
            depth += 1
            i += 1
        elif ch == ")":
            depth = max(0, depth - 1)
            i += 1
        elif ch == ";":
            yield ";", depth
            i += 1
        elif ch.isalpha() or ch == "_":
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] in "_$"):
                j += 1
            yield sql[i:j].upper(), depth
            i = j
        else:
            i += 1


_DOLLAR = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")


def _skip_quoted(sql: str, i: int, quote: str) -> int:
    """Index just past the literal starting at ``i`` (doubled quotes escape)."""
    j = i + 1
    n = len(sql)
    while j < n:
        if sql[j] == quote:
            if j + 1 < n and sql[j + 1] == quote:
                j += 2
                continue
            return j + 1
        if sql[j] == "\\" and quote == "'" and _is_e_prefix(sql, i):
            j += 2  # PostgreSQL E'...' escapes
            continue
        j += 1
    return n


def _is_e_prefix(sql: str, i: int) -> bool:
    """True when the quote at ``i`` opens a PostgreSQL ``E'...'`` escape string."""
    if i == 0 or sql[i - 1] not in "eE":
        return False
    return i == 1 or not (sql[i - 2].isalnum() or sql[i - 2] == "_")


def first_keyword(sql: str) -> str | None:
    """The statement's first word (or ``(``), upper-cased; ``None`` for an empty query."""
    for word, _ in iter_words(sql):
        return word
    return None


def refuse_non_read(sql: str) -> None:
    """Refuse statements that cannot be read-only queries, before they are prepared.

    This is the friendly first layer (it names what was attempted); the backends'
    own guards (authorizer, read-only transaction, privileges) stay authoritative, so
    a write this list misses is still refused, only with a less specific message.

    Raises:
        QueryError: ``refused`` for a statement that starts like a write.
    """
    word = first_keyword(sql)
    if word in WRITE_STARTS:
        raise QueryError(
            "refused",
            f"{READ_ONLY_MESSAGE} (attempted: {word})",
        )


def did_you_mean(name: str, names: list[str]) -> str:
    """A "; did you mean 'x'? Tables: ..." suffix for an unknown table name."""
    lowered = {n.lower(): n for n in names}
    hint = difflib.get_close_matches(str(name).lower(), list(lowered), n=1, cutoff=0.5)
    did = f"; did you mean {lowered[hint[0]]!r}?" if hint else ""
    listing = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
    return f"{did} Tables: {listing or '(none)'}"


def resolve_table(table: str, names: list[str]) -> str:
    """The real name of ``table`` among ``names``: exact first, then case-insensitive.

    Every dialect's ``describe`` resolves the agent's table name the same way (agents
    often change the case), so the rule and its error live here once.

    Raises:
        QueryError: ``runtime``, "no table named ...", with a :func:`did_you_mean`.
    """
    if table in names:
        return table
    lowered = str(table).lower()
    match = next((n for n in names if n.lower() == lowered), None)
    if match is None:
        raise QueryError("runtime", f"no table named {table!r}" + did_you_mean(table, names))
    return match


def quote_ident(name: str) -> str:
    """``name`` as a double-quoted SQL identifier (``"`` doubled), for SQLite and PostgreSQL.

    For trusted names only (fixture tables, schemas): quoting makes any name one
    identifier, so reserved words, spaces and case survive.
    """
    return '"' + name.replace('"', '""') + '"'


def timeout_message(timeout_s: float) -> str:
    """The agent-facing text of a ``timeout`` error."""
    return (
        f"query stopped after {timeout_s:.1f} s (the time limit); it is too slow — add "
        "WHERE conditions, avoid cross joins and unbounded recursive CTEs, or aggregate"
    )
