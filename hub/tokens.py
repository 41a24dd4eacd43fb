"""API tokens: scoped to one owner and to actions, expiring, revocable, stored hashed.

**Format.** ``ghub_<id>_<secret>``: ``id`` is 16 hex characters, the token row's primary
key and safe to show (listings print ``ghub_<id>``); ``secret`` is 43 base-62 characters
(256 bits). Naming its own row lets a request be authenticated with one primary-key
lookup and one comparison instead of a scan over every stored digest, and the fixed
``ghub_`` prefix lets secret scanners recognise a leaked token. The alphabet has no
``-`` or ``_`` inside the secret, so a double-click selects the whole token.

**Storage.** Only ``sha256(token)`` is kept. A slow password hash would add nothing:
256 random bits cannot be guessed, and the digest is compared in constant time
(:func:`hmac.compare_digest`), so a stolen database does not yield working tokens and the
timing of a refusal does not reveal a prefix.

**Lifetime.** Tokens expire: 90 days unless the caller asks otherwise, and "never" only
when said explicitly (``expires_in=None``, ``--expires never``), so a token pasted into a
CI secret years ago and forgotten does not keep publishing forever.
:func:`rotate_token` replaces a token's secret (same owner, scopes, description and
lifetime) and revokes the old one in one transaction: there is no moment with both or
neither.

**Refusals** (each its own :class:`~gymhub.errors.TokenError`): malformed, unknown id or
wrong secret are all :class:`~gymhub.errors.TokenInvalid` on purpose: a client must not be
able to tell whether an id exists. Then revoked, expired, another owner's namespace, and
a missing scope, in that order.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gymhub.errors import (
    InvalidHubInput,
    OwnerNotFound,
    TokenExpired,
    TokenInvalid,
    TokenOwnerError,
    TokenRevoked,
    TokenScopeError,
)
from gymhub.hub.db import SCOPES, HubDB, Owner, Token
from gymhub.hub.names import check_not_lookalike, validate_owner

__all__ = [
    "DEFAULT_LIFETIME",
    "TOKEN_PREFIX",
    "TokenInfo",
    "authenticate",
    "check_owner_name",
    "create_token",
    "ensure_owner",
    "list_tokens",
    "parse_duration",
    "parse_scopes",
    "revoke_token",
    "rotate_token",
]

TOKEN_PREFIX = "ghub_"
_ALPHABET = string.ascii_letters + string.digits
_SECRET_LEN = 43  # 43 * log2(62) = 256.1 bits
_TOKEN = re.compile(rf"{TOKEN_PREFIX}([0-9a-f]{{16}})_([A-Za-z0-9]{{{_SECRET_LEN}}})")
#: ``last_used_at`` is refreshed at most this often, so reads don't all become writes.
LAST_USED_GRANULARITY = timedelta(minutes=1)
_DURATION = re.compile(r"(\d+)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: A new token's lifetime unless the caller names another (or explicitly none).
DEFAULT_LIFETIME = timedelta(days=90)


@dataclass(frozen=True)
class TokenInfo:
    """What is known about a token, never its secret.

    Attributes:
        id: public identifier; the token reads ``ghub_<id>_...``.
        owner: the namespace it acts for.
        scopes: a non-empty subset of ``read``, ``publish``, ``yank``.
    """

    id: str
    owner: str
    scopes: frozenset[str]
    description: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    @property
    def prefix(self) -> str:
        """The token's visible part, ``ghub_<id>``: enough to recognise it in a listing."""
        return f"{TOKEN_PREFIX}{self.id}"


def _info(row: Token, owner: str) -> TokenInfo:
    return TokenInfo(row.id, owner, frozenset(row.scopes.split(",")), row.description,
                     row.created_at, row.expires_at, row.revoked_at, row.last_used_at)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_owner_name(name: str) -> str:
    """The hub's owner-name rule (:func:`gymhub.hub.names.validate_owner`), at every door.

    Tokens create owners, so a name refused here can never own anything.

    Raises:
        InvalidName: malformed; ReservedName: kept for the hub (or looks like such a name).
    """
    return validate_owner(name)


def parse_scopes(scopes: Iterable[str]) -> frozenset[str]:
    """Validate scope names; the result is non-empty.

    Raises:
        InvalidHubInput: an unknown scope, or none at all.
    """
    out = frozenset(scopes)
    if not out or not out <= set(SCOPES):
        raise InvalidHubInput(f"scopes must be a non-empty subset of {list(SCOPES)}, "
                             f"not {sorted(out)}")
    return out


def parse_duration(text: str) -> timedelta | None:
    """``"30d"``, ``"12h"``, ``"1w2d"``, ``"90m"``, ``"3600s"``; ``"never"`` is ``None``.

    "No expiry" must be spelled out (``never`` or ``none``): an empty value is refused
    rather than read as forever.

    Raises:
        InvalidHubInput: anything else, or a zero duration.
    """
    text = text.strip().lower()
    if text in {"never", "none"}:
        return None
    parts = _DURATION.findall(text)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != text.replace(" ", ""):
        raise InvalidHubInput(f"invalid duration {text!r}: use e.g. 30d, 12h, 1w, or never")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise InvalidHubInput("a token's lifetime must be positive")
    return timedelta(seconds=seconds)


def ensure_owner(session: Session, name: str, now: datetime) -> Owner:
    """The owner called ``name``, created if missing (safe against a concurrent create).

    Raises:
        InvalidName: a malformed or reserved name.
        LookalikeName: a new owner that looks like an existing one (``a1ice``/``alice``).
    """
    check_owner_name(name)
    found = session.scalar(sa.select(Owner).where(Owner.name == name))
    if found is not None:
        return found
    check_not_lookalike("owner", name, list(session.scalars(sa.select(Owner.name))))
    try:
        with session.begin_nested():
            owner = Owner(name=name, created_at=now)
            session.add(owner)
        return owner
    except IntegrityError:  # created by someone else since our select
        return session.scalars(sa.select(Owner).where(Owner.name == name)).one()


def _new_secret() -> tuple[str, str]:
    """``(id, token)`` of a fresh token (see the module docstring for the format)."""
    token_id = secrets.token_hex(8)
    return token_id, f"{TOKEN_PREFIX}{token_id}_" + "".join(
        secrets.choice(_ALPHABET) for _ in range(_SECRET_LEN))


def _check_lifetime(expires_in: timedelta | None) -> None:
    if expires_in is not None and expires_in <= timedelta(0):
        raise InvalidHubInput("a token's lifetime must be positive")


def create_token(db: HubDB, owner: str, scopes: Iterable[str] = ("read", "publish"), *,
                 expires_in: timedelta | None = DEFAULT_LIFETIME,
                 description: str = "") -> tuple[TokenInfo, str]:
    """Mint a token for ``owner``, creating the owner if needed.

    Args:
        db: the hub database.
        owner: the namespace the token may act for.
        scopes: what it may do; yank must be asked for explicitly.
        expires_in: lifetime from now, :data:`DEFAULT_LIFETIME` (90 days) unless given;
            ``None`` never expires and must be asked for explicitly (revoke it instead).
        description: a note for the owner's listing (where it is used, say).

    Returns:
        ``(info, token)``; ``token`` is the only copy of the secret, shown once.
    """
    wanted = parse_scopes(scopes)
    _check_lifetime(expires_in)
    token_id, token = _new_secret()
    now = db.clock()
    with db.write() as session:
        row = Token(id=token_id, owner_id=ensure_owner(session, owner, now).id,
                    secret_sha256=_digest(token), scopes=",".join(sorted(wanted)),
                    description=description[:200], created_at=now,
                    expires_at=None if expires_in is None else now + expires_in,
                    revoked_at=None, last_used_at=None)
        session.add(row)
    return _info(row, owner), token


def rotate_token(db: HubDB, token_id: str, *, owner: str | None = None,
                 expires_in: timedelta | Literal["same"] | None = "same",
                 ) -> tuple[TokenInfo, str]:
    """Replace a token by a new secret with the same owner, scopes and description.

    The new token is inserted and the old one revoked in one transaction, so a client
    switching over never sees both refused, and a leaked secret stops working the moment
    the new one exists. Rotating an expired token renews it; a revoked one is refused
    (revocation is final: mint a new token instead).

    Args:
        db: the hub database.
        token_id: the old token's id, or its visible prefix ``ghub_<id>``.
        owner: when given, only that owner's token may be rotated (as in
            :func:`revoke_token`).
        expires_in: the new token's lifetime; by default the old token's own lifetime
            (``expires_at - created_at``, or never if it never expired) counted from now.

    Returns:
        ``(info, token)`` of the new token; ``token`` is the only copy of its secret.

    Raises:
        TokenInvalid: no such token (or not ``owner``'s).
        TokenRevoked: the token was revoked.
    """
    old_id = token_id.removeprefix(TOKEN_PREFIX).partition("_")[0]
    new_id, token = _new_secret()
    now = db.clock()
    with db.write() as session:
        found = session.execute(
            sa.select(Token, Owner.name).join(Owner).where(Token.id == old_id)
        ).first()
        if found is None or (owner is not None and found[1] != owner):
            raise TokenInvalid(f"no token with id {old_id!r}")
        old, owner_name = found
        if old.revoked_at is not None:
            raise TokenRevoked(f"token {TOKEN_PREFIX}{old.id} was revoked; revocation is "
                               "final, create a new token instead")
        lifetime = expires_in if expires_in != "same" else (
            None if old.expires_at is None else old.expires_at - old.created_at)
        _check_lifetime(lifetime)
        row = Token(id=new_id, owner_id=old.owner_id, secret_sha256=_digest(token),
                    scopes=old.scopes, description=old.description, created_at=now,
                    expires_at=None if lifetime is None else now + lifetime,
                    revoked_at=None, last_used_at=None)
        session.add(row)
        old.revoked_at = now
    return _info(row, owner_name), token


def authenticate(db: HubDB, token: str, scope: str, *, owner: str | None) -> TokenInfo:
    """The token's record, if it may do ``scope`` in ``owner``'s namespace now.

    Args:
        db: the hub database.
        token: the full token as the client sent it.
        scope: ``read``, ``publish`` or ``yank``.
        owner: the namespace the request acts on; ``None`` only for requests about the
            token itself (who am I), never for an action on a package.

    Raises:
        TokenInvalid: malformed, unknown, or wrong secret (indistinguishable on purpose).
        TokenRevoked: revoked.
        TokenExpired: past its expiry.
        TokenOwnerError: a token of another owner.
        TokenScopeError: lacking ``scope``.
    """
    parse_scopes([scope])
    match = _TOKEN.fullmatch(token.strip()) if isinstance(token, str) else None
    if match is None:
        raise TokenInvalid("the token is not a gymhub hub token (ghub_<id>_<secret>)")
    now = db.clock()
    with db.read() as session:
        found = session.execute(
            sa.select(Token, Owner.name).join(Owner).where(Token.id == match.group(1))
        ).first()
        expected = found[0].secret_sha256 if found else _digest("")  # same work either way
        if not hmac.compare_digest(expected, _digest(token.strip())) or found is None:
            raise TokenInvalid("the token is not recognised")
        row, owner_name = found
        info = _info(row, owner_name)
    if info.revoked_at is not None:
        raise TokenRevoked(f"token {info.prefix} was revoked at {info.revoked_at:%Y-%m-%d %H:%M}Z")
    if info.expires_at is not None and info.expires_at <= now:
        raise TokenExpired(f"token {info.prefix} expired at {info.expires_at:%Y-%m-%d %H:%M}Z")
    if owner is not None and owner != info.owner:
        raise TokenOwnerError(f"token {info.prefix} belongs to {info.owner!r}, not {owner!r}")
    if scope not in info.scopes:
        raise TokenScopeError(f"token {info.prefix} lacks the {scope!r} scope "
                              f"(it has {', '.join(sorted(info.scopes))})")
    if info.last_used_at is None or now - info.last_used_at >= LAST_USED_GRANULARITY:
        with db.write() as session:
            session.execute(sa.update(Token).where(Token.id == info.id)
                            .values(last_used_at=now))
    return info


def revoke_token(db: HubDB, token_id: str, *, owner: str | None = None) -> TokenInfo:
    """Revoke a token by id (idempotent: the first revocation time is kept).

    Args:
        db: the hub database.
        token_id: the id, or the visible prefix ``ghub_<id>``.
        owner: when given, only that owner's token may be revoked (the HTTP layer passes
            the caller's namespace); the CLI, run by the operator, passes ``None``.

    Raises:
        TokenInvalid: no such token (or not ``owner``'s).
    """
    token_id = token_id.removeprefix(TOKEN_PREFIX).partition("_")[0]
    with db.write() as session:
        found = session.execute(
            sa.select(Token, Owner.name).join(Owner).where(Token.id == token_id)
        ).first()
        if found is None or (owner is not None and found[1] != owner):
            raise TokenInvalid(f"no token with id {token_id!r}")
        row, owner_name = found
        if row.revoked_at is None:
            row.revoked_at = db.clock()
        return _info(row, owner_name)


def list_tokens(db: HubDB, owner: str) -> list[TokenInfo]:
    """Every token of ``owner``, oldest first, revoked and expired ones included.

    Raises:
        OwnerNotFound: no such owner.
    """
    with db.read() as session:
        if session.scalar(sa.select(Owner.id).where(Owner.name == owner)) is None:
            raise OwnerNotFound(f"no owner named {owner!r}")
        rows = session.scalars(sa.select(Token).join(Owner).where(Owner.name == owner)
                               .order_by(Token.created_at, Token.id)).all()
        return [_info(r, owner) for r in rows]
