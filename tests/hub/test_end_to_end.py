"""The hub's whole promise, as a user meets it: init, check, push, install, play, train.

Everything runs offline on loopback: the hub is a ``gymhub hub serve`` subprocess (its
background worker checks every upload in the sandbox), and the install goes into a *fresh*
virtual environment, so nothing from the test's own interpreter can make it pass. The
fresh venv sees gymhub and its dependencies through a ``.pth`` that adds this venv's
site-packages (no network to install them from); the hub package itself must land in the
fresh venv's own site-packages, by digest, and be found there through its entry point.
"""

import json
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import pytest

from .conftest import CHECK_SANDBOX_PROBLEM
from .test_push import REPO, _env, alice, gymhub, hub  # noqa: F401  (fixtures)

pytestmark = pytest.mark.timeout(600)


def fresh_venv(root: Path) -> Path:
    """A new venv with pip, whose imports fall back to this interpreter's site-packages."""
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    python = root / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True)
    parent = sysconfig.get_paths()["purelib"]
    # An `import` line runs at start-up, and addsitedir also processes the parent's .pth
    # files (gymhub's editable install is one); appended, so the fresh venv's own
    # site-packages is searched first.
    Path(site.stdout.strip(), "zz_parent.pth").write_text(
        f"import site; site.addsitedir({parent!r})\n")
    return python


def _wait_for_check(hub_url: str, ref: str, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    status = "pending"
    while time.monotonic() < deadline:
        out = gymhub("info", ref, "--json", "--hub", hub_url)
        assert out.returncode == 0, out.stderr
        versions = json.loads(out.stdout)["versions"]
        status = str((versions[0].get("check") or {}).get("status", "pending"))
        if status not in ("pending", "queued"):  # queued: waiting in the hub's check queue
            return status
        time.sleep(1)
    return status


def test_init_check_push_install_into_a_fresh_venv_play_and_train(hub, alice, tmp_path):  # noqa: F811
    work = tmp_path / "work"
    work.mkdir()
    run = {"cwd": work, "capture_output": True, "text": True, "timeout": 300}
    assert gymhub("env", "init", "word-ladder", "--owner", "alice", "--dir",
                  str(work)).returncode == 0
    check = gymhub("env", "check", str(work / "word-ladder"))
    assert check.returncode == 0, check.stdout + check.stderr
    push = gymhub("push", str(work / "word-ladder"), GYMHUB_HUB_URL=hub.url,
                  GYMHUB_HUB_TOKEN=alice)
    assert push.returncode == 0, push.stdout + push.stderr
    sha = push.stdout.split()[-1]

    status = _wait_for_check(hub.url, "alice/word-ladder")
    assert status == ("passed" if CHECK_SANDBOX_PROBLEM is None else "unchecked"), status

    python = fresh_venv(tmp_path / "venv")
    env = _env(GYMHUB_HUB_URL=hub.url)
    env.pop("PYTHONPATH")  # only the fresh venv's own paths (and the .pth) count
    trust = [] if status == "passed" else ["--trust"]
    inst = subprocess.run([str(python), "-m", "gymhub.cli", "install", "alice/word-ladder",
                           *trust], env=env, **run)
    assert inst.returncode == 0, inst.stdout + inst.stderr
    assert f"sha256 {sha}" in inst.stderr

    lock = json.loads((work / "gymhub.lock").read_text())
    [entry] = lock["packages"].values()
    assert entry["sha256"] == sha and entry["env_ids"] == ["alice/word-ladder-v0"]

    play = subprocess.run([str(python), "-c", (
        "import gymhub, importlib.metadata as md\n"
        "from gymhub.envs import run_episode\n"
        "dist = md.distribution('gymhub-env-5-alice-word-ladder')\n"
        "print(dist.locate_file(''))\n"
        "env = gymhub.make('alice/word-ladder-v0')\n"
        "print(run_episode(env, seed=0).score.value)\n")], env=env, **run)
    assert play.returncode == 0, play.stdout + play.stderr
    where, value = play.stdout.split()
    assert Path(where).resolve().is_relative_to((tmp_path / "venv").resolve())
    assert value == "1.0"

    model = work / "tiny-model"
    tiny = subprocess.run([str(python), "-m", "gymhub.trainer.tiny", str(model)], env=env, **run)
    assert tiny.returncode == 0, tiny.stderr
    train = subprocess.run(
        [str(python), "-m", "gymhub.cli", "train", "--model", str(model), "--env-ids",
         "alice/word-ladder-v0", "--max-steps", "1", "--group-size", "2",
         "--tasks-per-step", "1", "--checkpoint-interval", "1", "--output-dir", "out"],
        env=env, **run)
    assert train.returncode == 0, train.stdout + train.stderr
    [state] = (work / "out" / "checkpoints").glob("step-*/state.json")
    recorded = json.loads(state.read_text())["hub_envs"]["alice/word-ladder-v0"]
    assert recorded["source"] == "lock" and recorded["sha256"] == sha
    assert recorded["check"] == status


def test_fresh_venv_does_not_see_the_test_interpreter_hub_packages(tmp_path):
    python = fresh_venv(tmp_path / "venv")
    out = subprocess.run([str(python), "-c", "import sys, gymhub; print(sys.prefix)"],
                         capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in _env().items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).resolve() == (tmp_path / "venv").resolve()
    assert sys.prefix != out.stdout.strip()
