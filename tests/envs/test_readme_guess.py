"""The README's "Writing an environment" example passes the gate it is sent to.

``readme_guess.py`` is the README block verbatim. It is installed here the way the
README says a package advertises it (an entry point in the ``gymhub.envs`` group) and
checked with ``gymhub env check``, as a new author would.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from gymhub.envs import Final, check_env
from gymhub.types import Score

EXAMPLE = Path(__file__).with_name("readme_guess.py")


def _example():
    if "readme_guess" not in sys.modules:
        spec = importlib.util.spec_from_file_location("readme_guess", EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        sys.modules["readme_guess"] = module
        spec.loader.exec_module(module)
    return sys.modules["readme_guess"]


def test_the_example_passes_check_env():
    report = check_env(_example().Guess())
    assert report.ok, report.summary()
    note = next(r.message for r in report.results if r.name == "verifier golden cases")
    assert "wrong answers" in note


def test_the_gate_still_catches_a_guess_that_always_wins():
    class AlwaysRight(_example().Guess):
        def guess(self, n: int) -> Final | str:
            return Final("Right!", Score(1.0))

    report = check_env(AlwaysRight(), raise_on_failure=False)
    failed = {r.name: r.message for r in report.results if not r.ok}
    assert list(failed) == ["verifier golden cases"]
    assert "does not depend on the answer" in failed["verifier golden cases"]


def test_the_gate_catches_a_guess_that_never_wins():
    class NeverRight(_example().Guess):
        def guess(self, n: int) -> Final | str:
            return Final("Wrong!", Score(0.0))

    failed = {r.name for r in check_env(NeverRight(), raise_on_failure=False).results if not r.ok}
    assert "gold policy scores 1.0" in failed


def test_one_task_and_no_verifier_cannot_show_its_scoring():
    from gymhub.envs import Task

    class OneTask(_example().Guess):
        def __init__(self) -> None:
            super(_example().Guess, self).__init__([Task(id="n3", prompt="Guess.", gold=3)],
                                                   max_turns=5)

    report = check_env(OneTask(), raise_on_failure=False)
    assert not report.ok
    assert "declare verifier_cases" in next(r.message for r in report.results if not r.ok)


@pytest.mark.slow
def test_installed_through_an_entry_point_it_passes_gymhub_env_check(tmp_path):
    package = tmp_path / "my_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "env.py").write_text(EXAMPLE.read_text())
    info = tmp_path / "my_pkg-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-pkg\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text('[gymhub.envs]\nguess-v0 = my_pkg.env:Guess\n')
    root = Path(__file__).resolve().parents[2]
    env = {"PYTHONPATH": f"{tmp_path}:{root}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "gymhub.cli", "env", "check", "guess-v0"],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "check_env guess-v0: PASS" in out.stdout
