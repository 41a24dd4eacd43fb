"""Signed check statements: what lets a client trust a check result it did not run.

A check result shown by the hub is only a row in its database; a mirror, a proxy or a
compromised page could change ``failed`` to ``passed``. The hub therefore signs a small
*statement* that binds the result to the exact wheel (its file name and sha256) and to
the exact details (their digest), with an ed25519 key whose public half it publishes at
``/.well-known/gymhub-hub-key``. The install client verifies with the functions here
(:func:`verify_statement`, :func:`canonical_bytes`), so both sides share one encoding.

Formats (the contract the client codes against):

* key: ``{"algorithm": "ed25519", "key_id": K, "public_key": B}``; ``B`` is the 32 raw
  public-key bytes in standard padded base64, ``K`` the first 16 hex digits of their
  sha256;
* statement: ``{"type": "gymhub.check/v1", "owner", "name", "version", "filename",
  "sha256", "status", "details_sha256", "checked_at"}``;
* canonical bytes: ``json.dumps(obj, sort_keys=True, separators=(",", ":"),
  ensure_ascii=True)`` encoded; the signature is ed25519 over them, standard base64.

Signatures are deterministic (ed25519), so the hub signs on request from what it has
stored rather than storing signatures: the same result always yields the same bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from gymhub.errors import ConfigError, SignatureInvalid
from gymhub.hub.records import CheckInfo, VersionInfo

__all__ = [
    "STATEMENT_TYPE",
    "HubKey",
    "canonical_bytes",
    "details_sha256",
    "iso_z",
    "key_id",
    "sign_statement",
    "statement_for",
    "verify_statement",
]

STATEMENT_TYPE = "gymhub.check/v1"
_FIELDS = frozenset({"type", "owner", "name", "version", "filename", "sha256", "status",
                     "details_sha256", "checked_at"})


def canonical_bytes(obj: Any) -> bytes:
    """The one byte encoding of a JSON value that both signer and verifier hash."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def details_sha256(details: Mapping[str, Any]) -> str:
    """Hex sha256 of the canonical details, so the statement covers them without copying."""
    return hashlib.sha256(canonical_bytes(dict(details))).hexdigest()


def key_id(public_raw: bytes) -> str:
    """Short, stable name of a public key (first 16 hex digits of its sha256)."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


def iso_z(moment: datetime) -> str:
    """ISO 8601 in UTC with a ``Z``; naive datetimes are the database's UTC clock."""
    aware = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return aware.isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class HubKey:
    """The hub's signing key (private half kept in a 0600 PEM file)."""

    private: Ed25519PrivateKey

    @property
    def public_raw(self) -> bytes:
        """The 32 raw public-key bytes."""
        return self.private.public_key().public_bytes(serialization.Encoding.Raw,
                                                      serialization.PublicFormat.Raw)

    @property
    def key_id(self) -> str:
        """See :func:`key_id`."""
        return key_id(self.public_raw)

    def public_json(self) -> dict[str, str]:
        """The body of ``GET /.well-known/gymhub-hub-key``."""
        return {"algorithm": "ed25519", "key_id": self.key_id,
                "public_key": base64.b64encode(self.public_raw).decode("ascii")}

    @classmethod
    def generate(cls) -> HubKey:
        """A fresh key held in memory only (tests, throw-away hubs)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load_or_create(cls, path: str | os.PathLike[str]) -> HubKey:
        """Load the key at ``path``, creating it (mode 0600, race-free) when absent.

        Creating on first start means an operator never runs a hub that cannot sign.
        The new key is written and fsynced under a temporary name created with
        ``O_CREAT | O_EXCL`` and mode 0600, then hard-linked to ``path``; the link fails
        when the path exists, so of two hubs started together exactly one key wins, the
        loser loads it, and no reader ever sees a half-written file (a crash leaves only
        the temporary file). A key others could read could sign for the hub, and one
        others could write could be swapped for theirs: both are refused, not fixed
        silently, because the key may already have leaked.

        Raises:
            ConfigError: the file is readable or writable by group or others, or is not
                an unencrypted ed25519 PEM key.
        """
        target = Path(path).expanduser()
        try:
            return cls._load(target)
        except FileNotFoundError:
            pass
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        key = cls.generate()
        if not _publish_new(target, key.private.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption())):
            try:
                return cls._load(target)  # another process won: use its key
            except FileNotFoundError:  # e.g. a dangling symbolic link in the way
                raise ConfigError(f"cannot create the hub key at {target}: the name is "
                                  "taken by something that is not a file") from None
        return key

    @classmethod
    def _load(cls, target: Path) -> HubKey:
        """The key in ``target``, its permissions checked on the open file (no race)."""
        fd = os.open(target, os.O_RDONLY)
        with os.fdopen(fd, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise ConfigError(f"the hub key {target} is not a regular file")
            if mode & 0o066:
                raise ConfigError(
                    f"the hub key {target} is readable or writable by group or others (mode "
                    f"{stat.S_IMODE(mode):04o}); it may have leaked: replace it, or if you are "
                    f"sure it did not, run 'chmod 600 {target}'")
            data = fh.read()
        try:
            loaded = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{target} is not an unencrypted PEM private key: {exc}") from exc
        if not isinstance(loaded, Ed25519PrivateKey):
            raise ConfigError(f"{target} holds a {type(loaded).__name__}, not an ed25519 key")
        return cls(loaded)


def _publish_new(target: Path, data: bytes) -> bool:
    """Make ``target`` hold ``data`` (mode 0600) unless it exists; ``True`` if we made it."""
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, target)  # atomic, and refuses to replace an existing key
        except FileExistsError:
            return False
        except OSError:  # no hard links here: create the name itself exclusively
            try:
                out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return False
            with os.fdopen(out, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the new name survives a power cut
    finally:
        os.close(dir_fd)
    return True


def statement_for(version: VersionInfo, check: CheckInfo) -> dict[str, Any]:
    """The statement the hub signs for ``check`` of ``version``.

    The sha256 is the check's own (what the checker measured), not the version's, so a
    result can never be presented as covering other bytes.
    """
    return {
        "type": STATEMENT_TYPE, "owner": version.owner, "name": version.name,
        "version": version.version, "filename": version.filename, "sha256": check.sha256,
        "status": check.status, "details_sha256": details_sha256(check.details),
        "checked_at": iso_z(check.checked_at),
    }


def sign_statement(key: HubKey, statement: Mapping[str, Any]) -> str:
    """Standard base64 of the ed25519 signature over the canonical statement."""
    return base64.b64encode(key.private.sign(canonical_bytes(dict(statement)))).decode("ascii")


def verify_statement(public_key_b64: str, statement: Mapping[str, Any], signature: str) -> None:
    """Check ``signature`` over ``statement`` with the hub's published key.

    Raises:
        SignatureInvalid: the key or signature is malformed, the statement is not a
            ``gymhub.check/v1`` statement, or the signature does not match it.
    """
    try:
        raw = base64.b64decode(public_key_b64, validate=True)
        sig = base64.b64decode(signature, validate=True)
        public = Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise SignatureInvalid(f"malformed key or signature: {exc}") from exc
    if statement.get("type") != STATEMENT_TYPE or set(statement) != _FIELDS:
        raise SignatureInvalid(f"not a {STATEMENT_TYPE} statement: fields {sorted(statement)}")
    try:
        public.verify(sig, canonical_bytes(dict(statement)))
    except InvalidSignature:
        raise SignatureInvalid(
            f"the signature does not match this statement under key {key_id(raw)}") from None
