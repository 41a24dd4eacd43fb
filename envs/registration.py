"""Environment ids, specs and the registry.

Registering an environment records a string entry point and costs nothing; the
module is imported when the environment is first made. Installed packages (such as
environments installed from the hub) appear through the ``gymhub.envs`` entry-point
group: each entry point's name is an environment id and its value the entry point,
e.g. ``"acme-sql-v1 = acme_env.env:AcmeEnv"``.
"""

from __future__ import annotations

import difflib
import importlib
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from gymhub.errors import ConfigError, DuplicateEnv, EnvNotFound, RegistryError

from .core import TextEnv

__all__ = [
    "ENTRY_POINT_GROUP",
    "EnvSpec",
    "Registry",
    "make",
    "parse_env_args",
    "register",
    "registry",
]

ENTRY_POINT_GROUP = "gymhub.envs"
#: What builds an environment: ``"package.module:Class"`` (imported lazily) or a callable.
EntryPoint = str | Callable[..., TextEnv]

_ID_RE = re.compile(r"^(?:[A-Za-z0-9_.-]+/)?[A-Za-z0-9_.]+(?:-[A-Za-z0-9_.]+)*-v\d+$")


@dataclass(frozen=True)
class EnvSpec:
    """How to build one environment.

    Attributes:
        id: ``[namespace/]name-vN``.
        entry_point: ``"package.module:Class"`` (imported lazily) or a callable.
        kwargs: default keyword arguments for the constructor.
        max_turns: default turn budget (passed as ``max_turns`` unless overridden).
        description: one line for listings.
        verifier: the verifier kind that scores it, for listings.
        tags: free-form labels.
    """

    id: str
    entry_point: EntryPoint
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_turns: int | None = None
    description: str = ""
    verifier: str = ""
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _ID_RE.match(self.id):
            raise ConfigError(f"invalid environment id {self.id!r}: expected [namespace/]name-vN")
        if isinstance(self.entry_point, str) and ":" not in self.entry_point:
            raise ConfigError(
                f"invalid entry point {self.entry_point!r} for {self.id}: expected 'module:attr'"
            )

    def load(self) -> Callable[..., TextEnv]:
        """Import and return the entry point.

        Raises:
            RegistryError: the module or attribute cannot be imported.
        """
        if not isinstance(self.entry_point, str):
            return self.entry_point
        module_name, _, attr = self.entry_point.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise RegistryError(
                f"cannot load entry point {self.entry_point!r} of {self.id}: {exc}"
            ) from exc
        return obj  # type: ignore[no-any-return]

    def make(self, **kwargs: Any) -> TextEnv:
        """Build the environment with the spec's defaults overridden by ``kwargs``."""
        merged = {**self.kwargs, **kwargs}
        if self.max_turns is not None:
            merged.setdefault("max_turns", self.max_turns)
        env = self.load()(**merged)
        env.env_spec = self  # type: ignore[attr-defined]
        return env


class Registry:
    """A set of environment specs with ``make``.

    Tests build their own ``Registry()``; the package-level ``registry`` is the default
    one, which also discovers installed packages on first use.

    Args:
        discover: read the ``gymhub.envs`` entry-point group when first queried.
    """

    def __init__(self, *, discover: bool = False) -> None:
        self._specs: dict[str, EnvSpec] = {}
        self._discover = discover
        self._discovered: set[str] = set()  # ids whose spec came from an entry point

    def register(
        self,
        id_or_spec: str | EnvSpec,
        entry_point: EntryPoint | None = None,
        *,
        kwargs: Mapping[str, Any] | None = None,
        max_turns: int | None = None,
        description: str = "",
        verifier: str = "",
        tags: Sequence[str] = (),
        override: bool = False,
    ) -> EnvSpec:
        """Add a spec: ``register(EnvSpec(...))`` or ``register("x-v0", "mod:Cls", ...)``.

        Args:
            id_or_spec: a whole :class:`EnvSpec`, or the id ``[namespace/]name-vN``.
            entry_point: ``"package.module:Class"`` (imported on first ``make``) or the
                class or factory itself; required with an id.
            kwargs: default constructor arguments.
            max_turns: default turn budget, passed as ``max_turns`` unless overridden.
            description: one line for listings.
            verifier: the verifier kind that scores it, for listings.
            tags: free-form labels.
            override: replace a spec already registered under the id.

        Raises:
            ConfigError: an invalid id or entry point, or spec fields besides a spec.
            DuplicateEnv: the id is taken and ``override`` is false.
        """
        if isinstance(id_or_spec, EnvSpec):
            given = (entry_point, kwargs, max_turns, description, verifier, tuple(tags))
            if given != (None, None, None, "", "", ()):
                raise ConfigError(
                    f"register(EnvSpec({id_or_spec.id!r})) takes no other spec fields"
                )
            spec = id_or_spec
        else:
            if entry_point is None:
                raise ConfigError(f"register({id_or_spec!r}) needs an entry_point")
            spec = EnvSpec(id=id_or_spec, entry_point=entry_point, kwargs=dict(kwargs or {}),
                           max_turns=max_turns, description=description, verifier=verifier,
                           tags=tuple(tags))
        known = self._specs.get(spec.id)
        if known is not None and not override and not (
            spec.id in self._discovered and _same_target(known, spec)
        ):
            raise DuplicateEnv(f"environment {spec.id!r} is already registered")
        self._discovered.discard(spec.id)
        self._specs[spec.id] = spec
        return spec

    def spec(self, env_id: str) -> EnvSpec:
        """The spec for ``env_id``.

        Raises:
            EnvNotFound: with the closest registered ids as suggestions.
        """
        self._maybe_discover()
        try:
            return self._specs[env_id]
        except KeyError:
            pass
        close = difflib.get_close_matches(env_id, list(self._specs), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        known = ", ".join(sorted(self._specs)) or "none"
        raise EnvNotFound(f"no environment {env_id!r}.{hint} Registered: {known}.")

    def make(self, env_id: str, **kwargs: Any) -> TextEnv:
        """Build a registered environment (served ones by URL: :func:`gymhub.make`)."""
        return self.spec(env_id).make(**kwargs)

    def discover(self) -> list[str]:
        """Register every environment advertised by installed packages; returns new ids."""
        added = []
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in self._specs:
                continue
            try:
                self.add_entry_point(ep.name, ep.value)
            except ConfigError:
                continue  # a broken third-party entry point must not break the registry
            added.append(ep.name)
        return added

    def add_entry_point(self, env_id: str, value: str, *, override: bool = False) -> EnvSpec:
        """Register an id that a package advertises in the ``gymhub.envs`` group.

        Installed packages come through :meth:`discover`; a package directory that is
        not installed yet (``gymhub env check DIR``) comes through here with the entry
        points of its ``pyproject.toml``. Either way the module may also ``register`` the
        same class under the same id when it is imported, and that is not a clash.

        Args:
            env_id: the entry point's name, ``[namespace/]name-vN``.
            value: the entry point's value, ``"package.module:Class"``.
            override: replace a spec already registered under the id.

        Raises:
            ConfigError: an invalid id or entry point.
            DuplicateEnv: the id is taken and ``override`` is false.
        """
        spec = self.register(EnvSpec(id=env_id, entry_point=value), override=override)
        self._discovered.add(env_id)
        return spec

    def _maybe_discover(self) -> None:
        if self._discover:
            self._discover = False
            self.discover()

    def ids(self) -> list[str]:
        """Registered ids, sorted."""
        self._maybe_discover()
        return sorted(self._specs)

    def __contains__(self, env_id: object) -> bool:
        self._maybe_discover()
        return env_id in self._specs

    def __iter__(self) -> Iterator[EnvSpec]:
        return iter([self._specs[i] for i in self.ids()])

    def __len__(self) -> int:
        return len(self.ids())


def _target(entry_point: EntryPoint) -> str:
    if isinstance(entry_point, str):
        return entry_point
    return f"{getattr(entry_point, '__module__', '')}:{getattr(entry_point, '__qualname__', '')}"


def _same_target(known: EnvSpec, new: EnvSpec) -> bool:
    """Whether ``new`` registers the very class ``known`` (discovered) names.

    A package both advertises ``guess-v0 = "my_pkg.env:Guess"`` and calls
    ``register("guess-v0", Guess)`` in ``my_pkg/env.py`` (the README shows both);
    discovery records the first, and importing the module to make the environment runs
    the second. That is one environment described twice, not a clash, so the module's
    fuller spec replaces the discovered one. Any other second registration of an id is
    still a :class:`DuplicateEnv`.
    """
    return _target(known.entry_point) == _target(new.entry_point)


registry = Registry(discover=True)


#: ``register("guess-v0", Guess)`` on the default registry (see :meth:`Registry.register`).
register = registry.register


def make(env_id: str, **kwargs: Any) -> TextEnv:
    """Build an environment from the default registry.

    Args:
        env_id: a registered id such as ``"sql-v0"``.
        **kwargs: constructor arguments overriding the spec's defaults.

    Raises:
        EnvNotFound: unknown id (the message suggests close matches).
    """
    return registry.make(env_id, **kwargs)


def parse_env_args(pairs: Sequence[str], env_ids: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Parse command-line ``[ENV_ID:]KEY=VALUE`` pairs into constructor kwargs per env.

    Values are JSON when they parse as JSON (``5``, ``true``, ``["a"]``) and strings
    otherwise, so ``difficulty=easy`` and ``show_schema=true`` both do what they say. A
    pair without ``ENV_ID:`` applies to every id in ``env_ids`` (and to the key ``""``).

    Raises:
        ConfigError: a pair is not ``KEY=VALUE`` or names an env that is not listed.
    """
    out: dict[str, dict[str, Any]] = {"": {}, **{e: {} for e in env_ids}}
    for pair in pairs:
        target, sep, raw = pair.partition("=")
        if not sep or not target:
            raise ConfigError(f"expected [ENV_ID:]KEY=VALUE, got {pair!r}")
        env_id, colon, key = target.rpartition(":")
        if colon and env_id not in out:
            raise ConfigError(f"{pair!r} names {env_id!r}, which is not served here")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        for name in [env_id] if colon else list(out):
            out[name][key] = value
    return out
