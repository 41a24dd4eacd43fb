"""Every command reports a GymhubError as one ``gymhub: error:`` line; --debug adds the stack."""

import subprocess
import sys

import pytest

from gymhub.cli_errors import exit_status
from gymhub.errors import (
    ConfigError,
    EngineMisconfigured,
    EnvNotFound,
    EpisodeLost,
    ServerUnreachable,
    UntrustedPackage,
)

DEAD = "http://127.0.0.1:1"  # nothing listens on port 1


def gymhub(*args, env=None):
    return subprocess.run([sys.executable, "-m", "gymhub.cli", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_train_against_a_server_that_is_not_there_is_one_line_not_a_traceback(tmp_path):
    out = gymhub("train", "--model", "never-loaded", "--env-urls", DEAD, "--env-wait-s", "0",
                 "--output-dir", str(tmp_path))
    assert out.returncode == 1, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"gymhub: error: 1 of 1 environment servers not ready: {DEAD}")
    assert "env_wait_s" in out.stderr


def test_debug_shows_the_traceback_above_the_same_line(tmp_path):
    out = gymhub("--debug", "train", "--model", "never-loaded", "--env-urls", DEAD,
                 "--env-wait-s", "0", "--output-dir", str(tmp_path))
    assert out.returncode == 1
    assert out.stderr.startswith("Traceback (most recent call last):")
    assert "gymhub.errors.ServerUnreachable" in out.stderr
    assert out.stderr.splitlines()[-1].startswith("gymhub: error: 1 of 1 environment servers")


def test_train_waits_for_a_urls_file_then_names_it(tmp_path):
    missing = tmp_path / "urls.txt"
    out = gymhub("train", "--model", "never-loaded", "--env-urls-file", str(missing),
                 "--env-wait-s", "0.2")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.splitlines() == [
        f"gymhub: waiting up to 0.2 s for environment servers to start: the server URL file "
        f"{missing} does not exist",
        f"gymhub: error: the server URL file {missing} does not exist after waiting 0.2 s "
        "(env_wait_s sets how long to wait)",
    ]


def test_train_on_an_unknown_environment_fails_before_the_model_loads(tmp_path):
    out = gymhub("train", "--model", "never-loaded", "--env-ids", "ehco-v0",
                 "--output-dir", str(tmp_path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("gymhub: error: ") and "ehco-v0" in out.stderr
    assert "echo-v0" in out.stderr  # did you mean


def test_usage_errors_keep_argparse_status_and_both_urls_keys_are_refused():
    assert gymhub("envs", "lsit").returncode == 2  # argparse's own usage error
    out = gymhub("train", "--model", "m", "--env-urls", DEAD, "--env-urls-file", "u.txt")
    assert out.returncode == 2
    assert out.stderr == ("gymhub: error: env_urls and env_urls_file are exclusive: list the "
                          "servers in one of them\n")


@pytest.mark.parametrize(("exc", "status"), [
    (ServerUnreachable("gone"), 1),
    (EpisodeLost("restarted"), 1),
    (EngineMisconfigured("no --enable-lora"), 2),  # an engine error that is the config's
    (ConfigError("bad key"), 2),
    (EnvNotFound("nope-v0"), 2),
    (UntrustedPackage("check failed"), 2),
])
def test_exit_status_says_whose_move_it_is(exc, status):
    assert exit_status(exc) == status
