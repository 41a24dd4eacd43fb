"""Layering: light imports stay light (DESIGN.md §1)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(','.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.strip().split(","))


@pytest.mark.parametrize("statement", ["import gymhub", "import gymhub.envs",
                                       "import gymhub.verifiers", "import gymhub.envs.sql.env"])
def test_core_imports_leave_heavy_packages_out(statement):
    loaded = _loaded_after(statement)
    for heavy in ("torch", "vllm", "transformers", "fastapi", "uvicorn", "docker"):
        assert heavy not in loaded, f"{statement} imported {heavy}"


def test_lower_layers_do_not_import_upper_layers():
    loaded = _loaded_after("import gymhub.verifiers, gymhub.types, gymhub.errors")
    for upper in ("gymhub.envs", "gymhub.server", "gymhub.trainer", "gymhub.hub", "gymhub.cli"):
        assert upper not in loaded


def test_client_leaves_the_server_and_the_environments_out():
    loaded = _loaded_after("import gymhub.client")
    for kept_out in ("fastapi", "uvicorn", "starlette", "torch", "gymhub.envs", "gymhub.server"):
        assert kept_out not in loaded, f"import gymhub.client imported {kept_out}"


def _imports_of(folder: str) -> dict[str, set[str]]:
    """Every module each file under ``folder`` imports, wherever the import statement is."""
    out: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        names = out.setdefault(str(path.relative_to(ROOT)), set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
    return out


def test_no_client_module_imports_the_server_or_the_environments_even_lazily():
    for path, names in _imports_of("client").items():
        for name in names:
            assert not name.startswith(("gymhub.envs", "gymhub.server", "fastapi", "starlette")), (
                f"{path} imports {name}")


def test_cli_help_is_fast_and_light():
    loaded = _loaded_after("import gymhub.cli")
    assert "gymhub.envs" not in loaded and "sqlalchemy" not in loaded
