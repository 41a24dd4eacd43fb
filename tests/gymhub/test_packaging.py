"""The top-level folders are gymhub's subpackages, found without a hand-kept list."""

import subprocess
import sys
from pathlib import Path

import pytest
import setuptools

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("envs", "verifiers", "sandbox", "server", "client", "trainer", "hub", "launch")


@pytest.mark.parametrize("folder", FOLDERS)
def test_import_root_links_each_top_level_folder(folder):
    link = ROOT / "gymhub" / folder
    assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve()


def test_setuptools_finds_every_package_folder():
    found = set(setuptools.find_packages(str(ROOT), include=["gymhub", "gymhub.*"]))
    on_disk = {"gymhub"}
    for folder in FOLDERS:
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT)
            on_disk.add(".".join(["gymhub", *rel.parts]))
    assert on_disk <= found


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_second_copy_from_the_repository_root_is_refused(folder):
    out = subprocess.run([sys.executable, "-c", f"import {folder}"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert f"import gymhub.{folder}, not {folder}" in out.stderr
