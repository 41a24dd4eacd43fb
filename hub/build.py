"""``gymhub env build``: a standard wheel of an environment package, built offline.

The wheel is built through PEP 517 with the build backend the package's
``[build-system]`` names (setuptools for a scaffolded package), so it is exactly the
wheel ``pip wheel`` or ``python -m build`` would make, whatever backend an author moves
to. Three choices make it safe to run anywhere, including on the hub:

* **Offline.** The backend is the one already installed beside gymhub (PEP 517's "no
  build isolation"): nothing is downloaded. A backend that is not installed is a clear
  error naming it, never a silent fetch.
* **Clean.** The directory is copied (without ``dist/``, ``build/``, ``*.egg-info``,
  caches and hidden entries) into a temporary directory and built there, so the author's
  directory only ever gains ``dist/NAME.whl``, and a stale ``build/lib`` from an old
  build (setuptools reuses it) cannot put deleted modules into the new wheel.
* **Reproducible.** ``SOURCE_DATE_EPOCH`` is fixed (unless the caller set one), so the
  same sources give the same bytes: pushing an unchanged package again is then the same
  sha256, which the hub treats as a no-op rather than as a conflicting version.

The backend runs in a child process: it executes the package's own build code, and a
crash or a hang there must not take the caller with it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from gymhub.errors import ConfigError

from .project import EnvPackage, read_package

__all__ = ["DEFAULT_BACKEND", "build_wheel"]

#: PEP 517's backend for a pyproject.toml without ``[build-system]``.
DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"

#: 1980-01-01, the earliest time a zip file can record; the fixed default build time.
_EPOCH_DEFAULT = "315532800"

#: Lines of the build log shown when a build fails.
LOG_TAIL_LINES = 40

_IGNORED_DIRS = {"dist", "build", "__pycache__", "venv", "node_modules"}

# Runs in the child: PEP 517's build_wheel hook of the named backend. The source
# directory is not on sys.path unless the package lists it in backend-path (PEP 517).
_HOOK = """\
import importlib, sys
if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]
backend_spec, out_dir, *backend_path = sys.argv[1:]
sys.path[:0] = backend_path
module, _, attrs = backend_spec.partition(":")
backend = importlib.import_module(module)
for attr in filter(None, attrs.split(".")):
    backend = getattr(backend, attr)
backend.build_wheel(out_dir)
"""


def build_wheel(
    path: str | Path, *, out_dir: str | Path | None = None, timeout: float = 600
) -> Path:
    """Build a standard wheel of the package in ``path``, offline.

    Does not run ``check_env``: ``gymhub env build`` runs the check first, and a caller
    that builds without it has decided to.

    Args:
        path: the package directory (with ``pyproject.toml``).
        out_dir: where to put the wheel (default ``path/dist``; created if missing).
        timeout: seconds the build may take.

    Returns:
        The wheel's path. A wheel of the same name already there is replaced.

    Raises:
        ConfigError: the directory is not a valid package (see
            :func:`~gymhub.hub.project.read_package`), its build backend is not
            installed, or the build failed or timed out (with the tail of its log).
    """
    package = read_package(path)
    backend, backend_path = _backend(package)
    dest = Path(out_dir) if out_dir is not None else package.root / "dist"
    with tempfile.TemporaryDirectory(prefix="gymhub-build-") as tmp:
        source, wheels = Path(tmp) / "src", Path(tmp) / "wheels"
        shutil.copytree(package.root, source, ignore=_ignore(package.root))
        wheels.mkdir()
        env = {**os.environ, "PIP_NO_INDEX": "1"}  # a backend that calls pip stays offline
        env.setdefault("SOURCE_DATE_EPOCH", _EPOCH_DEFAULT)
        cmd = [sys.executable, "-c", _HOOK, backend, str(wheels),
               *(str(source / p) for p in backend_path)]
        try:
            proc = subprocess.run(cmd, cwd=source, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, errors="replace",
                                  timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            log = _text(exc.stdout) + _text(exc.stderr)
            raise ConfigError(f"building {package.root} took over {timeout:g} s; the "
                              f"build log ends with:\n{_tail(log)}") from exc
        log = proc.stdout + proc.stderr
        built = [w for w in wheels.iterdir() if w.suffix == ".whl"]
        if proc.returncode != 0 or len(built) != 1:
            why = (f"the build backend exited with status {proc.returncode}"
                   if proc.returncode else f"the backend made {len(built)} wheels, not one")
            raise ConfigError(f"building {package.root} failed: {why}; the build log ends "
                              f"with:\n{_tail(log)}")
        dest.mkdir(parents=True, exist_ok=True)
        wheel = dest / built[0].name
        shutil.copyfile(built[0], wheel.with_name(wheel.name + ".part"))
        os.replace(wheel.with_name(wheel.name + ".part"), wheel)  # never a half-written wheel
    return wheel


def _backend(package: EnvPackage) -> tuple[str, list[str]]:
    """The backend to call and its in-tree path; a backend that is not installed is refused."""
    file = package.root / "pyproject.toml"
    system = package.pyproject.get("build-system", {})
    if not isinstance(system, dict):
        raise ConfigError(f"{file}: [build-system] must be a table")
    backend = system.get("build-backend", DEFAULT_BACKEND)
    backend_path = system.get("backend-path", [])
    if not isinstance(backend, str) or not backend.strip():
        raise ConfigError(f"{file}: [build-system] build-backend must be a module name")
    if not isinstance(backend_path, list) or not all(isinstance(p, str) for p in backend_path):
        raise ConfigError(f"{file}: [build-system] backend-path must be a list of strings")
    module = backend.partition(":")[0]
    if not backend_path and importlib.util.find_spec(module.split(".")[0]) is None:
        requires = system.get("requires", [])
        wanted = " ".join(str(r) for r in requires) or module.split(".")[0]
        raise ConfigError(
            f"{file} builds with {module!r}, which is not installed beside gymhub; the build "
            f"is offline and downloads nothing, so install it first: pip install {wanted}"
        )
    return backend, backend_path


def _ignore(root: Path) -> Callable[[str, list[str]], set[str]]:
    """What the build copy leaves out: outputs of earlier builds, caches, hidden entries."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        top = Path(directory) == root
        return {
            n for n in names
            if n.startswith(".") or n.endswith((".egg-info", ".pyc"))
            or n == "__pycache__" or (top and n in _IGNORED_DIRS)
        }

    return ignore


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def _tail(log: str, lines: int = LOG_TAIL_LINES) -> str:
    kept = log.strip().splitlines()[-lines:]
    return "\n".join(f"  | {line}" for line in kept) or "  | (no output)"
