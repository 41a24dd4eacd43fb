"""The gymhub command line, run as a user would (subprocesses)."""

import json
import subprocess
import sys


def gymhub(*args, input=None):
    return subprocess.run([sys.executable, "-m", "gymhub.cli", *args], capture_output=True,
                          text=True, input=input, timeout=300)


def test_help_lists_commands():
    out = gymhub("--help")
    assert out.returncode == 0
    for cmd in ("envs", "env", "eval", "play", "serve", "sandbox"):
        assert cmd in out.stdout


def test_envs_list_json():
    out = gymhub("envs", "list", "--json")
    ids = {e["id"] for e in json.loads(out.stdout)}
    assert {"echo-v0", "sql-v0"} <= ids


def test_eval_gold_json_on_echo():
    out = gymhub("eval", "echo-v0", "--policy", "gold", "--json")
    result = json.loads(out.stdout)
    assert result["mean_score"] == 1.0 and result["errors"] == 0 and result["episodes"] == 100
    assert result["episodes_per_s"] > 0


def test_eval_gold_on_sql_subset():
    out = gymhub("eval", "sql-v0", "--policy", "gold", "--tasks", "30", "--json")
    result = json.loads(out.stdout)
    assert result["mean_score"] == 1.0 and result["errors"] == 0 and result["episodes"] == 30


def test_env_check_exit_codes():
    assert gymhub("env", "check", "echo-v0").returncode == 0
    bad = gymhub("env", "check", "nope-v0")
    assert bad.returncode == 2 and "no environment 'nope-v0'" in bad.stderr


def test_env_arg_reaches_the_constructor():
    out = gymhub("eval", "echo-v0", "--env-arg", "n_tasks=7", "--json")
    assert json.loads(out.stdout)["episodes"] == 7


def test_play_reads_tool_calls_from_stdin():
    out = gymhub("play", "sql-v0", "--seed", "0", input="list_tables\nrun_sql SELECT 1 AS one\nsubmit SELECT 1\n")
    assert out.returncode == 0, out.stderr
    assert "Tables:" in out.stdout and "one" in out.stdout and "episode over (terminated)" in out.stdout


def test_sandbox_exec_is_delegated():
    import shutil

    if not shutil.which("bwrap"):
        import pytest
        pytest.skip("bubblewrap is not installed")
    out = gymhub("sandbox", "exec", "--json", "--", "python3", "-c", "print(6 * 7)")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["stdout"] == "42\n" and result["exit_code"] == 0 and result["backend"] == "bwrap"


def test_train_help_is_delegated():
    out = gymhub("train", "--help")
    assert out.returncode == 0 and "--config" in out.stdout


def test_eval_gold_exits_nonzero_when_a_task_fails():
    code = (
        "import sys\n"
        "from gymhub.envs import register\n"
        "from gymhub.envs.echo import EchoEnv\n"
        "from gymhub.types import Message, ToolCall\n"
        "class Broken(EchoEnv):\n"
        "    def gold_action(self):\n"
        "        return Message(role='assistant', content='', tool_calls=(ToolCall('g', 'submit', {'answer': 'no'}),))\n"
        "register('broken-v0', Broken)\n"
        "from gymhub.cli import main\n"
        "sys.exit(main(['eval', 'broken-v0', '--json']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    result = json.loads(out.stdout)
    assert result["mean_score"] == 0.0 and result["failures"]


def test_a_reader_that_stops_early_is_not_a_crash():
    """`gymhub ... | head`: the pipe's reader is gone before the command writes."""
    import os

    for args in (["train", "--help"], ["envs", "list"], ["--help"]):
        read, write = os.pipe()
        os.close(read)  # a reader that already quit: every write is a broken pipe
        try:
            out = subprocess.run([sys.executable, "-m", "gymhub.cli", *args], stdout=write,
                                 stderr=subprocess.PIPE, text=True, timeout=300)
        finally:
            os.close(write)
        assert out.stderr == "", (args, out.stderr)
        assert out.returncode in (0, 141), (args, out.returncode)


def test_train_help_into_head():
    out = subprocess.run(f"{sys.executable} -m gymhub.cli train --help | head -3", shell=True,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout.startswith("usage: gymhub train") and len(out.stdout.splitlines()) == 3


def test_env_check_on_a_file_that_registers_nothing_is_a_usage_error(tmp_path):
    (tmp_path / "nothing.py").write_text("x = 1\n")
    for name, message in [("nothing.py", "registers no environment"), ("absent.py", "no such file")]:
        out = subprocess.run([sys.executable, "-m", "gymhub.cli", "env", "check", name],
                             cwd=tmp_path, capture_output=True, text=True)
        assert out.returncode == 2 and message in out.stderr


def test_hub_user_commands_are_listed_and_building_the_parser_stays_light():
    out = gymhub("--help")
    for cmd in ("push", "install", "yank", "search", "info"):
        assert cmd in out.stdout
    code = ("import sys\nfrom gymhub.cli import _build_parser\n_build_parser()\n"
            "print(','.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True, timeout=120).stdout.strip().split(","))
    for heavy in ("httpx", "packaging", "cryptography", "gymhub.envs", "gymhub.hub.client",
                  "gymhub.hub.install", "sqlalchemy"):
        assert heavy not in loaded, heavy


def test_install_passes_accept_new_key_apart_from_trust(monkeypatch, tmp_path):
    import gymhub.hub.install as hub_install
    from gymhub.cli import main

    calls = []
    monkeypatch.setattr(hub_install, "install", lambda ref, hub, **kw: calls.append((ref, hub, kw)))
    monkeypatch.setattr(hub_install, "install_locked", lambda **kw: calls.append(kw))
    lock = str(tmp_path / "gymhub.lock")
    assert main(["install", "alice/word-ladder@0.1.0", "--hub", "http://h", "--accept-new-key",
                 "--lock", lock]) == 0
    assert main(["install", "--trust", "--lock", lock]) == 0
    assert calls == [
        (("alice", "word-ladder", "0.1.0"), "http://h",
         {"trust": False, "accept_new_key": True, "target": None, "lock_path": lock}),
        {"target": None, "lock_path": lock, "trust": True, "accept_new_key": False},
    ]
    help_text = gymhub("install", "--help").stdout
    assert "--accept-new-key" in help_text and "--trust" in help_text


def test_install_without_a_hub_is_a_usage_error():
    import os

    out = subprocess.run([sys.executable, "-m", "gymhub.cli", "install", "alice/x"],
                         capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "GYMHUB_HUB_URL"})
    assert out.returncode == 2 and "--hub URL or set GYMHUB_HUB_URL" in out.stderr
