"""``gymhub env init``: names, the files it writes, and the scaffold passing the gate in-process."""

import fnmatch
import os
import sys
import tomllib
import uuid
from pathlib import Path

import pytest

import gymhub
from gymhub.envs import check_env, gold_policy, registry, run_episode
from gymhub.envs.registration import Registry
from gymhub.errors import ConfigError, InvalidName
from gymhub.hub.project import load_package, read_package
from gymhub.hub.scaffold import (
    TOKEN_ENV,
    check_name,
    distribution_name,
    env_id,
    init_env,
    module_name,
    owner_from_token,
    resolve_owner,
)

REPO = Path(__file__).resolve().parents[2]


def unique(prefix="t"):
    """A fresh env name per test: modules imported from one tmp dir stay in sys.modules."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@pytest.fixture
def isolated(monkeypatch):
    """sys.path and the default registry as they were, after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(registry, "_specs", dict(registry._specs))
    monkeypatch.setattr(registry, "_discovered", set(registry._discovered))


@pytest.mark.parametrize("good", ["wordle", "a", "word-ladder", "sql2", "a1-b2-c3"])
def test_good_names_pass(good):
    assert check_name(good) == good
    assert check_name(good, "owner") == good


@pytest.mark.parametrize("bad", ["", "..", ".git", "a.b", "alice/wordle", "..\\x", "w\u00f6rdle",
                                 "wordle\u200b", "-wordle", "word le", "x" * 65, "wordle-v1"])
def test_bad_names_are_refused_by_the_hubs_rules(bad):
    with pytest.raises(InvalidName, match="invalid env name"):
        check_name(bad)


def test_a_name_must_be_written_canonically():
    with pytest.raises(InvalidName, match="write it as 'my-env'"):
        check_name("My_Env")


def test_names_are_owner_qualified():
    assert distribution_name("alice", "word-ladder") == "gymhub-env-5-alice-word-ladder"
    assert module_name("alice", "word-ladder") == "gymhub_env_5_alice_word_ladder"
    assert env_id("alice", "word-ladder") == "alice/word-ladder-v0"
    assert distribution_name("alice", "wordle") != distribution_name("bob", "wordle")


def test_owner_comes_from_the_flag_or_fails_clearly():
    assert resolve_owner("alice", environ={}) == "alice"
    with pytest.raises(ConfigError, match="pass --owner"):
        resolve_owner(None, environ={})
    with pytest.raises(ConfigError, match="cannot tell the owner of a token without its hub"):
        resolve_owner(None, environ={TOKEN_ENV: "some-token"})
    with pytest.raises(ConfigError, match="GYMHUB_HUB_URL"):
        owner_from_token("some-token")
    with pytest.raises(InvalidName, match="invalid owner"):
        resolve_owner("Alice", environ={})
    # The flag wins over a token, so an unreadable token never blocks an explicit owner.
    assert resolve_owner("bob", environ={TOKEN_ENV: "some-token"}) == "bob"


def test_init_writes_a_complete_package(tmp_path):
    path = init_env("word-ladder", owner="alice", parent=tmp_path)
    assert path == tmp_path / "word-ladder"
    module = "gymhub_env_5_alice_word_ladder"
    files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
    assert files == sorted([
        ".gitignore", "README.md", "pyproject.toml",
        f"{module}/__init__.py", f"{module}/env.py", f"{module}/tasks.jsonl",
    ])
    for f in path.rglob("*"):
        if f.is_file():
            assert "{{" not in f.read_text(), f
    project = tomllib.loads((path / "pyproject.toml").read_text())["project"]
    assert project["name"] == "gymhub-env-5-alice-word-ladder"
    assert project["version"] == "0.1.0"
    assert project["license"] == "Apache-2.0"
    assert project["description"]
    assert project["requires-python"]
    assert [d.split(">")[0] for d in project["dependencies"]] == ["gymhub"]
    assert project["entry-points"]["gymhub.envs"] == {
        "alice/word-ladder-v0": f"{module}.env:Env"
    }
    assert "alice/word-ladder-v0" in (path / "README.md").read_text()
    assert len((path / module / "tasks.jsonl").read_text().splitlines()) >= 20
    assert oct(path.stat().st_mode & 0o777) == "0o755"


def test_init_refuses_existing_paths_and_leaves_nothing_behind(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep me")
    (tmp_path / "afile").write_text("x")
    for name in ("taken", "afile"):
        with pytest.raises(ConfigError, match="already exists"):
            init_env(name, owner="alice", parent=tmp_path)
    assert (tmp_path / "taken" / "mine.txt").read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["afile", "taken"]  # no staging directory left
    with pytest.raises(ConfigError, match="no such directory"):
        init_env("wordle", owner="alice", parent=tmp_path / "absent")
    with pytest.raises(InvalidName, match="invalid env name"):
        init_env("../evil", owner="alice", parent=tmp_path)
    with pytest.raises(InvalidName, match="invalid owner"):
        init_env("wordle", owner=".git", parent=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["afile", "taken"]


def test_the_scaffold_passes_check_env_and_make_plays_gold_to_one(tmp_path, isolated):
    name = unique()
    path = init_env(name, owner="alice", parent=tmp_path)
    ids = load_package(read_package(path))
    assert ids == [f"alice/{name}-v0"]
    env = gymhub.make(f"alice/{name}-v0")
    assert len(env.tasks) >= 20
    out = run_episode(env, gold_policy, task_id=env.tasks[0].id)
    assert out.terminated and out.score is not None and out.score.value == 1.0
    assert out.score.verifier.startswith(f"{name}@")
    report = check_env(gymhub.make(f"alice/{name}-v0"), gold_tasks=None, raise_on_failure=False)
    assert report.ok, report.summary()
    assert {r.name for r in report.results} >= {"gold policy scores 1.0", "verifier golden cases"}


def test_the_scaffold_tools_answer_mistakes_with_messages(tmp_path, isolated):
    from gymhub.types import Message, ToolCall

    name = unique()
    load_package(read_package(init_env(name, owner="alice", parent=tmp_path)))
    env = gymhub.make(f"alice/{name}-v0")
    env.reset(options={"task_id": env.tasks[0].id})
    answer = env.task.gold

    def call(tool, **arguments):
        msg = Message(role="assistant", content="", tool_calls=(ToolCall("c", tool, arguments),))
        return env.step(msg)

    obs, _, done, _, _ = call("hint", position=1)
    assert repr(answer[0]) in obs[0].content and not done
    obs, _, done, _, _ = call("hint", position=99)
    assert obs[0].content.startswith("Error: position must be between 1") and not done
    obs, reward, done, _, info = call("submit", word="nope")
    assert done and reward == 0.0 and info["score"].value == 0.0


def test_a_package_directory_registers_in_a_given_registry(tmp_path, isolated):
    name = unique()
    reg = Registry()
    ids = load_package(read_package(init_env(name, owner="bob", parent=tmp_path)), reg)
    assert ids == reg.ids() == [f"bob/{name}-v0"]
    assert f"bob/{name}-v0" not in registry


def test_a_module_already_imported_from_elsewhere_is_refused(tmp_path, isolated):
    name = unique()
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    first = init_env(name, owner="alice", parent=tmp_path / "one")
    second = init_env(name, owner="alice", parent=tmp_path / "two")
    load_package(read_package(first))
    gymhub.make(f"alice/{name}-v0")  # imports the module from the first directory
    with pytest.raises(ConfigError, match="already imported from"):
        load_package(read_package(second))


def test_package_data_lists_every_template():
    """The scaffold must work from an installed gymhub, where only package data ships."""
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"]["gymhub.hub"]
    templates = REPO / "hub"
    files = [str(p.relative_to(templates)) for p in (templates / "templates").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts]
    assert files
    for f in files:
        assert any(fnmatch.fnmatch(f, g) and f.count("/") == g.count("/") for g in globs), f
