from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import math
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gymhub.envs.sql.fixtures import FixtureRef, UserDb, ensure_postgres, perturbed, sqlite_image
from gymhub.envs.sql.tasks import builtin_tasks, is_ordered, load_task_file
from gymhub.envs.sql.templates import CATEGORIES
from gymhub.envs.tasks import Task
from gymhub.errors import TaskFileError

_cons: dict[FixtureRef, sqlite3.Connection] = {}


def _run(ref: FixtureRef, sql: str) -> list[tuple[Any, ...]]:
    if ref not in _cons:
        con = sqlite3.connect(":memory:")
        con.deserialize(sqlite_image(ref))
        _cons[ref] = con
    return _cons[ref].execute(sql).fetchall()


def _norm(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, dt.date):
        return v.isoformat()
    return v


def _same(a: list[Any], b: list[Any], ordered: bool) -> bool:
    ra = [tuple(_norm(v) for v in r) for r in a]
    rb = [tuple(_norm(v) for v in r) for r in b]
    if not ordered:
        ra, rb = sorted(ra, key=repr), sorted(rb, key=repr)
    if len(ra) != len(rb):
        return False
    for x, y in zip(ra, rb, strict=True):
        if len(x) != len(y):
            return False
        for u, w in zip(x, y, strict=True):
            if isinstance(u, float) or isinstance(w, float):
                if u is None or w is None or not math.isclose(u, w, abs_tol=1e-6):
                    return False
            elif u != w:
                return False
    return True


def test_task_set_shape() -> None:
    tasks = builtin_tasks()
    assert len(tasks) >= 500
    assert len({t.id for t in tasks}) == len(tasks)
    for schema in ("retail", "hr", "flights", "library"):
        mine = [t for t in tasks if t.meta["schema"] == schema]
        assert len(mine) >= 100
        assert len({t.prompt for t in mine}) == len(mine)
        assert len({t.gold["sqlite"] for t in mine}) == len(mine)
        assert {t.meta["category"] for t in mine} == set(CATEGORIES)
    diff = Counter(t.meta["difficulty"] for t in tasks)
    assert 0.35 <= diff["easy"] / len(tasks) <= 0.5
    assert 0.28 <= diff["medium"] / len(tasks) <= 0.42
    assert 0.18 <= diff["hard"] / len(tasks) <= 0.32
    for t in tasks:
        assert isinstance(t, Task) and t.fixture == FixtureRef(t.meta["schema"])
        assert set(t.gold) == {"sqlite", "postgresql"}
        assert t.meta["ordered"] == is_ordered(t.gold["sqlite"])
        assert t.id.startswith(f"{t.meta['schema']}-")
    easy_single = [t for t in tasks if t.meta["difficulty"] == "easy" and " JOIN " not in t.gold["sqlite"]]
    assert len(easy_single) >= 200
    assert builtin_tasks() == tasks


def test_gold_runs_non_empty_and_mostly_varies() -> None:
    tasks = builtin_tasks()
    varies = 0
    for t in tasks:
        rows = _run(t.fixture, t.gold["sqlite"])
        assert rows and any(v is not None for r in rows for v in r), t.id
        if any(
            not _same(_run(p, t.gold["sqlite"]), rows, t.meta["ordered"]) for p in perturbed(t.fixture)
        ):
            varies += 1
    assert varies / len(tasks) >= 0.8


def test_builtin_tasks_identical_across_processes() -> None:
    code = (
        "import hashlib, json\n"
        "from gymhub.envs.sql.tasks import builtin_tasks\n"
        "d = [[t.id, t.prompt, t.gold, dict(t.meta), t.fixture.key] for t in builtin_tasks()]\n"
        "print(hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest())\n"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }  # fmt: skip
    d = [[t.id, t.prompt, t.gold, dict(t.meta), t.fixture.key] for t in builtin_tasks()]
    digests.add(hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest())
    assert len(digests) == 1


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT a FROM t ORDER BY a", True),
        ("select a from t order\n  by a desc limit 3", True),
        ("SELECT a FROM t", False),
        ("SELECT * FROM (SELECT a FROM t ORDER BY a LIMIT 3) s", False),
        ("SELECT a FROM t WHERE b = 'ORDER BY x'", False),
        ("SELECT a FROM t -- ORDER BY a\n", False),
        ("SELECT a FROM t /* ORDER BY a */", False),
        ('SELECT "order" FROM t', False),
        ("SELECT a, ROW_NUMBER() OVER (ORDER BY a) FROM t", False),
        ("WITH c AS (SELECT a FROM t ORDER BY a) SELECT a FROM c", False),
        ("WITH c AS (SELECT a FROM t) SELECT a FROM c ORDER BY a", True),
        ("SELECT 'it''s (' FROM t ORDER /* c */ BY 1", True),
        ("SELECT a FROM t WHERE x IN (SELECT y FROM u ORDER BY y) ORDER BY a", True),
        ("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", True),
        ("SELECT order_id FROM orders", False),
    ],
)
def test_is_ordered(sql: str, expected: bool) -> None:
    assert is_ordered(sql) is expected


# ------------------------------------------------------------------------- task files


def _make_db(path: Path, content: bytes | None = None) -> Path:
    if content is not None:
        path.write_bytes(content)
        return path
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.execute("INSERT INTO t VALUES (1), (2)")
    con.commit()
    con.close()
    return path


def _write(path: Path, lines: list[Any]) -> Path:
    path.write_text(
        "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n",
        encoding="utf-8",
    )
    return path


def _good(**extra: Any) -> dict[str, Any]:
    return {"id": "a", "question": "How many?", "db": "shop.sqlite",
            "gold_sql": "SELECT COUNT(*) FROM t", **extra}  # fmt: skip


def test_load_task_file_happy_path(tmp_path: Path) -> None:
    _make_db(tmp_path / "shop.sqlite")
    (tmp_path / "alt").mkdir()
    _make_db(tmp_path / "alt" / "shop2.sqlite")
    f = _write(tmp_path / "tasks.jsonl", [
        _good(difficulty="easy"),
        "",
        _good(id="b", gold_sql="SELECT x FROM t ORDER BY x", test_dbs=["alt/shop2.sqlite"]),
    ])  # fmt: skip
    tasks = load_task_file(str(f))
    assert [t.id for t in tasks] == ["a", "b"]
    a, b = tasks
    assert a.prompt == "How many?" and a.gold == "SELECT COUNT(*) FROM t"
    assert a.fixture == UserDb(path=(tmp_path / "shop.sqlite").resolve())
    assert a.meta == {"difficulty": "easy", "schema": "shop", "ordered": False}
    assert b.fixture.test_dbs == ((tmp_path / "alt" / "shop2.sqlite").resolve(),)
    assert b.meta["ordered"] is True and b.meta["difficulty"] is None


@pytest.mark.parametrize(
    ("lines", "line", "needle"),
    [
        ([_good(), {"id": "b", "question": "q", "db": "shop.sqlite"}], 2, "gold_sql"),
        ([{**_good(), "id": 7}], 1, "'id'"),
        ([_good(), _good()], 2, "duplicate id"),
        ([_good(db="missing.sqlite")], 1, "not found"),
        ([_good(db="notdb.sqlite")], 1, "not a SQLite database"),
        ([_good(test_dbs="shop.sqlite")], 1, "test_dbs"),
        ([_good(test_dbs=["missing.sqlite"])], 1, "test_dbs[0]"),
        ([_good(difficulty=3)], 1, "difficulty"),
        ([_good(question="  ")], 1, "question"),
        ([_good(), "{not json"], 2, "JSON"),
        ([_good(), "[1, 2]"], 2, "object"),
    ],
)
def test_load_task_file_errors(tmp_path: Path, lines: list[Any], line: int, needle: str) -> None:
    _make_db(tmp_path / "shop.sqlite")
    _make_db(tmp_path / "notdb.sqlite", b"this is not a database at all....")
    f = _write(tmp_path / "tasks.jsonl", lines)
    with pytest.raises(TaskFileError) as err:
        load_task_file(f)
    assert err.value.line == line
    assert needle in str(err.value)
    assert str(f) in str(err.value)


def test_load_task_file_empty_and_missing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(TaskFileError, match="no tasks") as err:
        load_task_file(empty)
    assert err.value.line is None
    with pytest.raises(TaskFileError, match="does not exist"):
        load_task_file(tmp_path / "nope.jsonl")


# ------------------------------------------------------------------------- PostgreSQL


@pytest.mark.postgres
def test_every_gold_agrees_on_postgres(postgres_url: str) -> None:
    tasks = builtin_tasks()
    schemas = {ref: ensure_postgres(ref, postgres_url) for ref in sorted({t.fixture for t in tasks})}
    engine = sa.create_engine(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    bad: list[str] = []
    try:
        with engine.connect() as conn:
            for t in tasks:
                conn.exec_driver_sql(f"SET search_path TO {schemas[t.fixture]}")
                pg = conn.exec_driver_sql(t.gold["postgresql"]).fetchall()
                if not _same(_run(t.fixture, t.gold["sqlite"]), list(pg), t.meta["ordered"]):
                    bad.append(t.id)
            conn.rollback()
    finally:
        engine.dispose()
    assert bad == []
