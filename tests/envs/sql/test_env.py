"""sql-v0 end to end: tools, isolation, bad input, scoring, gold policy, check_env."""

import json
import sqlite3

import pytest

from gymhub.envs import check_env, make, run_episode
from gymhub.envs.sql.env import SqlEnv
from gymhub.envs.sql.fixtures import sqlite_image
from gymhub.errors import ConfigError, EnvNotFound, TaskFileError
from gymhub.types import Message, ToolCall


def call(env, name, **args):
    msg = Message(role="assistant", content="", tool_calls=(ToolCall("c1", name, args),))
    obs, reward, term, trunc, info = env.step(msg)
    return obs[0].content, term, info


@pytest.fixture
def env():
    e = make("sql-v0")
    e.reset(seed=0)
    yield e
    e.close()


def checksum(image: bytes) -> str:
    import hashlib
    return hashlib.sha256(image).hexdigest()


def test_reset_shows_question_tools_and_verifier(env):
    obs, info = env.reset(seed=3)
    assert [m.role for m in obs] == ["system", "user"]
    assert obs[1].content == env.task.prompt
    assert {t["function"]["name"] for t in info["tools"]} == {"list_tables", "describe_table", "run_sql", "submit"}
    assert info["verifier"].startswith("sql_match@") and info["dialect"] == "sqlite"


def test_explore_then_submit_gold(env):
    text, term, _ = call(env, "list_tables")
    assert text.startswith("Tables: ") and not term
    first = text.removeprefix("Tables: ").split(", ")[0]
    text, _, _ = call(env, "describe_table", table=first)
    assert f"Table {first}" in text and "Sample rows" in text
    text, _, _ = call(env, "run_sql", query=env.gold_query(env.task))
    assert "row" in text
    text, term, info = call(env, "submit", query=env.gold_query(env.task))
    assert term and info["score"].value == 1.0 and "correct" in text


@pytest.mark.parametrize("query,needle", [
    ("DROP TABLE {t}", "refused"),
    ("DELETE FROM {t}", "refused"),
    ("UPDATE {t} SET rowid = rowid + 1", "refused"),
    ("INSERT INTO {t} DEFAULT VALUES", "refused"),
    ("CREATE TABLE evil(x)", "refused"),
    ("ATTACH DATABASE '/tmp/evil.db' AS evil", "refused"),
    ("PRAGMA writable_schema = ON", "refused"),
    ("SELECT load_extension('/tmp/evil.so')", ""),
    ("SELECT * FROM {t}; DROP TABLE {t}", ""),
    ("SELEC * FROM {t}", "syntax"),
    ("SELECT nope FROM {t}", "nope"),
    ("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r", "stopped"),
])
def test_hostile_or_broken_sql_is_answered_and_changes_nothing(env, query, needle):
    table = env.db.tables()[0]
    before = env.db.query(f"SELECT count(*) FROM {table}").rows
    text, term, info = call(env, "run_sql", query=query.format(t=table))
    assert text.startswith("Error:") and not term
    assert needle.lower() in text.lower()
    assert env.db.query(f"SELECT count(*) FROM {table}").rows == before
    # the episode goes on: the gold query still works and scores 1.0
    _, term, info = call(env, "submit", query=env.gold_query(env.task))
    assert term and info["score"].value == 1.0


def test_million_row_result_is_capped_with_a_count(env):
    t = env.db.tables()[0]
    text, _, _ = call(env, "run_sql", query=f"SELECT a.rowid FROM {t} a, {t} b, {t} c")
    assert "showing 20 of" in text and len(text) <= env.max_chars + 200


def test_oversized_and_non_utf8_queries(env):
    text, *_ = call(env, "run_sql", query="SELECT 1 -- " + "x" * 30_000)
    assert "limit" in text
    text, term, _ = call(env, "run_sql", query="SELECT '\udcff'")
    assert text.startswith("Error:") and not term


def test_bad_tool_calls_are_answered(env):
    for name, args, needle in [
        ("run_sq", {"query": "SELECT 1"}, "Did you mean 'run_sql'"),
        ("run_sql", {"query": 5}, "must be string"),
        ("run_sql", {}, "missing required argument 'query'"),
        ("describe_table", {"table": "no_such_table"}, "no_such_table"),
    ]:
        text, term, _ = call(env, name, **args)
        assert text.startswith("Error:") and needle in text and not term


def test_episodes_are_isolated_and_fixture_image_unchanged():
    image = sqlite_image(make("sql-v0").tasks[0].fixture)
    before = checksum(image)
    a, b = make("sql-v0"), make("sql-v0")
    a.reset(options={"task_id": a.tasks[0].id})
    b.reset(options={"task_id": a.tasks[0].id})
    assert a.db is not b.db
    t = a.db.tables()[0]
    call(a, "run_sql", query=f"DELETE FROM {t}")
    assert b.db.query(f"SELECT count(*) FROM {t}").rows[0][0] > 0
    assert checksum(sqlite_image(a.tasks[0].fixture)) == before


def test_wrong_answer_scores_zero_and_malformed_has_reason(env):
    _, term, info = call(env, "submit", query="SELECT 'gymhub: no such value'")
    s = info["score"]
    assert term and s.ok and s.value == 0.0
    env.reset(seed=1)
    _, term, info = call(env, "submit", query="DROP TABLE x")
    assert info["score"].ok and info["score"].value == 0.0 and info["score"].details["reason"]


def test_truncation_at_max_turns():
    env = make("sql-v0", max_turns=2)
    env.reset(seed=0)
    call(env, "list_tables")
    obs, reward, term, trunc, info = env.step(
        Message(role="assistant", content="", tool_calls=(ToolCall("c", "list_tables", {}),)))
    assert trunc and not term and info["score"].value == 0.0


def test_difficulty_and_schema_filters():
    easy = make("sql-v0", difficulty="easy")
    assert easy.tasks and all(t.meta["difficulty"] == "easy" for t in easy.tasks)
    hr = make("sql-v0", schemas=["hr"])
    assert hr.tasks and all(t.meta["schema"] == "hr" for t in hr.tasks)
    with pytest.raises(ConfigError, match="unknown schema"):
        make("sql-v0", schemas="nope")


def test_show_schema_puts_tables_in_the_prompt():
    env = make("sql-v0", show_schema=True)
    obs, _ = env.reset(seed=0)
    assert "The database:" in obs[0].content


def test_user_task_file(tmp_path):
    db = tmp_path / "shop.sqlite"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT, price REAL);"
                      "INSERT INTO item VALUES (1,'pen',1.5),(2,'book',12.0),(3,'bag',30.25);")
    con.commit()
    con.close()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "q1", "question": "Items over 10?", "db": "shop.sqlite",
                                 "gold_sql": "SELECT name FROM item WHERE price > 10"}) + "\n")
    env = make("sql-v0", tasks=str(tasks))
    out = run_episode(env, task_id="q1")
    assert out.score.value == 1.0
    env.reset(options={"task_id": "q1"})
    _, _, info = call(env, "submit", query="SELECT name FROM item WHERE price >= 12")
    assert info["score"].value == 1.0
    env.reset(options={"task_id": "q1"})
    call(env, "run_sql", query="DELETE FROM item")
    assert sqlite3.connect(db).execute("SELECT count(*) FROM item").fetchone()[0] == 3


def test_bad_task_files(tmp_path):
    missing = tmp_path / "t.jsonl"
    missing.write_text(json.dumps({"id": "q1", "question": "x", "db": "nope.sqlite", "gold_sql": "SELECT 1"}))
    with pytest.raises(TaskFileError, match="1"):
        make("sql-v0", tasks=str(missing))
    with pytest.raises(TaskFileError):
        make("sql-v0", tasks=str(tmp_path / "absent.jsonl"))


def test_unknown_env_id():
    with pytest.raises(EnvNotFound, match="sql-v0"):
        make("sql-v9")


def test_check_env_passes():
    report = check_env(make("sql-v0"), gold_tasks=40)
    assert report.ok, report.summary()


def test_gold_policy_scores_one_on_every_builtin_task():
    env = SqlEnv()
    bad = []
    for task in env.tasks:
        out = run_episode(env, task_id=task.id)
        if out.score is None or not out.score.ok or out.score.value != 1.0:
            bad.append((task.id, out.score))
    assert not bad, bad[:3]
    assert len(env.tasks) >= 500


@pytest.mark.postgres
def test_postgres_path_runs_the_same_tasks(postgres_url):
    env = SqlEnv(postgres_url=postgres_url, schemas="retail")
    obs, info = env.reset(seed=0)
    assert info["dialect"] == "postgresql" and "PostgreSQL" in obs[0].content
    t = env.db.tables()[0]
    text, term, _ = call(env, "run_sql", query=f"DROP TABLE {t}")
    assert text.startswith("Error:") and not term
    for task in env.tasks[:30]:
        out = run_episode(env, task_id=task.id)
        assert out.score.ok and out.score.value == 1.0, (task.id, out.score)
    env.reset(seed=0)
    _, _, info = call(env, "submit", query="SELECT 'gymhub: no such value'")
    assert info["score"].ok and info["score"].value == 0.0
