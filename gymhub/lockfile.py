"""``gymhub.lock``: what was installed from which hub, by digest, and who trusted it.

The lock is the user's memory between installs. It pins each hub's signing key the first
time it is seen (trust on first use), so a later key is noticed rather than believed; it
records the exact sha256 of every environment installed, so a re-install fetches those
bytes or nothing; and it records when the user overrode a refusal with ``--trust``, so
the override is made once, knowingly, and stays visible.

It is JSON (stdlib, no partial-write ambiguity), rewritten whole and atomically: a crash
mid-write leaves the previous lock, never half of one. Layout::

    {"lock_version": 1,
     "hubs": {"http://hub": {"key_id": "...", "public_key": "<b64>", "pinned_at": "..."}},
     "packages": {"alice/word-ladder": {"hub": "http://hub", "key_id": "...",
        "owner": "alice", "name": "word-ladder", "version": "0.1.0", "sha256": "...",
        "filename": "...whl", "env_ids": ["alice/word-ladder-v0"],
        "installed_at": "...Z", "trusted": false, "check": "passed"}}}

Why this module sits in :mod:`gymhub` itself and not in :mod:`gymhub.hub`: the lock is
written by ``gymhub install`` (the hub's client) but read by the learner too, which
records in every checkpoint the exact bytes of the environments it trained on
(:func:`env_digests`). Below both, on the standard library and :mod:`gymhub.errors`
alone, neither depends on the other; :mod:`gymhub.hub.lock` re-exports it for the hub.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gymhub.errors import ConfigError

__all__ = ["LOCK_FILE", "LOCK_VERSION", "Lock", "env_digests", "installed_digest", "now_iso"]

LOCK_FILE = "gymhub.lock"
LOCK_VERSION = 1

#: What a checkpoint copies from a lock entry to name the bytes it trained on.
_LOCKED_FIELDS = ("hub", "key_id", "version", "sha256", "filename", "trusted", "check")


def now_iso() -> str:
    """UTC now, to the second, as the lock writes times (``2026-12-01T15:37:00Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Lock:
    """A ``gymhub.lock`` file in memory; nothing reaches disk before :meth:`save`.

    Args:
        path: the lock file (it need not exist yet).
        data: its parsed contents.
    """

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.hubs: dict[str, dict[str, Any]] = dict(data.get("hubs", {}))
        self.packages: dict[str, dict[str, Any]] = dict(data.get("packages", {}))

    @classmethod
    def load(cls, path: str | os.PathLike[str] = LOCK_FILE) -> Lock:
        """The lock at ``path``, or an empty one if there is none.

        Raises:
            ConfigError: the file exists but is not a lock this version understands; it is
                never silently replaced, since it holds the user's pinned keys.
        """
        p = Path(path)
        if not p.exists():
            return cls(p, {})
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{p} is not a readable gymhub lock: {exc}") from exc
        if not isinstance(data, dict) or data.get("lock_version") != LOCK_VERSION or not all(
                isinstance(data.get(k, {}), dict) for k in ("hubs", "packages")):
            raise ConfigError(f"{p} is not a version-{LOCK_VERSION} gymhub lock")
        return cls(p, data)

    def pinned_key(self, hub: str) -> dict[str, Any] | None:
        """The key pinned for ``hub``, if any."""
        return self.hubs.get(hub.rstrip("/"))

    def pin_key(self, hub: str, key_id: str, public_key: str) -> None:
        """Pin (or, after ``--trust``, re-pin) ``hub``'s signing key."""
        self.hubs[hub.rstrip("/")] = {"key_id": key_id, "public_key": public_key,
                                      "pinned_at": now_iso()}

    def entry(self, package_id: str) -> dict[str, Any] | None:
        """The locked install of ``owner/name``, if any."""
        return self.packages.get(package_id)

    def entry_for_env(self, env_id: str) -> dict[str, Any] | None:
        """The locked install whose package registers ``env_id``, if any.

        Found by the ids each entry lists rather than by parsing ``env_id``, so reading a
        lock needs none of the hub's naming rules.
        """
        return next((e for e in self.packages.values() if env_id in e.get("env_ids", [])),
                    None)

    def record(self, entry: dict[str, Any]) -> None:
        """Record an install (replacing the package's previous entry)."""
        self.packages[f"{entry['owner']}/{entry['name']}"] = dict(entry)

    def save(self) -> None:
        """Write the whole lock atomically (temporary file, fsync, rename)."""
        data = {"lock_version": LOCK_VERSION,
                "hubs": dict(sorted(self.hubs.items())),
                "packages": dict(sorted(self.packages.items()))}
        text = json.dumps(data, indent=2, sort_keys=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def installed_digest(dist: importlib.metadata.Distribution) -> dict[str, Any]:
    """An installed distribution's version and the sha256 of its ``RECORD``.

    ``RECORD`` hashes every file the install wrote, so its own digest names the bytes.
    """
    record = dist.read_text("RECORD")
    return {"source": "installed", "version": dist.version,
            "record_sha256": None if record is None else
            hashlib.sha256(record.encode()).hexdigest()}


def _provider(env_id: str) -> importlib.metadata.Distribution | None:
    """The installed distribution whose ``gymhub.envs`` entry point is named ``env_id``.

    That entry point is how the registry found the environment, so its distribution is
    the code that actually ran, whatever the distribution is called.
    """
    from gymhub.envs.registration import ENTRY_POINT_GROUP

    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=env_id):
        if ep.dist is not None:
            return ep.dist
    return None


def env_digests(env_ids: Sequence[str], lock_path: str | os.PathLike[str] = LOCK_FILE
                ) -> dict[str, dict[str, Any]]:
    """The exact hub files behind each owner-qualified environment id, for a checkpoint.

    A trained model is only reproducible, or auditable, against the bytes it trained on,
    and a version number names bytes only as long as the hub says so. So each hub id maps
    to its lock entry (hub, sha256, trust) when the lock has it, else to what is installed
    (:func:`installed_digest` of the distribution whose entry point registers the id).
    Ids without an owner (built-in environments) are not hub code and are skipped; a hub id
    installed some other way is recorded as ``{"source": "unknown"}`` rather than omitted.
    """
    lock = Lock.load(lock_path)
    out: dict[str, dict[str, Any]] = {}
    for env_id in env_ids:
        if "/" not in env_id:
            continue
        entry = lock.entry_for_env(env_id)
        if entry is not None:
            out[env_id] = {"source": "lock", **{k: entry.get(k) for k in _LOCKED_FIELDS}}
            continue
        dist = _provider(env_id)
        out[env_id] = {"source": "unknown"} if dist is None else installed_digest(dist)
    return out
