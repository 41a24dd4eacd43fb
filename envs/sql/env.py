"""``sql-v0``: answer a question about a database by exploring it with SQL, then submit a query.

Each episode opens its own guarded copy of the task's fixture (SQLite: a private
in-memory copy restored from a cached image; PostgreSQL: a read-only transaction as
a SELECT-only role), so nothing the agent sends can change the fixture or another
episode. The submitted query is scored by ``sql_match``: executed on the fixture and
on perturbed copies (same schema, different seeded data) and compared with the gold
query's result, so a query that matches one database by luck does not pass.

Choices worth knowing:
* Query results are shown as a compact table capped in rows and characters, with the
  total row count, because a model learns nothing from 10^6 rows of output.
* ``show_schema=True`` puts the table definitions in the system prompt, which lets a
  small model answer in one turn (the GRPO demo uses it); without it the agent must
  explore with ``list_tables`` / ``describe_table``.
* User task files (Spider/BIRD-shaped JSONL) run on their own ``.sqlite`` files, opened
  read-only without a copy; their perturbed copies are the file's optional
  ``test_dbs`` (without them, only the given database is checked).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gymhub.errors import ConfigError
from gymhub.sandbox.sql import (
    DatabaseSource,
    PostgresDatabase,
    PostgresSource,
    QueryError,
    SqlDatabase,
    SqliteDatabase,
    SqliteFileSource,
    SqliteImageSource,
    quote_ident,
    render_result,
)
from gymhub.types import Message, Score, ToolCall
from gymhub.verifiers.core import compile_cached

from ..core import VerifierCase
from ..tasks import Task, filter_tasks, resolve_tasks
from ..tools import Final, ToolEnv, ToolError, tool
from .fixtures import FixtureRef, UserDb, ensure_postgres, perturbed, sqlite_image
from .schemas import SCHEMAS
from .tasks import builtin_tasks, load_task_file

__all__ = ["DEFAULT_VERIFIER", "SqlEnv"]

DEFAULT_VERIFIER: Mapping[str, Any] = {"type": "sql_match", "preset": "test_suite"}

_SYSTEM = """You are a data analyst. Answer the user's question with one {dialect} SQL query.
Tools: list_tables, describe_table(table), run_sql(query) to explore (read-only; results \
show at most {max_rows} rows), and submit(query) to give your final answer. The submitted \
query's result is compared with the correct answer, so return exactly the columns the \
question asks for, in a sensible order. You have {max_turns} turns."""


class SqlEnv(ToolEnv):
    """The SQL fixture-database environment.

    Args:
        tasks: ``None`` for the built-in tasks, a path to a JSONL task file, or tasks.
        max_turns: turn budget; running out truncates the episode with score 0.
        difficulty: keep only tasks with these ``meta["difficulty"]`` tags.
        schemas: keep only built-in tasks on these schemas.
        postgres_url: run on PostgreSQL instead of SQLite (an admin URL that may
            create schemas and the reader role); fixtures are loaded on first use.
        reader_url: the SELECT-only role's URL; derived from ``postgres_url`` with
            the user ``gymhub_reader`` when not given (trust or peer auth).
        perturbations: perturbed copies each submission is also checked on.
        verifier: a ``sql_match`` spec (presets: ``test_suite``, ``bird``, ``spider_strict``).
        show_schema: put the tables' definitions in the system prompt.
        max_rows: rows of a result shown to the agent.
        max_chars: characters of a result shown to the agent.
        query_timeout_s: wall-clock limit of one agent query.
        render_mode: ``"ansi"`` or ``None``.
    """

    def __init__(
        self,
        tasks: str | Path | Sequence[Task] | None = None,
        *,
        max_turns: int = 8,
        difficulty: str | Sequence[str] | None = None,
        schemas: str | Sequence[str] | None = None,
        postgres_url: str | None = None,
        reader_url: str | None = None,
        perturbations: int = 2,
        verifier: Mapping[str, Any] | None = None,
        show_schema: bool = False,
        max_rows: int = 20,
        max_chars: int = 4000,
        query_timeout_s: float = 2.0,
        render_mode: str | None = None,
    ) -> None:
        task_list = resolve_tasks(tasks, builtin_tasks, load_task_file)
        task_list = filter_tasks(task_list, "difficulty", difficulty)
        _check_schemas(task_list, schemas)
        task_list = filter_tasks(task_list, "schema", schemas)
        if not task_list:
            raise ConfigError("no tasks left after filtering by difficulty/schemas")
        if perturbations < 0:
            raise ConfigError(f"perturbations must be >= 0, got {perturbations}")
        super().__init__(task_list, max_turns=max_turns, render_mode=render_mode)
        self.postgres_url = postgres_url
        self.reader_url = reader_url or (_reader_url(postgres_url) if postgres_url else None)
        self.dialect = "postgresql" if postgres_url else "sqlite"
        self.perturbations = perturbations
        self.verifier = compile_cached(verifier or DEFAULT_VERIFIER, name="sql_match")
        self.show_schema = show_schema
        self.max_rows, self.max_chars, self.query_timeout_s = max_rows, max_chars, query_timeout_s
        self.db: SqlDatabase | None = None

    # ------------------------------------------------------------------ episode
    def _start(self, task: Task) -> tuple[list[Message], dict[str, Any]]:
        self.db = self._open(task)
        system = _SYSTEM.format(
            dialect=_DIALECT_NAMES[self.dialect], max_rows=self.max_rows, max_turns=self.max_turns
        )
        if self.show_schema:
            system += "\n\nThe database:\n" + self._schema_text(self.db)
        observation = [
            Message(role="system", content=system),
            Message(role="user", content=task.prompt),
        ]
        return observation, {"verifier": self.verifier.id, "dialect": self.dialect}

    def _end(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None

    def _open(self, task: Task) -> SqlDatabase:
        fixture = task.fixture
        if isinstance(fixture, UserDb):
            if self.postgres_url:
                raise ConfigError("task files with SQLite databases cannot run on PostgreSQL")
            return SqliteDatabase.from_file(fixture.path, label=fixture.path.name)
        if not isinstance(fixture, FixtureRef):
            raise ConfigError(f"task {task.id} has an unsupported fixture {fixture!r}")
        if self.postgres_url and self.reader_url:
            schema = _ensure_pg(fixture, self.postgres_url)
            return PostgresDatabase(self.reader_url, schema, label=fixture.key)
        return SqliteDatabase.from_image(sqlite_image(fixture), label=fixture.key)

    def _require_db(self) -> SqlDatabase:
        if self.db is None:
            raise ToolError("no database is open; the episode has not started")
        return self.db

    # -------------------------------------------------------------------- tools
    @tool
    def list_tables(self) -> str:
        """List the tables of the database."""
        try:
            names = self._require_db().tables()
        except QueryError as exc:
            raise ToolError(str(exc)) from exc
        return "Tables: " + ", ".join(names)

    @tool
    def describe_table(self, table: str) -> str:
        """Show a table's columns (types, keys, references), its row count and a few rows.

        Args:
            table: the table's name, as listed by list_tables.
        """
        db = self._require_db()
        try:
            info = db.describe(table)
            sample = db.query(
                f"SELECT * FROM {quote_ident(info.name)} LIMIT 3",
                max_rows=3,
                timeout_s=self.query_timeout_s,
            )
        except QueryError as exc:
            raise ToolError(str(exc)) from exc
        lines = [f"Table {info.name} ({info.row_count:,} rows)"]
        for c in info.columns:
            flags = [c.type]
            if c.primary_key:
                flags.append("primary key")
            if not c.nullable:
                flags.append("not null")
            if c.references:
                flags.append(f"references {c.references}")
            lines.append(f"  {c.name}: {', '.join(flags)}")
        lines.append("Sample rows:")
        lines.append(render_result(sample, max_chars=self.max_chars // 2))
        return "\n".join(lines)

    @tool
    def run_sql(self, query: str) -> str:
        """Run a read-only SQL query and show its result.

        Args:
            query: one SELECT statement.
        """
        db = self._require_db()
        try:
            result = db.query(query, max_rows=self.max_rows, timeout_s=self.query_timeout_s)
        except QueryError as exc:
            raise ToolError(str(exc)) from exc
        return render_result(result, max_chars=self.max_chars)

    @tool
    def submit(self, query: str) -> Final:
        """Submit your final SQL query; this ends the episode.

        Args:
            query: the SELECT statement whose result answers the question.
        """
        assert self.task is not None
        score = self.verify(query, self.task)
        if not score.ok:
            verdict = "could not be scored (infrastructure error)"
        else:
            verdict = "correct" if score.value >= 1.0 else "incorrect"
        return Final(f"Submitted. The answer is {verdict}.", score)

    # ---------------------------------------------------------------- verifier
    def verify(self, submission: Any, task: Task) -> Score:
        """Score a query for ``task`` on its fixture and perturbed copies."""
        try:
            sources = self.sources(task)
        except Exception as exc:  # an unusable fixture is the verifier's failure, not the agent's
            return Score.failed(
                f"cannot prepare databases: {type(exc).__name__}: {exc}", self.verifier.id
            )
        return self.verifier(submission, task, sources)

    def sources(self, task: Task) -> list[DatabaseSource]:
        """The databases a submission for ``task`` is checked on, fixture first."""
        fixture = task.fixture
        if isinstance(fixture, UserDb):
            return [
                SqliteFileSource(str(p), p, "fixture" if i == 0 else "perturbed")
                for i, p in enumerate((fixture.path, *fixture.test_dbs))
            ]
        if not isinstance(fixture, FixtureRef):
            raise ConfigError(f"task {task.id} has an unsupported fixture {fixture!r}")
        refs = [fixture, *perturbed(fixture, self.perturbations)]
        if self.postgres_url and self.reader_url:
            url = self.reader_url
            return [
                PostgresSource(
                    f"pg:{r.key}",
                    url,
                    _ensure_pg(r, self.postgres_url),
                    "fixture" if i == 0 else "perturbed",
                )
                for i, r in enumerate(refs)
            ]
        return [_image_source(r, "fixture" if i == 0 else "perturbed") for i, r in enumerate(refs)]

    def gold_query(self, task: Task) -> str:
        """The gold SQL for this environment's dialect."""
        gold = task.gold
        if isinstance(gold, Mapping):
            return str(gold[self.dialect])
        return str(gold)

    def gold_action(self) -> Message:
        """Submit the gold query."""
        assert self.task is not None
        call = ToolCall(id="gold", name="submit", arguments={"query": self.gold_query(self.task)})
        return Message(role="assistant", content="", tool_calls=(call,))

    def verifier_cases(self, task: Task) -> list[VerifierCase]:
        """The gold query passes (also reformatted); a wrong query fails; junk scores 0."""
        gold = self.gold_query(task)
        return [
            VerifierCase(gold, "pass", "gold"),
            VerifierCase(
                "  " + gold.strip().rstrip(";") + " ;  -- reformatted", "pass", "gold reformatted"
            ),
            VerifierCase("SELECT 'gymhub: no such value' AS wrong", "fail", "wrong constant"),
            VerifierCase("SELEC nothing FRM nowhere", "malformed", "syntax error"),
            VerifierCase("DROP TABLE IF EXISTS x", "malformed", "destructive statement"),
            VerifierCase(None, "malformed", "not a string"),
        ]

    def _schema_text(self, db: SqlDatabase) -> str:
        lines = []
        for name in db.tables():
            info = db.describe(name)
            cols = ", ".join(
                f"{c.name} {c.type}" + (f" -> {c.references}" if c.references else "")
                for c in info.columns
            )
            lines.append(f"{name}({cols})")
        return "\n".join(lines)


_DIALECT_NAMES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
_pg_lock = threading.Lock()
_pg_loaded: dict[tuple[FixtureRef, str], str] = {}


def _ensure_pg(ref: FixtureRef, admin_url: str) -> str:
    key = (ref, admin_url)
    with _pg_lock:
        if key not in _pg_loaded:
            _pg_loaded[key] = ensure_postgres(ref, admin_url)
        return _pg_loaded[key]


@functools.lru_cache(maxsize=256)
def _image_source(ref: FixtureRef, role: str) -> SqliteImageSource:
    return SqliteImageSource(ref.key, sqlite_image(ref), role)


def _reader_url(admin_url: str) -> str:
    from sqlalchemy.engine import make_url

    url = make_url(admin_url).set(username="gymhub_reader", password=None)
    return str(url.render_as_string(hide_password=False))


def _check_schemas(tasks: list[Task], wanted: str | Sequence[str] | None) -> None:
    if wanted is None:
        return
    allowed = {wanted} if isinstance(wanted, str) else set(wanted)
    unknown = allowed - set(SCHEMAS) - {str(t.meta.get("schema")) for t in tasks}
    if unknown:
        raise ConfigError(f"unknown schema(s) {sorted(unknown)}; known: {sorted(SCHEMAS)}")
