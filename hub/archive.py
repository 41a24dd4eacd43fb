"""Validate an uploaded environment wheel without extracting it.

:func:`validate_wheel` is what the hub runs on every upload before anything is stored,
and what the client can run on a download before installing it. The zip itself is read
by :mod:`gymhub.hub.zipcheck` (parser confusion, escapes, collisions, bombs); this
module checks what makes it a *hub* wheel:

* **The file name** is ``gymhub_env_<n>_<owner>_<name>-<version>-py3-none-any.whl``:
  the uploader's own owner-qualified distribution (:mod:`gymhub.hub.names`), a canonical
  PEP 440 public version, and no build tag. Only ``py3-none-any`` for now: the hub checks
  one artifact per version in one sandbox, ``(owner, name, version)`` maps to one sha256
  forever (a build tag or a second platform wheel would be a second file for the same
  version), and a pure-Python wheel is source the hub can show and review.
* **Source only**: no ``.so``/``.pyd``/``.dll``/``.pyc`` (what the tag promises), no
  ``.pth`` files (run at every interpreter start, the persistence trick of 2025-2026's
  supply-chain attacks), no ``.data/scripts``, ``headers`` or ``data`` (they install
  outside site-packages, e.g. over the venv's own ``pip``), and no entry-point group but
  ``gymhub.envs`` (``console_scripts`` would put commands on PATH).
* **Exactly one** ``<dist>-<version>.dist-info`` with ``WHEEL`` (1.x, purelib,
  ``py3-none-any``), ``METADATA`` whose Name and Version are the file name's, and a
  ``RECORD`` that lists every member exactly once with the sha256 and size the hub
  measured while streaming (PyPI refuses wheels whose RECORD lies since 2026-02).
* **One namespace per package**: a wheel installs its ``.dist-info`` directory and its
  own import package ``gymhub_env_<n>_<owner>_<name>`` (a package directory or a
  single module of that name), and nothing else. Every member's place in
  site-packages (``.data/purelib`` and ``platlib`` included) is compared with that name
  after case folding and NFC normalisation; any other top-level name is refused,
  naming the member. A denylist (``sitecustomize``, ``requests``, the standard library)
  can never be complete; an allowlist of one name is. Every ``gymhub.envs`` entry
  point is ``OWNER/NAME-vN`` of the uploader and of this package's name, and points at
  a module inside that package; dependencies are names with version ranges, never URLs
  (a URL dependency installs whatever it points at on the day).

``gymhub install`` runs :func:`validate_wheel` again on the downloaded bytes before pip
sees them: a compromised or malicious hub must not be able to serve what an honest
one refuses.
"""

from __future__ import annotations

import base64
import configparser
import csv
import dataclasses
import email.message
import email.parser
import hashlib
import io
import os
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gymhub.errors import (
    ArchiveTooLarge,
    InvalidName,
    NamespaceViolation,
    RecordMismatch,
    UnsafeMember,
    WheelFilenameError,
    WheelMetadataError,
)

from .names import normalize, parse_distribution_name, parse_env_id, validate_owner
from .records import WheelDescription
from .zipcheck import ArchiveLimits, Member, scan_zip

__all__ = ["ENTRY_POINT_GROUP", "ArchiveLimits", "WheelFile", "WheelInfo", "WheelMetadata",
           "module_name", "validate_wheel"]

ENTRY_POINT_GROUP = "gymhub.envs"
_FILENAME_RE = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>[^-]+))?"
                          r"-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl")
_N = r"(?:0|[1-9][0-9]*)"
_VERSION_RE = re.compile(rf"(?:[1-9][0-9]*!)?{_N}(?:\.{_N})*(?:(?:a|b|rc){_N})?"
                         rf"(?:\.post{_N})?(?:\.dev{_N})?")
_ENTRY_VALUE_RE = re.compile(r"(?P<module>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*)"
                             r":(?P<attr>[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*)\s*(?:\[[^\]]*\])?")
_BINARY_SUFFIXES = (".so", ".pyd", ".dll", ".dylib", ".pyc", ".pyo", ".exe")
_RECORD_UNLISTED = ("RECORD", "RECORD.jws", "RECORD.p7s")


@dataclass(frozen=True)
class WheelFile:
    """One file of the wheel as measured by the hub (sha256 hex of the real bytes)."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class WheelMetadata:
    """The parts of ``METADATA`` a hub page and an installer need."""

    metadata_version: str
    summary: str
    requires_python: str
    requires_dist: tuple[str, ...]
    license: str
    description_content_type: str
    project_urls: tuple[str, ...]


@dataclass(frozen=True)
class WheelInfo:
    """A wheel that passed every check, and what the hub stores about it.

    Attributes:
        filename: the wheel's file name.
        name: the canonical distribution name, ``gymhub-env-<n>-<owner>-<env_name>``.
        owner: the uploader's owner, which the wheel's names all belong to.
        env_name: the environment name (canonical).
        version: the canonical PEP 440 version.
        sha256: hex digest of the whole file (what installs pin).
        size: bytes of the whole file.
        env_ids: the ``gymhub.envs`` entry point names, sorted.
        entry_points: group -> {name: value}.
        metadata: a summary of ``METADATA``.
        readme: the long description, or ``None``.
        files: every regular member with its true size and sha256, in archive order.
        top_level: the top-level names it installs into site-packages: the package's
            own import name only (``gymhub_env_<n>_<owner>_<name>``, or that plus
            ``.py`` for a single-module package).
    """

    filename: str
    name: str
    owner: str
    env_name: str
    version: str
    sha256: str
    size: int
    env_ids: tuple[str, ...]
    entry_points: Mapping[str, Mapping[str, str]]
    metadata: WheelMetadata
    readme: str | None
    files: tuple[WheelFile, ...]
    top_level: tuple[str, ...]

    @property
    def content_digest(self) -> str:
        """sha256 over (path, size, sha256) of every file: equal for equal contents.

        Paths hold no NUL (refused), so NUL-separated fields cannot be re-framed.
        """
        h = hashlib.sha256()
        for f in sorted(self.files, key=lambda f: f.path):
            h.update(f"{f.path}\0{f.size}\0{f.sha256}\n".encode())
        return h.hexdigest()

    def describe(self) -> WheelDescription:
        """What the store records of this wheel (:meth:`HubStore.publish`'s input)."""
        meta = dataclasses.asdict(self.metadata)
        meta["top_level"] = list(self.top_level)
        # PEP 658's hash of METADATA, measured now, so an index listing never reopens the
        # wheel (the member's name is fixed by the checks above: one dist-info directory).
        meta["core_metadata_sha256"] = next(
            (f.sha256 for f in self.files if f.path.endswith(".dist-info/METADATA")
             and f.path.count("/") == 1), None)
        return WheelDescription(
            name=self.env_name, version=self.version, sha256=self.sha256, size=self.size,
            filename=self.filename, env_ids=self.env_ids, metadata=meta,
            description=self.metadata.summary)


def validate_wheel(data: bytes | str | os.PathLike[str], *, owner: str,
                   filename: str | None = None,
                   limits: ArchiveLimits | None = None) -> WheelInfo:
    """Check an uploaded wheel completely, reading it in memory only.

    Args:
        data: the wheel's bytes, or a path to it.
        owner: the uploader's owner (from the token, never from the wheel).
        filename: the upload's file name; defaults to the path's name. Required for bytes.
        limits: caps on size, members and ratios (defaults: :class:`ArchiveLimits`).

    Returns:
        What the hub stores about the wheel.

    Raises:
        InvalidName: ``owner`` is not a valid owner.
        InvalidArchive: one of its subclasses, naming the member at fault.
    """
    limits = limits or ArchiveLimits()
    owner = validate_owner(owner)
    if isinstance(data, bytes | bytearray | memoryview):
        blob = bytes(data)
        if filename is None:
            raise TypeError("validate_wheel(bytes) needs filename=")
    else:
        path = Path(data)
        filename = filename or path.name
        if path.stat().st_size > limits.max_archive_bytes:
            raise ArchiveTooLarge(f"archive is {path.stat().st_size} bytes, over the cap of "
                                  f"{limits.max_archive_bytes}")
        blob = path.read_bytes()
    dist, env_name, version = _parse_filename(filename, owner)
    escaped = dist.replace("-", "_")
    dist_info = f"{escaped}-{version}.dist-info"
    wanted = {f"{dist_info}/{n}" for n in ("METADATA", "RECORD", "WHEEL", "entry_points.txt")}
    contents = scan_zip(blob, limits, keep=wanted.__contains__)
    members, kept = contents.members, contents.kept

    _check_layout(members, dist_info, f"{escaped}-{version}.data")
    _check_wheel_file(_text(kept, f"{dist_info}/WHEEL"), f"{dist_info}/WHEEL")
    meta, readme = _check_metadata(_text(kept, f"{dist_info}/METADATA"), dist, version,
                                   owner, f"{dist_info}/METADATA")
    _check_record(_text(kept, f"{dist_info}/RECORD"), members, dist_info)
    top_level = _top_level(members, dist_info, escaped)
    groups = _entry_points(kept.get(f"{dist_info}/entry_points.txt"), limits,
                           f"{dist_info}/entry_points.txt")
    env_ids = _check_env_entry_points(groups.get(ENTRY_POINT_GROUP, {}), owner, env_name,
                                      members, f"{dist_info}/entry_points.txt")
    return WheelInfo(
        filename=filename, name=dist, owner=owner, env_name=env_name, version=version,
        sha256=hashlib.sha256(blob).hexdigest(), size=len(blob), env_ids=env_ids,
        entry_points=groups, metadata=meta, readme=readme,
        files=tuple(WheelFile(m.name, m.size, m.sha256.hex()) for m in members
                    if not m.is_dir),
        top_level=top_level)


def _parse_filename(filename: str, owner: str) -> tuple[str, str, str]:
    m = _FILENAME_RE.fullmatch(filename)
    if m is None:
        raise WheelFilenameError(f"{filename!r} is not NAME-VERSION-py3-none-any.whl")
    if m["build"] is not None:
        raise WheelFilenameError(f"{filename!r} has a build tag; one version is one file, "
                                 "so bump the version instead")
    tags = f"{m['py']}-{m['abi']}-{m['plat']}"
    if tags != "py3-none-any":
        raise WheelFilenameError(f"{filename!r} is tagged {tags}; the hub takes pure-Python "
                                 "py3-none-any wheels only")
    if not _VERSION_RE.fullmatch(m["version"]):
        raise WheelFilenameError(f"{filename!r}: version {m['version']!r} is not a canonical "
                                 "PEP 440 public version (no local '+' part)")
    try:
        dist_owner, env_name = parse_distribution_name(m["name"])
    except InvalidName as exc:
        raise WheelFilenameError(f"{filename!r}: {exc}") from exc
    if dist_owner != owner:
        raise NamespaceViolation(f"{filename!r} belongs to owner {dist_owner!r}, not to the "
                                 f"uploader {owner!r}")
    dist = normalize(m["name"])
    if m["name"] != dist.replace("-", "_"):
        raise WheelFilenameError(f"{filename!r}: write the name as {dist.replace('-', '_')!r}")
    return dist, env_name, m["version"]


def _text(kept: Mapping[str, bytes], member: str) -> str:
    if member not in kept:
        raise WheelMetadataError("required file is missing", member)
    try:
        return kept[member].decode("utf-8")
    except UnicodeDecodeError:
        raise WheelMetadataError("not UTF-8", member) from None


def _check_layout(members: tuple[Member, ...], dist_info: str, data_dir: str) -> None:
    infos = sorted({m.name.split("/", 1)[0] for m in members
                    if m.name.split("/", 1)[0].endswith(".dist-info")})
    if infos != [dist_info]:
        raise WheelMetadataError(f"expected exactly one metadata directory {dist_info!r}, "
                                 f"found {infos or 'none'}")
    for m in members:
        parts = m.name.rstrip("/").split("/")
        base = parts[-1]
        if parts[0].endswith(".data") and (parts[0] != data_dir or (
                len(parts) > 1 and parts[1] not in ("purelib", "platlib"))):
            raise UnsafeMember("only <dist>-<version>.data/purelib and platlib are accepted: "
                               "scripts, headers and data install outside site-packages",
                               m.name)
        if not m.is_dir and base.endswith(".pth"):
            raise UnsafeMember(".pth files run code at every interpreter start", m.name)
        if not m.is_dir and base.endswith(_BINARY_SUFFIXES):
            raise UnsafeMember("compiled code in a py3-none-any wheel (source only)", m.name)


def _check_wheel_file(text: str, member: str) -> None:
    msg = email.parser.Parser().parsestr(text)
    if not (msg.get("Wheel-Version") or "").startswith("1."):
        raise WheelMetadataError(f"Wheel-Version {msg.get('Wheel-Version')!r}, expected 1.x",
                                 member)
    if (msg.get("Root-Is-Purelib") or "").strip().lower() != "true":
        raise WheelMetadataError("Root-Is-Purelib must be true for a pure-Python wheel", member)
    if msg.get_all("Tag") != ["py3-none-any"]:
        raise WheelMetadataError(f"Tag {msg.get_all('Tag')} disagrees with the file name's "
                                 "py3-none-any", member)


def _check_metadata(text: str, dist: str, version: str, owner: str,
                    member: str) -> tuple[WheelMetadata, str | None]:
    msg = email.parser.Parser().parsestr(text)
    for key in ("Metadata-Version", "Name", "Version"):
        values = msg.get_all(key) or []
        if len(values) != 1:
            raise WheelMetadataError(f"needs exactly one {key} field, has {len(values)}",
                                     member)
    name, meta_version = str(msg["Name"]).strip(), str(msg["Version"]).strip()
    try:
        name_owner = parse_distribution_name(name)[0]
    except InvalidName:
        raise WheelMetadataError(f"Name {name!r} is not the owner-qualified name {dist!r}",
                                 member) from None
    if name_owner != owner:
        raise NamespaceViolation(f"Name {name!r} is in owner {name_owner!r}'s namespace, "
                                 f"not {owner!r}'s", member)
    if normalize(name) != dist:
        raise WheelMetadataError(f"Name {name!r} disagrees with the file name's {dist!r}",
                                 member)
    if meta_version != version:
        raise WheelMetadataError(f"Version {meta_version!r} disagrees with the file name's "
                                 f"{version!r}", member)
    requires = tuple(str(r).strip() for r in msg.get_all("Requires-Dist") or [])
    for req in requires:
        if "@" in req.split(";", 1)[0]:
            raise WheelMetadataError(f"Requires-Dist {req!r} is a direct URL reference; "
                                     "depend on names with version ranges", member)
    return _summary(msg), _readme(msg)


def _summary(msg: email.message.Message) -> WheelMetadata:
    def one(key: str) -> str:
        return str(msg.get(key) or "").strip()

    return WheelMetadata(
        metadata_version=one("Metadata-Version"), summary=one("Summary"),
        requires_python=one("Requires-Python"),
        requires_dist=tuple(str(r).strip() for r in msg.get_all("Requires-Dist") or []),
        license=one("License-Expression") or one("License"),
        description_content_type=one("Description-Content-Type"),
        project_urls=tuple(str(u).strip() for u in msg.get_all("Project-URL") or []))


def _readme(msg: email.message.Message) -> str | None:
    body = msg.get_payload()
    if isinstance(body, str) and body.strip():
        return body
    header = msg.get("Description")
    if header:  # the old header form indents continuation lines with 8 spaces or '|'
        lines = str(header).splitlines()
        return "\n".join([lines[0], *(re.sub(r"^( {8}|\t|\|)", "", ln) for ln in lines[1:])])
    return None


def _check_record(text: str, members: tuple[Member, ...], dist_info: str) -> None:
    record = f"{dist_info}/RECORD"
    files = {m.name: m for m in members if not m.is_dir}
    listed: set[str] = set()
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise RecordMismatch(f"RECORD is not valid CSV: {exc}", record) from None
    for row in rows:
        if not row:
            continue
        if len(row) != 3:
            raise RecordMismatch(f"RECORD row {row!r} does not have 3 fields", record)
        path, digest, size = row
        if path in listed:
            raise RecordMismatch("listed twice in RECORD", path)
        listed.add(path)
        if path not in files:
            raise RecordMismatch("listed in RECORD but not in the archive", path)
        if path.startswith(dist_info + "/") and path.split("/")[-1] in _RECORD_UNLISTED:
            continue
        algo, _, b64 = digest.partition("=")
        if algo != "sha256":
            raise RecordMismatch(f"RECORD hash {digest!r} is not sha256=...", path)
        actual = base64.urlsafe_b64encode(files[path].sha256).rstrip(b"=").decode()
        if b64 != actual:
            raise RecordMismatch(f"RECORD says sha256={b64}, the content is sha256={actual}",
                                 path)
        if size != str(files[path].size):
            raise RecordMismatch(f"RECORD says {size} bytes, the content is "
                                 f"{files[path].size}", path)
    for name in files:
        if name not in listed and not (name.startswith(dist_info + "/")
                                       and name.split("/")[-1] in _RECORD_UNLISTED[1:]):
            raise RecordMismatch("in the archive but not listed in RECORD", name)
    if record not in listed:
        raise RecordMismatch("RECORD does not list itself", record)


def _site_path(name: str, dist_info: str) -> str | None:
    """Where a member lands relative to site-packages, or ``None`` for metadata."""
    head, _, rest = name.partition("/")
    if head == dist_info:
        return None
    if head.endswith(".data"):
        return rest.partition("/")[2] or None
    return name


def _fold(name: str) -> str:
    """The form a case-insensitive, normalising file system or importer compares."""
    return unicodedata.normalize("NFC", name).casefold()


def module_name(dist: str) -> str:
    """The one import name a hub distribution may install (``gymhub_env_5_alice_wordle``)."""
    return normalize(dist).replace("-", "_")


def _top_level(members: tuple[Member, ...], dist_info: str, module: str) -> tuple[str, ...]:
    allowed = {_fold(module), _fold(f"{module}.py")}
    tops = set()
    for m in members:
        site = _site_path(m.name, dist_info)
        if site is None:
            continue
        top, _, below = site.rstrip("/").partition("/")
        if not top:  # the .data/<scheme>/ directory entry itself
            continue
        is_module_file = not below and not m.is_dir
        if top not in (module, f"{module}.py") or (top == module and is_module_file) \
                or (top == f"{module}.py" and not is_module_file):
            near = " (a look-alike of it)" if _fold(top) in allowed else ""
            raise NamespaceViolation(
                f"installs the top-level name {top!r}{near}; a hub package may install only "
                f"its own package {module!r} (or module {module}.py) and its .dist-info "
                "directory", m.name)
        tops.add(top)
        if len(tops) > 1:  # a package and a module of one name: two readers, two imports
            raise NamespaceViolation(f"installs both {module!r} and {module}.py; a package is "
                                     "one directory or one module", m.name)
    return tuple(sorted(tops))


def _entry_points(raw: bytes | None, limits: ArchiveLimits,
                  member: str) -> dict[str, dict[str, str]]:
    if raw is None:
        raise WheelMetadataError("required file is missing (it declares the environment)",
                                 member)
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",), strict=True,
                                       default_section="\0none")
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    try:
        parser.read_string(raw.decode("utf-8"), source=member)
    except (configparser.Error, UnicodeDecodeError) as exc:
        raise WheelMetadataError(f"not a valid entry-points file: {exc}", member) from None
    groups = {g: dict(parser.items(g)) for g in parser.sections()}
    for group in groups:
        if group not in limits.entry_point_groups:
            raise UnsafeMember(f"entry-point group {group!r} is not accepted (only "
                               f"{sorted(limits.entry_point_groups)}): it runs code outside "
                               "an environment", member)
    return groups


def _check_env_entry_points(entries: Mapping[str, str], owner: str, env_name: str,
                            members: tuple[Member, ...], member: str) -> tuple[str, ...]:
    if not entries:
        raise WheelMetadataError(f"declares no [{ENTRY_POINT_GROUP}] entry point", member)
    dist_info = member.rpartition("/")[0]
    site = {_site_path(m.name, dist_info) for m in members if not m.is_dir}
    for env_id, value in entries.items():
        try:
            parsed = parse_env_id(env_id)
        except InvalidName as exc:
            raise WheelMetadataError(f"entry point {env_id!r}: {exc}", member) from None
        if parsed.owner != owner:
            raise NamespaceViolation(f"entry point {env_id!r} is in owner {parsed.owner!r}'s "
                                     f"namespace, not {owner!r}'s", member)
        if parsed.name != env_name:
            raise NamespaceViolation(f"entry point {env_id!r} is not {owner}/{env_name}-vN, "
                                     "the id of this package", member)
        m = _ENTRY_VALUE_RE.fullmatch(value.strip())
        if m is None:
            raise WheelMetadataError(f"entry point {env_id!r} = {value!r} is not "
                                     "'module:attr'", member)
        rel = m["module"].replace(".", "/")
        candidates = (f"{rel}.py", f"{rel}/__init__.py")
        if not any(c in site for c in candidates):
            raise NamespaceViolation(f"entry point {env_id!r} imports {m['module']!r}, which "
                                     "is not in this wheel", member)
    return tuple(sorted(entries))
