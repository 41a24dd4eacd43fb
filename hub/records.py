"""What the hub stores, as plain values, and the rules for choosing among versions.

These are snapshots, free of the database (no SQLAlchemy here), so the HTTP layer can
serialise them and a client can resolve a version from a listing with the same rule the
hub uses (:func:`pick_version`).

Package names are checked loosely here (the archive checker applied the strict rule to
the wheel already); owners and look-alike keys come from :mod:`gymhub.hub.names`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from gymhub.errors import InvalidHubInput, VersionNotFound
from gymhub.hub.names import skeleton

__all__ = [
    "CheckInfo",
    "PackageInfo",
    "PublishResult",
    "VersionInfo",
    "WheelDescription",
    "check_package_name",
    "name_skeleton",
    "newest",
    "parse_version",
    "pick_version",
]

_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")


#: PEP 503 normalisation, kept under this name for the store's callers: it *is*
#: :func:`gymhub.hub.names.normalize`, so the hub has one rule for "the same name".


def name_skeleton(name: str) -> str:
    """The look-alike key stored with a package (:func:`gymhub.hub.names.skeleton`)."""
    return skeleton(name)


def check_package_name(name: str) -> str:
    """Placeholder package-name rule (ASCII letters, digits, inner ``-_.``, <= 100)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidHubInput(f"invalid package name {name!r}")
    return name


def parse_version(text: str) -> Version:
    """A publishable PEP 440 version; local versions (``+...``) are for private builds."""
    try:
        v = Version(text)
    except InvalidVersion:
        raise InvalidHubInput(f"{text!r} is not a PEP 440 version") from None
    if v.local is not None:
        raise InvalidHubInput(f"local versions ({text!r}) cannot be published; drop '+...'")
    return v


@dataclass(frozen=True)
class WheelDescription:
    """A wheel the archive checker has validated, as the store records it.

    Attributes:
        name: the package name within the owner's namespace (``wordle``).
        version: its PEP 440 version.
        sha256: hex digest of the file; ``size`` its length in bytes.
        filename: the wheel's file name, served as is.
        env_ids: the environment ids its entry points register (``alice/wordle-v0``).
        metadata: the core metadata fields, JSON-serialisable (shown on pages, PEP 658).
        description: one-line summary for listings and search.
    """

    name: str
    version: str
    sha256: str
    size: int
    filename: str
    env_ids: Sequence[str] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True)
class VersionInfo:
    """One published version (a snapshot: changing it changes nothing stored)."""

    owner: str
    name: str
    version: str
    sha256: str
    size: int
    filename: str
    env_ids: tuple[str, ...]
    metadata: Mapping[str, Any] = field(hash=False)
    uploaded_at: datetime
    yanked_at: datetime | None
    yank_reason: str | None

    @property
    def yanked(self) -> bool:
        """Whether resolution skips this version (exact pins still get it, PEP 592)."""
        return self.yanked_at is not None


@dataclass(frozen=True)
class PublishResult:
    """The version a publish left visible; ``created`` is false for an identical re-push."""

    version: VersionInfo
    created: bool


@dataclass(frozen=True)
class PackageInfo:
    """A package and its newest non-yanked version (``None`` when all are yanked)."""

    owner: str
    name: str
    normalized_name: str
    description: str
    created_at: datetime
    latest: str | None


@dataclass(frozen=True)
class CheckInfo:
    """A check result, bound to the sha256 it was measured on."""

    version: str
    sha256: str
    status: str
    details: Mapping[str, Any] = field(hash=False)
    checked_at: datetime


def newest(versions: Iterable[VersionInfo]) -> VersionInfo | None:
    """What an unpinned install gets: the newest non-yanked final, else pre-release."""
    live = [v for v in versions if not v.yanked]
    finals = [v for v in live if not Version(v.version).is_prerelease]
    return max(finals or live, key=lambda v: Version(v.version), default=None)


def pick_version(versions: Sequence[VersionInfo], spec: str | None, label: str) -> VersionInfo:
    """The version a request installs, by PEP 440 and PEP 592 rules.

    Args:
        versions: every version of one package, yanked ones included.
        spec: ``None`` or ``""`` for the newest; an exact version (``1.0``, ``==1.0``,
            ``===1.0``) which may be yanked; or a specifier (``>=1,<2``) whose newest
            non-yanked match wins, pre-releases only when nothing final matches.
        label: how errors name the package (``alice/wordle``).

    Raises:
        VersionNotFound: nothing matches, or everything that does is yanked.
        InvalidHubInput: ``spec`` is neither a version nor a specifier.
    """
    text = (spec or "").strip()
    try:
        pin: Version | None = Version(text.removeprefix("===").removeprefix("=="))
    except InvalidVersion:
        pin = None
    if pin is not None:
        for info in versions:
            if Version(info.version) == pin:
                return info
        raise VersionNotFound(f"{label} has no version {pin}")
    try:
        specifier = SpecifierSet(text)
    except InvalidSpecifier:
        raise InvalidHubInput(f"{spec!r} is neither a version nor a specifier") from None
    live = {info.version: info for info in versions if not info.yanked}
    matches = list(specifier.filter(live))
    if not matches:
        yanked = " (the matching versions are yanked)" if any(
            specifier.contains(i.version, prereleases=True) for i in versions) else ""
        raise VersionNotFound(f"no version of {label} matches {text or 'any'}{yanked}")
    return live[str(max(matches, key=Version))]
