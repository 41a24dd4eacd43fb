"""``gymhub env init``: a new environment package that passes the gate out of the box.

The scaffold is a working environment, not a skeleton of TODOs: a new author's first
``gymhub env check`` and ``gymhub env build`` should pass, so that every later failure
is about a change they made. The files come from ``templates/env/`` (package data), with
``{{PLACEHOLDER}}`` markers filled in; a plain marker rather than ``str.format`` or
``string.Template`` because the templates are Python, TOML and Markdown, where braces and
dollar signs are ordinary text.

Naming: an environment ``NAME`` of owner ``OWNER`` has the id ``OWNER/NAME-v0``
(Gymnasium's namespace form), the distribution ``gymhub-env-<len(OWNER)>-OWNER-NAME``
(see :func:`gymhub.hub.names.distribution_name` for why the length) and the import package
of the same name with underscores. Both names carry the owner, so ``alice/wordle`` and
``bob/wordle`` install side by side, and the ``gymhub-env-`` prefix keeps them apart from
every bare name on PyPI.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from importlib import metadata, resources
from pathlib import Path

from gymhub.errors import ConfigError, InvalidName

from . import names
from .settings import HUB_URL_ENV, TOKEN_ENV

__all__ = [
    "TOKEN_ENV",
    "check_name",
    "distribution_name",
    "env_id",
    "init_env",
    "module_name",
    "owner_from_token",
    "resolve_owner",
]

#: (template resource under templates/env, path in the new package; MODULE is replaced).
_FILES = (
    ("pyproject.toml.tmpl", "pyproject.toml"),
    ("README.md.tmpl", "README.md"),
    ("gitignore.tmpl", ".gitignore"),
    ("module/__init__.py.tmpl", "MODULE/__init__.py"),
    ("module/env.py.tmpl", "MODULE/env.py"),
    ("module/tasks.jsonl", "MODULE/tasks.jsonl"),
)


def check_name(value: str, what: str = "name") -> str:
    """Validate an owner or environment name by the hub's rules (:mod:`gymhub.hub.names`).

    The scaffold also insists on the canonical spelling of an environment name (``my-env``,
    not ``My_Env``): the name becomes a directory and part of a module, and two spellings
    of one hub name must never become two packages on disk.

    Args:
        value: the name as typed.
        what: ``"owner"`` or ``"name"``.

    Returns:
        ``value`` unchanged.

    Raises:
        InvalidName: the name breaks a rule; the message says which.
    """
    if what == "owner":
        return names.validate_owner(value)
    canonical = names.validate_env_name(value)
    if canonical != value:
        raise InvalidName("env_name", value, f"write it as {canonical!r}, its canonical "
                                              "spelling (it names a directory and a module)")
    return value


def distribution_name(owner: str, name: str) -> str:
    """The owner-qualified distribution name, e.g. ``gymhub-env-5-alice-wordle``."""
    return names.distribution_name(owner, name)


def module_name(owner: str, name: str) -> str:
    """The import package, e.g. ``gymhub_env_5_alice_wordle`` (unique as the distribution is)."""
    return distribution_name(owner, name).replace("-", "_")


def env_id(owner: str, name: str, major: int = 0) -> str:
    """The environment id, e.g. ``alice/wordle-v0``."""
    return f"{owner}/{name}-v{major}"


def owner_from_token(token: str, hub_url: str | None = None) -> str:
    """The owner a hub token belongs to, as the hub that issued it says (``/whoami``).

    Only the hub can tell: the token's visible part is an id, not a name, so without a
    hub URL this refuses rather than guess.

    Raises:
        ConfigError: no hub URL to ask.
        TokenError: the hub does not accept the token.
    """
    if not hub_url:
        raise ConfigError(f"cannot tell the owner of a token without its hub: set "
                          f"{HUB_URL_ENV} or pass --owner")
    from gymhub.hub.client import HubClient

    with HubClient(hub_url, token, timeout=10) as client:
        return str(client.whoami()["owner"])


def resolve_owner(owner: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The owner to scaffold for: ``--owner`` if given, else the hub token's owner.

    Raises:
        ConfigError: no owner and no token, an unreadable token, or an invalid owner.
    """
    env = os.environ if environ is None else environ
    if owner is None:
        token = env.get(TOKEN_ENV)
        if not token:
            raise ConfigError(
                f"no owner: pass --owner OWNER (or set {TOKEN_ENV} to a hub token and "
                f"{HUB_URL_ENV} to its hub, whose owner is then used)"
            )
        owner = owner_from_token(token, env.get(HUB_URL_ENV))
    return check_name(owner, "owner")


def init_env(name: str, *, owner: str, parent: str | Path = ".") -> Path:
    """Create the package directory ``parent/name`` for ``owner/name-v0``.

    The files are written into a temporary sibling and renamed into place in one step,
    so a failure (or a concurrent ``init`` of the same name) never leaves a half-made
    package behind, and an existing path is never overwritten.

    Args:
        name: the environment name (``wordle``), validated by :func:`check_name`.
        owner: the owner (namespace), validated by :func:`check_name`.
        parent: the directory to create the package in.

    Returns:
        The new package directory.

    Raises:
        ConfigError: an invalid name or owner, a missing parent, or an existing target.
    """
    check_name(name, "name")
    check_name(owner, "owner")
    base = Path(parent)
    if not base.is_dir():
        raise ConfigError(f"{base}: no such directory")
    target = base / name
    if os.path.lexists(target):
        raise ConfigError(f"{target} already exists; gymhub env init never overwrites")
    values = {
        "OWNER": owner,
        "NAME": name,
        "ENV_ID": env_id(owner, name),
        "DIST": distribution_name(owner, name),
        "MODULE": module_name(owner, name),
        "GYMHUB_REQUIREMENT": _gymhub_requirement(),
    }
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=base))
    try:
        templates = resources.files(__package__ or "gymhub.hub").joinpath("templates", "env")
        for source, dest in _FILES:
            text = templates.joinpath(*source.split("/")).read_text(encoding="utf-8")
            out = staging / dest.replace("MODULE", values["MODULE"])
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(_render(text, values, source), encoding="utf-8")
        staging.chmod(0o755)  # mkdtemp makes it 0700; a package directory is not secret
        try:
            os.rename(staging, target)  # atomic; refuses a non-empty target that appeared
        except OSError as exc:
            raise ConfigError(f"{target} already exists; gymhub env init never overwrites") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _render(text: str, values: Mapping[str, str], source: str) -> str:
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    leftover = re.search(r"\{\{[A-Z_]+\}\}", text)
    if leftover:  # a template bug, caught here rather than in the author's first build
        raise RuntimeError(f"template {source}: unknown placeholder {leftover.group(0)}")
    return text


def _gymhub_requirement() -> str:
    """``gymhub>=X.Y`` for the gymhub that made the package: the API it was written against."""
    try:
        version = metadata.version("gymhub")
    except metadata.PackageNotFoundError:
        return "gymhub"
    major_minor = re.match(r"\d+\.\d+", version)
    return f"gymhub>={major_minor.group(0)}" if major_minor else "gymhub"
