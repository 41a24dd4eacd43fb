"""An environment package directory: what its ``pyproject.toml`` declares, and loading it.

``gymhub env check DIR`` and ``gymhub env build DIR`` work on the author's directory
before anything is installed, so the environment ids come from the same place an
installed wheel advertises them: the ``gymhub.envs`` entry points, read here from
``pyproject.toml`` instead of from installed metadata. Checking the directory and
checking the installed wheel then make the same environments from the same entry points.
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from gymhub.envs.registration import ENTRY_POINT_GROUP, EnvSpec, Registry
from gymhub.errors import ConfigError

__all__ = ["EnvPackage", "load_package", "read_package"]

_EXAMPLE = '[project.entry-points."gymhub.envs"] "OWNER/NAME-v0" = "module.env:Env"'


@dataclass(frozen=True)
class EnvPackage:
    """An environment package directory, as its ``pyproject.toml`` describes it.

    Attributes:
        root: the directory holding ``pyproject.toml``.
        name: ``[project] name``, the distribution name.
        version: ``[project] version``, or ``None`` when the build backend computes it
            (``dynamic = ["version"]``).
        entry_points: environment id → ``"module:attr"``, from the ``gymhub.envs`` group.
        pyproject: the whole parsed file (the build reads ``[build-system]`` from it).
    """

    root: Path
    name: str
    version: str | None
    entry_points: Mapping[str, str]
    pyproject: Mapping[str, Any] = field(repr=False)


def read_package(path: str | Path) -> EnvPackage:
    """Read and validate an environment package directory's ``pyproject.toml``.

    Args:
        path: the package directory.

    Raises:
        ConfigError: not a directory, no ``pyproject.toml``, not TOML, no ``[project]``
            name or version, or no valid ``gymhub.envs`` entry point. The message names
            the file and the field.
    """
    root = Path(path)
    if not root.exists():
        raise ConfigError(f"{root}: no such directory")
    if not root.is_dir():
        raise ConfigError(f"{root} is not a directory (an environment package is a directory "
                          "with a pyproject.toml; `gymhub env init` makes one)")
    file = root / "pyproject.toml"
    if not file.is_file():
        raise ConfigError(f"{root} has no pyproject.toml, so it is not an environment package "
                          "(`gymhub env init NAME` makes one)")
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}") from exc
    project = data.get("project")
    if not isinstance(project, dict):
        raise ConfigError(f"{file} has no [project] table (name, version, entry points)")
    name = project.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{file}: [project] name is missing")
    version = project.get("version")
    dynamic = project.get("dynamic", [])
    if version is None and not (isinstance(dynamic, list) and "version" in dynamic):
        raise ConfigError(f"{file}: [project] version is missing (or list it in dynamic)")
    if version is not None and not isinstance(version, str):
        raise ConfigError(f"{file}: [project] version must be a string, got {version!r}")
    groups = project.get("entry-points", {})
    group = groups.get(ENTRY_POINT_GROUP) if isinstance(groups, dict) else None
    if not isinstance(group, dict) or not group:
        raise ConfigError(f"{file} declares no {ENTRY_POINT_GROUP} entry point, so gymhub "
                          f"cannot find its environment; add {_EXAMPLE}")
    for env_id, target in group.items():
        if not isinstance(target, str):
            raise ConfigError(f"{file}: entry point {env_id!r} must be a string "
                              f"'module:attr', got {target!r}")
        try:
            EnvSpec(id=env_id, entry_point=target)
        except ConfigError as exc:
            raise ConfigError(f"{file}: {exc}") from exc
    return EnvPackage(root, name, version, dict(group), data)


def load_package(package: EnvPackage, registry: Registry | None = None) -> list[str]:
    """Make a package directory's environments available to ``make`` without installing it.

    The directory (or its ``src/``) goes on ``sys.path`` and each entry point is
    registered as installed entry points are, replacing any spec of the same id: the
    author asked for *this directory's* code. A module of the same name that this
    process already imported from elsewhere (an installed copy) would be checked instead
    of the directory, silently, so that is refused.

    Args:
        package: from :func:`read_package`.
        registry: where to register (default: gymhub's default registry).

    Returns:
        The environment ids, sorted.

    Raises:
        ConfigError: an entry point's module is not in the directory, or is already
            imported from somewhere else.
    """
    if registry is None:
        from gymhub.envs import registry as default

        registry = default
    roots: list[Path] = []
    for env_id, target in package.entry_points.items():
        top = target.partition(":")[0].split(".")[0]
        source = _source_root(package.root, top)
        if source is None:
            raise ConfigError(f"entry point {env_id!r} = {target!r}: no module {top!r} in "
                              f"{package.root} (looked for {top}/ and {top}.py there and in src/)")
        loaded = sys.modules.get(top)
        if loaded is not None and not _loaded_from(loaded, source):
            raise ConfigError(f"module {top!r} is already imported from {_origin(loaded)}, not "
                              f"from {source}; check the directory in a fresh process")
        if source not in roots:
            roots.append(source)
    for source in reversed(roots):
        if str(source) not in sys.path:
            sys.path.insert(0, str(source))
    for env_id, target in package.entry_points.items():
        registry.add_entry_point(env_id, target, override=True)
    return sorted(package.entry_points)


def _source_root(root: Path, top: str) -> Path | None:
    for base in (root, root / "src"):
        if (base / top).is_dir() or (base / f"{top}.py").is_file():
            return base.resolve()
    return None


def _origin(module: ModuleType) -> str:
    file = getattr(module, "__file__", None)
    if file:
        return str(file)
    paths = list(getattr(module, "__path__", []))
    return str(paths[0]) if paths else "an unknown place"


def _loaded_from(module: ModuleType, source: Path) -> bool:
    origin = Path(_origin(module))
    try:
        return origin.resolve().is_relative_to(source)
    except OSError:
        return False
