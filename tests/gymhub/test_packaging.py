"""Every subpackage on disk is listed in pyproject.toml, so a built wheel is complete."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    on_disk = set()
    for name, folder in cfg["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if "__pycache__" in rel.parts:
                continue
            on_disk.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages"


def package_folder(name: str, package_dir: dict[str, str]) -> Path:
    owner = max((p for p in package_dir if name == p or name.startswith(p + ".")), key=len)
    rest = name[len(owner):].strip(".")
    return ROOT / package_dir[owner] / Path(*rest.split(".")) if rest else ROOT / package_dir[owner]


def test_package_data_globs_match_files():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for pkg, globs in cfg["package-data"].items():
        folder = package_folder(pkg, cfg["package-dir"])
        for pattern in globs:
            assert list(folder.glob(pattern)), f"{pkg}: {pattern} matches nothing in {folder}"
