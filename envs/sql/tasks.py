"""Tasks of ``sql-v0``: the built-in question set and user task files.

Built-in tasks are generated from the templates in :mod:`gymhub.envs.sql.templates`.
Each template's parameters (a city, a category, a year ...) are drawn from the seed-0
fixture's values, which come from vocabularies shared by every seed, so a question's
constants also exist in the perturbed copies. A candidate task is kept only when its
gold result on the seed-0 fixture is non-trivial (not empty, not all NULL, not a lone
zero), and candidates whose result changes on the perturbed copies are preferred: a
policy that hard-codes the fixture's answer then fails verification. Parameter sets
are shuffled with a :class:`random.Random` seeded by a string, so generation is
identical in every process.
"""

from __future__ import annotations

import functools
import itertools
import random
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gymhub.envs.tasks import Task, iter_jsonl
from gymhub.errors import TaskFileError

from .fixtures import FixtureRef, UserDb, perturbed, sqlite_image
from .templates import DIALECTS, TEMPLATES, Template, render

__all__ = ["builtin_tasks", "is_ordered", "load_task_file"]

#: Most parameter sets tried per template (bounds generation time).
_MAX_CANDIDATES = 60
_SQLITE_HEADER = b"SQLite format 3\x00"


# ------------------------------------------------------------------------- is_ordered


def _skip_quoted(sql: str, i: int, close: str) -> int:
    """Index just past the literal or identifier opened at ``i``; doubled closers escape."""
    j = i + 1
    while j < len(sql):
        if sql[j] == close:
            if close != "]" and j + 1 < len(sql) and sql[j + 1] == close:
                j += 2
                continue
            return j + 1
        j += 1
    return j


def _top_level_tokens(sql: str) -> list[str]:
    """Upper-cased words and punctuation outside parentheses, literals and comments."""
    tokens: list[str] = []
    depth, i, n = 0, 0, len(sql)
    closers = {"'": "'", '"': '"', "`": "`", "[": "]"}
    while i < n:
        ch = sql[i]
        if ch in closers:
            i = _skip_quoted(sql, i, closers[ch])
            if depth == 0:
                tokens.append("<quoted>")
        elif sql.startswith("--", i):
            nl = sql.find("\n", i)
            i = n if nl < 0 else nl + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif ch == "(":
            depth += 1
            i += 1
        elif ch == ")":
            depth = max(0, depth - 1)
            i += 1
        elif ch.isalnum() or ch in "_$":
            j = i
            while j < n and (sql[j].isalnum() or sql[j] in "_$"):
                j += 1
            if depth == 0:
                tokens.append(sql[i:j].upper())
            i = j
        else:
            if depth == 0 and not ch.isspace():
                tokens.append(ch)
            i += 1
    return tokens


def is_ordered(sql: str) -> bool:
    """True when ``sql`` has an ``ORDER BY`` at the top level of the statement.

    ``ORDER BY`` inside parentheses (subqueries, window clauses, CTE bodies), string
    literals, quoted identifiers and comments does not order the result and is ignored.
    """
    toks = _top_level_tokens(sql)
    return any(a == "ORDER" and b == "BY" for a, b in itertools.pairwise(toks))


# ---------------------------------------------------------------------- builtin tasks


def _open_image(ref: FixtureRef) -> sqlite3.Connection:
    con = sqlite3.connect(":memory:")
    con.deserialize(sqlite_image(ref))
    return con


def _param_sets(tpl: Template, con: sqlite3.Connection) -> list[dict[str, Any]]:
    """The cartesian product of the template's parameter sources."""
    combos: list[dict[str, Any]] = [{}]
    for src in tpl.params:
        if isinstance(src, str):
            cur = con.execute(src)
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        else:
            rows = [dict(m) for m in src]
        combos = [{**c, **r} for c in combos for r in rows]
    return combos


def _canon(rows: Sequence[tuple[Any, ...]], ordered: bool) -> list[tuple[Any, ...]]:
    out = [tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows]
    return out if ordered else sorted(out, key=repr)


def _trivial(rows: Sequence[tuple[Any, ...]]) -> bool:
    """Empty, all NULL, or one row of NULLs and zeros: answers a guess would get right."""
    values = [v for r in rows for v in r]
    if not values or all(v is None for v in values):
        return True
    return len(rows) == 1 and all(v in (None, 0) for v in values)


def _schema_tasks(schema: str) -> list[Task]:
    ref = FixtureRef(schema)
    cons = [_open_image(r) for r in [ref, *perturbed(ref)]]
    tasks: list[Task] = []
    seen_q: set[str] = set()
    seen_sql: set[str] = set()
    try:
        for index, tpl in enumerate(TEMPLATES[schema]):
            combos = _param_sets(tpl, cons[0])
            random.Random(f"gymhub-sql-tasks/{schema}/{index}").shuffle(combos)
            cands: list[tuple[bool, str, dict[str, str], bool]] = []
            for params in combos[:_MAX_CANDIDATES]:
                question = tpl.question.format(**params)
                gold: dict[str, str] = {d: render(tpl.sql, d, params) for d in DIALECTS}
                if question in seen_q or gold["sqlite"] in seen_sql:
                    continue
                seen_q.add(question)
                seen_sql.add(gold["sqlite"])
                ordered = is_ordered(gold["sqlite"])
                base = cons[0].execute(gold["sqlite"]).fetchall()
                if _trivial(base):
                    continue
                want = _canon(base, ordered)
                varies = any(
                    _canon(c.execute(gold["sqlite"]).fetchall(), ordered) != want for c in cons[1:]
                )
                cands.append((not varies, question, gold, ordered))
            cands.sort(key=lambda c: c[0])  # stable: varying results first
            for _, question, gold, ordered in cands[: tpl.cap]:
                meta = {
                    "difficulty": tpl.difficulty, "category": tpl.category, "schema": schema,
                    "ordered": ordered, "template": f"{schema}/{index}",
                }  # fmt: skip
                tasks.append(
                    Task(f"{schema}-{len(tasks) + 1:04d}", question, ref, gold, meta)
                )
    finally:
        for c in cons:
            c.close()
    return tasks


@functools.lru_cache(maxsize=1)
def _builtin() -> tuple[Task, ...]:
    return tuple(t for schema in TEMPLATES for t in _schema_tasks(schema))


def builtin_tasks() -> list[Task]:
    """The built-in ``sql-v0`` tasks (over 500, on the seed-0 scale-1 fixtures).

    Each task's ``gold`` is ``{"sqlite": sql, "postgresql": sql}`` (the same rows on
    both backends), its ``fixture`` a :class:`FixtureRef`, and its ``meta`` holds
    ``difficulty``, ``category``, ``schema``, ``ordered`` (the gold query has a
    top-level ``ORDER BY``) and ``template``. Generated once per process and cached;
    the list is identical in every process.
    """
    return list(_builtin())


# -------------------------------------------------------------------------- user tasks


def _str_field(path: Path, line: int, obj: Mapping[str, Any], name: str) -> str:
    if name not in obj:
        raise TaskFileError(str(path), line, f"missing field {name!r}")
    value = obj[name]
    if not isinstance(value, str) or not value.strip():
        raise TaskFileError(
            str(path), line, f"field {name!r} must be a non-empty string, got {value!r}"
        )
    return value


def _db_path(path: Path, line: int, name: str, value: str) -> Path:
    """Resolve a database path against the task file's folder and check it is SQLite."""
    db = Path(value).expanduser()
    if not db.is_absolute():
        db = path.resolve().parent / db
    db = db.resolve()
    if not db.is_file():
        raise TaskFileError(str(path), line, f"field {name!r}: database file not found: {db}")
    with db.open("rb") as fh:
        header = fh.read(len(_SQLITE_HEADER))
    if header != _SQLITE_HEADER:
        raise TaskFileError(str(path), line, f"field {name!r}: not a SQLite database: {db}")
    return db


def load_task_file(path: str | Path) -> list[Task]:
    """Load the user's own tasks from a JSONL file.

    Each line is an object with ``id``, ``question``, ``db`` (a SQLite file; relative
    paths are resolved against the task file's folder) and ``gold_sql``, plus optional
    ``test_dbs`` (extra databases with the same schema, used as perturbed copies) and
    ``difficulty``. Unknown fields are ignored. The gold SQL is not executed here; the
    verifier runs it when it compiles the task.

    Returns:
        Tasks with ``fixture=UserDb(...)``, ``gold=<gold_sql>`` and ``meta`` holding
        ``difficulty`` (``None`` when not given), ``schema`` (the database file's
        stem) and ``ordered``.

    Raises:
        TaskFileError: naming the line and field for a missing field, a wrong type, a
            duplicate id, a missing database or a file that is not SQLite; with no
            line for a missing, unreadable or empty task file.
    """
    p = Path(path)
    tasks: list[Task] = []
    first_seen: dict[str, int] = {}
    for line, obj in iter_jsonl(p):
        task_id = _str_field(p, line, obj, "id")
        question = _str_field(p, line, obj, "question")
        db_value = _str_field(p, line, obj, "db")
        gold_sql = _str_field(p, line, obj, "gold_sql")
        if task_id in first_seen:
            raise TaskFileError(
                str(p), line, f"field 'id': duplicate id {task_id!r} (first on line "
                f"{first_seen[task_id]})"
            )  # fmt: skip
        first_seen[task_id] = line
        raw_tests = obj.get("test_dbs", [])
        if not isinstance(raw_tests, list) or not all(
            isinstance(x, str) and x.strip() for x in raw_tests
        ):
            raise TaskFileError(
                str(p), line, f"field 'test_dbs' must be a list of paths, got {raw_tests!r}"
            )
        difficulty = obj.get("difficulty")
        if difficulty is not None and not isinstance(difficulty, str):
            raise TaskFileError(
                str(p), line, f"field 'difficulty' must be a string, got {difficulty!r}"
            )
        db = _db_path(p, line, "db", db_value)
        tests = tuple(_db_path(p, line, f"test_dbs[{k}]", v) for k, v in enumerate(raw_tests))
        meta = {"difficulty": difficulty, "schema": db.stem, "ordered": is_ordered(gold_sql)}
        tasks.append(Task(task_id, question, UserDb(db, tests), gold_sql, meta))
    if not tasks:
        raise TaskFileError(str(p), None, "the task file holds no tasks")
    return tasks
