"""The docs site builds strictly, and its generated pages say what the code says.

``mkdocs build --strict`` fails on a broken link, a missing anchor, a page left out of
the nav and a docstring mkdocstrings cannot read; the generated sections (training keys,
wire protocol) are checked against the objects they are made from, so neither can lose a
field. The pages' runnable blocks run in ``tests/test_readme.py``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts/mkdocs_hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                           str(tmp_path / "site")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    training = (tmp_path / "site/training/index.html").read_text()
    assert "group_size" in training and "gymhub:training-config" not in training
    serving = (tmp_path / "site/serving/index.html").read_text()
    assert "/v1/episodes/{episode_id}/step" in serving and "seq_conflict" in serving
    assert (tmp_path / "site/assets/reward_curve.png").exists()


def test_every_training_key_is_documented_once() -> None:
    from gymhub.trainer.config import GRPOConfig

    table = _hooks().training_config_markdown()
    keys = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert sorted(keys) == sorted(GRPOConfig.model_fields)


def test_the_wire_protocol_lists_every_route_and_error_code() -> None:
    from gymhub.server.app import create_app
    from gymhub.server.error_replies import STATUS

    text = _hooks().wire_protocol_markdown()
    for path, methods in create_app(["echo-v0"]).openapi()["paths"].items():
        for method in methods:
            assert f"| `{method.upper()}` | `{path}` |" in text
    for code, status in STATUS.items():
        assert f"| `{code}` | {status} |" in text


def test_an_unknown_marker_fails_the_build() -> None:
    with pytest.raises(ValueError, match="unknown docs generator"):
        _hooks().on_page_markdown("<!-- gymhub:no-such-table -->\n", None, None, None)


def test_every_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert {p for p in pages if p not in nav} == set()
