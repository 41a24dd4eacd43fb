"""Owner names, environment names, environment ids and distribution names on the hub.

Names are the hub's first security boundary: the anchors' worst failures were name
failures (PyPI look-alikes, Prime's owner-less package names, OpenEnv dropping the owner
so ``bob/coding-env`` was "already installed" by ``alice/coding-env``). The rules:

* **Owner** (a namespace): 1 to 39 characters of lowercase ASCII letters, digits and
  single hyphens, starting and ending with a letter or digit (GitHub's rule, so people
  can keep their handle). Owners are accepted only in this canonical form: one owner has
  one spelling, in URLs, ids and tokens alike. Hub routes and roles are reserved.
* **Environment name**: 1 to 64 ASCII letters and digits, words joined by single ``-``
  or ``_``; stored and compared in its PEP 503 normal form (lowercase, ``-``), so
  ``My_Env`` and ``my-env`` are one name. Dots are refused outright (no ``..``, no
  ``.git``, no ``a.b`` that a file system or URL router reads differently), and so is a
  name ending in ``-vN``, which would make ``alice/foo-v2-v0`` read as ``foo`` version 2.
* **Environment id**: ``OWNER/NAME-vN`` (Gymnasium's namespace form), canonical only.
* **Distribution name**: ``gymhub-env-<len(owner)>-<owner>-<name>``, e.g.
  ``gymhub-env-5-alice-wordle``. Installers compare names after PEP 503 normalisation,
  which folds every run of ``-``, ``_`` and ``.`` into one ``-``; a separator such as
  ``--`` would therefore vanish, and ``a-b/c`` and ``a/b-c`` would install as the same
  distribution. The owner's length is made of digits, which survive normalisation, so
  the name parses back to exactly one (owner, name). The ``gymhub-env-`` prefix keeps
  every hub distribution apart from ordinary PyPI names (a bare ``wordle`` already
  exists there); hub installs go by URL and sha256 anyway, so PyPI cannot shadow one.
* **Skeleton**: Warehouse's ``ultranormalize`` (drop ``-_.``, fold case, ``l``/``i`` to
  ``1``, ``o`` to ``0``) plus ``rn`` to ``m`` and ``vv`` to ``w``. Two different names
  with one skeleton are look-alikes; the storage layer refuses the second
  (:func:`check_not_lookalike`).
* **One typo apart**: two environment names whose normal forms are one edit apart
  (an insertion, deletion, substitution or swap of adjacent characters: optimal string
  alignment distance 1, :func:`osa_distance`) are look-alikes too, whoever owns them,
  once both have at least :data:`TYPO_MIN_LENGTH` characters (below that, one edit
  separates most short names from each other). Only a *different* name can clash: an
  owner re-publishing their name, or another owner using the very same name (ids are
  owner-qualified), is not a look-alike. :func:`check_new_package_name` applies both
  rules across every owner's packages inside the transaction that creates a package.

Look-ups never resolve to a near name: :func:`did_you_mean` only *suggests*.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from gymhub.errors import InvalidName, LookalikeName, ReservedName
from gymhub.hub.db import Owner, Package

__all__ = [
    "DIST_PREFIX",
    "ENV_NAME_MAX",
    "OWNER_MAX",
    "RESERVED_OWNERS",
    "TYPO_MIN_LENGTH",
    "EnvId",
    "check_new_package_name",
    "check_not_lookalike",
    "did_you_mean",
    "distribution_name",
    "find_lookalike",
    "is_lookalike",
    "lookalike_keys",
    "normalize",
    "not_found_message",
    "osa_distance",
    "parse_distribution_name",
    "parse_env_id",
    "skeleton",
    "validate_env_name",
    "validate_owner",
]

OWNER_MAX = 39
ENV_NAME_MAX = 64
DIST_PREFIX = "gymhub-env-"
#: Names shorter than this are compared by skeleton only, never for one-typo distance.
TYPO_MIN_LENGTH = 4

#: Owners the hub keeps for its own routes, roles and brand (compared by skeleton too).
RESERVED_OWNERS: frozenset[str] = frozenset({
    "about", "account", "admin", "administrator", "anonymous", "api", "assets", "auth",
    "blobs", "docs", "env", "envs", "files", "gymhub", "health", "healthz", "help", "hub",
    "index", "install", "login", "logout", "me", "metrics", "new", "none", "null",
    "official", "owner", "owners", "packages", "pypi", "python", "root", "search",
    "security", "self", "settings", "signup", "simple", "staff", "static", "support",
    "system", "token", "tokens", "upload", "user", "users", "well-known", "www", "yank",
})

_OWNER_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_ENV_INPUT_RE = re.compile(r"[A-Za-z0-9]+(?:[-_][A-Za-z0-9]+)*")
_VERSION_SUFFIX_RE = re.compile(r"-v\d+$")
_ENV_ID_RE = re.compile(r"(?P<owner>[^/]+)/(?P<name>[^/]+)-v(?P<version>0|[1-9][0-9]{0,8})")
_PEP503_RE = re.compile(r"[-_.]+")
_SKELETON_DROP = re.compile(r"[-_.]")
_SKELETON_MAP = str.maketrans({"l": "1", "i": "1", "o": "0"})


def normalize(name: str) -> str:
    """PEP 503 normal form: lowercase, every run of ``-``, ``_``, ``.`` as one ``-``."""
    return _PEP503_RE.sub("-", name).lower()


def skeleton(name: str) -> str:
    """The look-alike key of a name: equal skeletons are refused as distinct names.

    Folding ``rn``/``m`` and ``vv``/``w`` before ``l``/``i``/``1`` and ``o``/``0`` matters:
    it is the order in which a reader's eye merges the glyphs.
    """
    folded = _SKELETON_DROP.sub("", name.lower())
    return folded.replace("rn", "m").replace("vv", "w").translate(_SKELETON_MAP)


_RESERVED_SKELETONS = {skeleton(r): r for r in sorted(RESERVED_OWNERS)}


def _non_ascii(value: str) -> str | None:
    bad = next((c for c in value if not c.isascii()), None)
    return None if bad is None else f"non-ASCII character {bad!r} (U+{ord(bad):04X})"


def validate_owner(owner: str) -> str:
    """Check an owner name and return it (owners have one spelling: no normalisation).

    Raises:
        InvalidName: with ``kind="owner"`` and what is wrong.
        ReservedName: the owner is kept for the hub, or looks like one that is.
    """
    if not isinstance(owner, str) or not owner:
        raise InvalidName("owner", str(owner), "it is empty")
    if bad := _non_ascii(owner):
        raise InvalidName("owner", owner, f"{bad}; use lowercase ASCII letters, digits, '-'")
    if len(owner) > OWNER_MAX:
        raise InvalidName("owner", owner, f"{len(owner)} characters, at most {OWNER_MAX}")
    if not _OWNER_RE.fullmatch(owner):
        hint = ""
        if _OWNER_RE.fullmatch(cand := normalize(owner).strip("-")):
            hint = f" (did you mean {cand!r}?)"
        raise InvalidName("owner", owner, "use lowercase ASCII letters, digits and single "
                          f"hyphens, starting and ending with a letter or digit{hint}")
    if (hit := _RESERVED_SKELETONS.get(skeleton(owner))) is not None:
        same = "is" if hit == owner else f"looks like {hit!r}, which is"
        raise ReservedName("owner", owner, f"it {same} reserved for the hub")
    return owner


def validate_env_name(name: str) -> str:
    """Check an environment name and return its canonical (PEP 503) form.

    Raises:
        InvalidName: with ``kind="env_name"`` and what is wrong (``..``, ``.git``,
            over-long, non-ASCII, a ``-vN`` ending, ...).
    """
    if not isinstance(name, str) or not name:
        raise InvalidName("env_name", str(name), "it is empty")
    if bad := _non_ascii(name):
        raise InvalidName("env_name", name, f"{bad}; names are ASCII only")
    if len(name) > ENV_NAME_MAX:
        raise InvalidName("env_name", name, f"{len(name)} characters, at most {ENV_NAME_MAX}")
    if "/" in name or "\\" in name:
        raise InvalidName("env_name", name, "slashes are not allowed (an id is OWNER/NAME-vN)")
    if "." in name:
        raise InvalidName("env_name", name, "dots are not allowed (no '..', '.git' or 'a.b')")
    if not _ENV_INPUT_RE.fullmatch(name):
        raise InvalidName("env_name", name, "use ASCII letters and digits, words joined by "
                          "single '-' or '_', starting and ending with a letter or digit")
    canonical = normalize(name)
    if _VERSION_SUFFIX_RE.search(canonical):
        raise InvalidName("env_name", name, "it ends in '-vN', which ids use for the "
                          "environment version; drop it or write e.g. 'v2' without the hyphen")
    return canonical


@dataclass(frozen=True, order=True)
class EnvId:
    """A parsed environment id ``OWNER/NAME-vN``."""

    owner: str
    name: str
    version: int

    def __str__(self) -> str:
        return f"{self.owner}/{self.name}-v{self.version}"


def parse_env_id(env_id: str) -> EnvId:
    """Split a hub environment id; only the canonical spelling is accepted.

    Ids are looked up by exact string in registries and entry points, so a second
    spelling (``Alice/My_Env-v0``) would be a second environment: refused, with a hint.

    Raises:
        InvalidName: with ``kind="env_id"``.
    """
    m = _ENV_ID_RE.fullmatch(env_id) if isinstance(env_id, str) else None
    if m is None:
        raise InvalidName("env_id", str(env_id), "expected OWNER/NAME-vN, e.g. alice/wordle-v0")
    try:
        owner = validate_owner(m["owner"])
        name = validate_env_name(m["name"])
    except InvalidName as exc:
        raise InvalidName("env_id", env_id, str(exc)) from exc
    parsed = EnvId(owner, name, int(m["version"]))
    if str(parsed) != env_id:
        raise InvalidName("env_id", env_id, f"not in canonical form; write {str(parsed)!r}")
    return parsed


def distribution_name(owner: str, name: str) -> str:
    """The owner-qualified distribution name of ``owner``'s environment ``name``."""
    owner = validate_owner(owner)
    return f"{DIST_PREFIX}{len(owner)}-{owner}-{validate_env_name(name)}"


def parse_distribution_name(dist: str) -> tuple[str, str]:
    """``(owner, name)`` of a hub distribution, in any PEP 503-equal spelling.

    ``gymhub_env_5_alice_wordle`` (a wheel file name's form) parses like
    ``gymhub-env-5-alice-wordle``.

    Raises:
        InvalidName: with ``kind="distribution"``: not a hub name, or a malformed one.
    """
    canon = normalize(dist) if isinstance(dist, str) and dist.isascii() else ""
    if not canon.startswith(DIST_PREFIX):
        raise InvalidName("distribution", str(dist), f"hub distributions start with "
                          f"{DIST_PREFIX!r}<len(owner)>-<owner>-<name>")
    rest = canon[len(DIST_PREFIX):]
    m = re.match(r"([1-9][0-9]?)-", rest)
    if m is None:
        raise InvalidName("distribution", dist, "no owner length after the prefix")
    n = int(m[1])
    owner, sep, name = rest[m.end():m.end() + n], rest[m.end() + n:m.end() + n + 1], \
        rest[m.end() + n + 1:]
    if sep != "-" or not name:
        raise InvalidName("distribution", dist, f"the owner length {n} does not fit the name")
    try:
        owner, name = validate_owner(owner), validate_env_name(name)
    except InvalidName as exc:
        raise InvalidName("distribution", dist, str(exc)) from exc
    return owner, name


def osa_distance(a: str, b: str) -> int:
    """Optimal string alignment distance: edits (insert, delete, substitute, swap adjacent).

    The textbook dynamic programme over two rows plus the one before (for swaps); names
    are at most 64 characters, so this is a few thousand steps at most and runs only on
    the handful of candidates :func:`lookalike_keys` lets through.
    """
    if a == b:
        return 0
    before: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], before[j - 2] + 1)
        before, prev = prev, row
    return prev[-1]


def is_lookalike(name: str, other: str, *, typos: bool = False) -> bool:
    """Whether ``other`` could be mistaken for ``name`` without being the same name.

    Args:
        name: the name being created, in any spelling.
        other: an existing name; equal PEP 503 forms are the same name, never a clash.
        typos: also count names one edit apart (environment names); owners compare by
            skeleton only.
    """
    a, b = normalize(name), normalize(other)
    if a == b:
        return False
    if skeleton(a) == skeleton(b):
        return True
    return (typos and min(len(a), len(b)) >= TYPO_MIN_LENGTH and abs(len(a) - len(b)) <= 1
            and osa_distance(a, b) == 1)


def find_lookalike(name: str, existing: Iterable[str], *, typos: bool = False) -> str | None:
    """The first of ``existing`` that looks like ``name`` without being the same name.

    "The same name" means equal PEP 503 forms: re-using one's own name is not a clash.
    ``typos`` adds the one-edit rule (:func:`is_lookalike`).
    """
    return next((other for other in existing if is_lookalike(name, other, typos=typos)), None)


def check_not_lookalike(kind: str, name: str, existing: Iterable[str], *,
                        typos: bool = False) -> None:
    """Refuse a new ``name`` that looks like one of ``existing`` (see :func:`is_lookalike`).

    The storage layer calls this inside the transaction that creates the owner, with the
    owners it already holds; packages go through :func:`check_new_package_name`.

    Raises:
        LookalikeName: naming the existing name it would be confused with.
    """
    if (other := find_lookalike(name, existing, typos=typos)) is not None:
        raise LookalikeName(kind, name, other)


_NAME_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-"


def lookalike_keys(name: str) -> set[str]:
    """Every skeleton a stored name must have to be a look-alike of ``name``.

    A stored name one edit from ``normalize(name)`` *is* one of that form's one-edit
    neighbours, so its skeleton is the skeleton of a neighbour: looking the skeletons of
    all neighbours up in the indexed ``packages.skeleton`` column finds every candidate,
    and only candidates. At 64 characters that is about 4,800 neighbours and fewer
    distinct skeletons, computed in a few milliseconds, against a scan of every package
    on the hub; a short name has only its own skeleton (the one-edit rule starts at
    :data:`TYPO_MIN_LENGTH` characters).
    """
    norm = normalize(name)
    keys = {skeleton(norm)}
    if len(norm) + 1 < TYPO_MIN_LENGTH:
        return keys
    for i in range(len(norm) + 1):
        head, tail = norm[:i], norm[i:]
        keys.update(skeleton(head + c + tail) for c in _NAME_ALPHABET)  # insertions
        if tail:
            rest = tail[1:]
            keys.add(skeleton(head + rest))  # deletion
            keys.update(skeleton(head + c + rest) for c in _NAME_ALPHABET)  # substitutions
            if rest:
                keys.add(skeleton(head + rest[0] + tail[0] + rest[1:]))  # adjacent swap
    return keys


_KEY_CHUNK = 500  # bound parameters per query, well under every backend's limit
_NAMES_LOCK = 0x67796D6875626E6D  # "gymhubnm": one PostgreSQL advisory lock for creates


def check_new_package_name(session: Session, name: str) -> None:
    """Refuse a new package ``name`` that looks like any owner's existing package.

    Call it inside the transaction that creates the package. On PostgreSQL it first
    takes a transaction-scoped advisory lock, so two look-alike creates by different
    owners queue rather than both passing (new packages are rare: a hub-wide lock costs
    nothing); SQLite's write transactions are serial already. Candidates come from the
    ``packages.skeleton`` index (:func:`lookalike_keys`), then :func:`is_lookalike`
    decides on the few it finds.

    Raises:
        LookalikeName: ``existing`` names the package as ``owner/name``.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(sa.select(sa.func.pg_advisory_xact_lock(_NAMES_LOCK)))
    keys = sorted(lookalike_keys(name))
    for start in range(0, len(keys), _KEY_CHUNK):
        found = session.execute(
            sa.select(Owner.name, Package.name).join(Owner, Package.owner_id == Owner.id)
            .where(Package.skeleton.in_(keys[start:start + _KEY_CHUNK]))
            .order_by(Owner.name, Package.normalized_name))
        for owner, other in found:
            if is_lookalike(name, other, typos=True):
                raise LookalikeName("env_name", name, f"{owner}/{other}")


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Suggestions for an unknown ``name``: look-alikes first, then close spellings.

    Only ever shown to a person: a caller must never pick one of these itself (an agent
    or a config with a typo would install a squatter's code).
    """
    pool = list(dict.fromkeys(candidates))
    key = skeleton(name)
    out = [c for c in pool if skeleton(c) == key and c != name]
    by_norm: dict[str, str] = {}
    for c in pool:
        by_norm.setdefault(normalize(c), c)
    for hit in difflib.get_close_matches(normalize(name), list(by_norm), n=n, cutoff=0.6):
        if by_norm[hit] not in out and by_norm[hit] != name:
            out.append(by_norm[hit])
    return out[:n]


def not_found_message(kind: str, name: str, candidates: Iterable[str]) -> str:
    """``"no environment 'alice/wrodle' on the hub. Did you mean 'alice/wordle'?"``."""
    hint = did_you_mean(name, candidates)
    tail = f" Did you mean {', '.join(repr(h) for h in hint)}?" if hint else ""
    return f"no {kind} {name!r} on the hub.{tail}"
