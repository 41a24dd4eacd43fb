"""``gymhub env check DIR`` and ``gymhub env build DIR``, run as an author would, offline.

The wheel is read back as an installer would read it (METADATA, entry points, RECORD),
and one test installs it with pip (``--no-index``: nothing is downloaded) into a
throwaway target directory to show that the entry point alone makes the environment
appear.
"""

import base64
import csv
import hashlib
import io
import os
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from gymhub.errors import ConfigError
from gymhub.hub.build import build_wheel
from gymhub.hub.project import read_package
from gymhub.hub.scaffold import init_env

REPO = Path(__file__).resolve().parents[2]


def gymhub(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "gymhub.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One scaffold, checked and built through the CLI; (package dir, wheel, CLI output)."""
    root = tmp_path_factory.mktemp("built")
    init = gymhub("env", "init", "word-ladder", "--owner", "alice", "--dir", str(root))
    assert init.returncode == 0, init.stderr
    path = root / "word-ladder"
    check = gymhub("env", "check", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "check_env alice/word-ladder-v0: PASS" in check.stdout
    out = gymhub("env", "build", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    return path, Path(out.stdout.strip().splitlines()[-1]), out


def test_build_prints_the_wheel_in_dist_as_its_last_line(built):
    path, wheel, out = built
    assert wheel == path / "dist" / "gymhub_env_5_alice_word_ladder-0.1.0-py3-none-any.whl"
    assert wheel.is_file()
    assert "check_env alice/word-ladder-v0: PASS" in out.stdout  # the check ran first
    # The build happened in a copy: the author's directory gained dist/ and nothing else.
    assert sorted(p.name for p in path.iterdir()) == [
        ".gitignore", "README.md", "dist", "gymhub_env_5_alice_word_ladder", "pyproject.toml"]


def test_the_wheel_metadata_and_entry_points(built):
    _, wheel, _ = built
    info = "gymhub_env_5_alice_word_ladder-0.1.0.dist-info"
    with zipfile.ZipFile(wheel) as zf:
        meta = Parser().parsestr(zf.read(f"{info}/METADATA").decode())
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
        names = zf.namelist()
    assert meta["Name"] == "gymhub-env-5-alice-word-ladder"
    assert meta["Version"] == "0.1.0"
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Requires-Python"] == ">=3.11"
    assert [r.split(">")[0] for r in meta.get_all("Requires-Dist")] == ["gymhub"]
    assert "alice/word-ladder-v0" in meta.get_payload()  # the README is the description
    assert "[gymhub.envs]\nalice/word-ladder-v0 = gymhub_env_5_alice_word_ladder.env:Env" in (
        entry_points)
    assert "gymhub_env_5_alice_word_ladder/tasks.jsonl" in names  # package data shipped


def test_record_lists_every_file_with_its_hash(built):
    _, wheel, _ = built
    with zipfile.ZipFile(wheel) as zf:
        record_name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(zf.read(record_name).decode())))
        members = {n: zf.read(n) for n in zf.namelist()}
    listed = {row[0]: row[1] for row in rows}
    assert set(listed) == set(members)
    assert listed[record_name] == ""
    for name, data in members.items():
        if name == record_name:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert listed[name] == f"sha256={digest}", name


def test_building_again_gives_the_same_bytes(built):
    path, wheel, _ = built
    before = hashlib.sha256(wheel.read_bytes()).hexdigest()
    again = build_wheel(path)
    assert again == wheel
    assert hashlib.sha256(again.read_bytes()).hexdigest() == before


def test_the_installed_wheel_is_found_by_its_entry_point(built, tmp_path):
    """pip installs the wheel offline; a fresh process finds alice/word-ladder-v0 by entry point."""
    _, wheel, _ = built
    target = tmp_path / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
         "--disable-pip-version-check", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr
    env = {**os.environ, "PIP_NO_INDEX": "1",
           "PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}
    script = (
        "import gymhub\n"
        "from gymhub.cli import main\n"
        "from gymhub.envs import gold_policy, run_episode\n"
        "assert main(['env', 'check', 'alice/word-ladder-v0']) == 0\n"
        "env = gymhub.make('alice/word-ladder-v0')\n"
        "print('module', type(env).__module__, __import__(type(env).__module__).__file__)\n"
        "print('score', run_episode(env, gold_policy, seed=3).score.value)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "check_env alice/word-ladder-v0: PASS" in out.stdout
    assert f"module gymhub_env_5_alice_word_ladder.env {target}" in out.stdout
    assert "score 1.0" in out.stdout


def test_check_and_build_accept_a_dot_path(tmp_path):
    init_env("dotted", owner="carol", parent=tmp_path)
    out = gymhub("env", "check", ".", "--json", cwd=tmp_path / "dotted")
    assert out.returncode == 0, out.stderr
    assert '"env": "carol/dotted-v0", "ok": true' in out.stdout


def test_a_failing_environment_is_not_built_unless_told(tmp_path):
    path = init_env("broken", owner="alice", parent=tmp_path)
    env_py = path / "gymhub_env_5_alice_broken" / "env.py"
    env_py.write_text(env_py.read_text().replace(
        'arguments={"word": self.task.gold}', 'arguments={"word": "wrong"}'))
    out = gymhub("env", "build", str(path))
    assert out.returncode == 1
    assert "gold policy scores 1.0" in out.stdout and "FAIL" in out.stdout
    assert "nothing was built" in out.stderr and "--no-check" in out.stderr
    assert not (path / "dist").exists()
    forced = gymhub("env", "build", str(path), "--no-check")
    assert forced.returncode == 0, forced.stderr
    assert Path(forced.stdout.strip().splitlines()[-1]).is_file()


def _package(tmp_path, pyproject):
    path = tmp_path / "pkg"
    path.mkdir()
    if pyproject is not None:
        (path / "pyproject.toml").write_text(pyproject)
    return path


GOOD_PROJECT = '[project]\nname = "x"\nversion = "1.0"\n'
EP = '[project.entry-points."gymhub.envs"]\n"alice/x-v0" = "x_mod:Env"\n'


@pytest.mark.parametrize(
    ("pyproject", "says"),
    [
        (None, "has no pyproject.toml"),
        ("[project\nname = 1", "is not valid TOML"),
        ('[tool.x]\na = 1\n', "has no [project] table"),
        ('[project]\nversion = "1.0"\n' + EP, "[project] name is missing"),
        ('[project]\nname = "x"\n' + EP, "[project] version is missing"),
        (GOOD_PROJECT, "declares no gymhub.envs entry point"),
        (GOOD_PROJECT + '[project.entry-points."gymhub.envs"]\n', "no gymhub.envs entry point"),
        (GOOD_PROJECT + '[project.entry-points."gymhub.envs"]\n"Bad Id" = "m:E"\n',
         "invalid environment id"),
        (GOOD_PROJECT + '[project.entry-points."gymhub.envs"]\n"a/x-v0" = "no_colon"\n',
         "invalid entry point"),
    ],
)
def test_bad_packages_are_config_errors_for_check_and_build(tmp_path, pyproject, says):
    path = _package(tmp_path, pyproject)
    with pytest.raises(ConfigError) as err:
        read_package(path)
    assert says in str(err.value)
    with pytest.raises(ConfigError, match=re.escape(says)):  # the build reads it the same way
        build_wheel(path)


def test_a_dynamic_version_is_allowed(tmp_path):
    path = _package(tmp_path, '[project]\nname = "x"\ndynamic = ["version"]\n' + EP)
    assert read_package(path).version is None


def test_the_cli_reports_bad_paths_as_usage_errors(tmp_path):
    (tmp_path / "plain-file").write_text("x")
    (tmp_path / "nodir").mkdir()
    for args, says in [
        (("env", "build", str(tmp_path / "plain-file")), "is not a directory"),
        (("env", "build", str(tmp_path / "absent")), "no such directory"),
        (("env", "build", str(tmp_path / "nodir")), "has no pyproject.toml"),
        (("env", "check", str(tmp_path / "nodir")), "has no pyproject.toml"),
        (("env", "check", "./absent"), "no such directory"),
        (("env", "init", "Bad_Name", "--owner", "alice"), "write it as 'bad-name'"),
        (("env", "init", "wordle"), "pass --owner"),
    ]:
        env = {k: v for k, v in os.environ.items() if k != "GYMHUB_HUB_TOKEN"}
        out = gymhub(*args, cwd=tmp_path, env=env)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert says in out.stderr, (args, out.stderr)
    assert sorted(os.listdir(tmp_path)) == ["nodir", "plain-file"]


def test_init_refuses_an_existing_directory_from_the_cli(tmp_path):
    assert gymhub("env", "init", "wordle", "--owner", "alice", cwd=tmp_path).returncode == 0
    again = gymhub("env", "init", "wordle", "--owner", "alice", cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_init_with_a_token_but_no_hub_and_no_owner_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GYMHUB_HUB_URL"}
    env["GYMHUB_HUB_TOKEN"] = "ghub_something"
    out = gymhub("env", "init", "wordle", cwd=tmp_path, env=env)
    assert out.returncode == 2 and "cannot tell the owner of a token without its hub" in \
        out.stderr
    assert not (tmp_path / "wordle").exists()


def test_a_missing_build_backend_is_named_not_downloaded(tmp_path):
    path = init_env("nobackend", owner="alice", parent=tmp_path)
    pyproject = path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        'requires = ["setuptools>=77"]\nbuild-backend = "setuptools.build_meta"',
        'requires = ["gymhub-no-such-backend>=1"]\nbuild-backend = "gymhub_no_such_backend"'))
    with pytest.raises(ConfigError, match=r"not installed.*pip install gymhub-no-such-backend"):
        build_wheel(path)


def test_a_failed_build_shows_the_tail_of_its_log(tmp_path):
    path = init_env("nobuild", owner="alice", parent=tmp_path)
    pyproject = path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        'packages = ["gymhub_env_5_alice_nobuild"]', 'packages = ["no_such_package_here"]'))
    with pytest.raises(ConfigError) as err:
        build_wheel(path)
    message = str(err.value)
    assert "failed: the build backend exited with status" in message
    assert "  | " in message and "no_such_package_here" in message
    assert not (path / "dist").exists()


def test_the_hub_accepts_what_env_build_makes_and_only_for_its_owner(built):
    from gymhub.errors import NamespaceViolation
    from gymhub.hub.archive import validate_wheel

    _, wheel, _ = built
    info = validate_wheel(wheel, owner="alice")
    assert list(info.env_ids) == ["alice/word-ladder-v0"]
    with pytest.raises(NamespaceViolation):
        validate_wheel(wheel, owner="bob")


def test_a_built_scaffold_publishes_and_resolves(built, tmp_path):
    from gymhub.hub.archive import validate_wheel
    from gymhub.hub.store import HubStore
    from gymhub.hub.tokens import create_token

    _, wheel, _ = built
    data = wheel.read_bytes()
    info = validate_wheel(data, owner="alice", filename=wheel.name)
    store = HubStore.open(f"sqlite:///{tmp_path / 'hub.db'}", tmp_path / "blobs")
    create_token(store.db, "alice")  # the owner exists once it has a token
    result = store.publish("alice", info.describe(), data)
    assert result.created
    resolved = store.resolve("alice", "word-ladder")
    assert resolved.sha256 == info.sha256 and resolved.version == "0.1.0"
    assert store.read_file(resolved) == data
    assert not store.publish("alice", info.describe(), data).created  # same bytes: a no-op
