"""The hub's database: typed ORM models and the engine that serves them.

The schema itself is owned by the Alembic migrations in :mod:`gymhub.hub.migrations`;
these models must describe exactly what the head migration creates (a test compares
them), so a change here without a new migration fails the suite instead of a deployment.

Choices that matter for correctness:

* **Identity is ``(owner, normalized name, canonical version)``.** ``1.0`` and ``1.0.0``
  are one PEP 440 version, so both would satisfy ``==1.0``; the unique constraint is on
  the canonical form so that they can never name two different files.
* **The ledger outlives everything else.** :class:`LedgerEntry` records which sha256 a
  version was first published with, keyed by *names*, not by foreign keys: deleting a
  version, a package or even an owner (an administrator's hand) leaves it in place, so
  the mapping can never be handed to different bytes later. See
  :mod:`gymhub.hub.store` for how publishing consults it.
* **Times are aware UTC** on every backend (:class:`UTCDateTime`): SQLite has no time
  zones, and comparing a naive expiry with an aware clock would raise at the worst time.
* **Enumerations are strings with CHECK constraints**, not native enums, so adding a
  value is a one-line migration on PostgreSQL too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Dialect, Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

__all__ = [
    "CHECK_STATUSES",
    "SCOPES",
    "Base",
    "CheckJob",
    "CheckResult",
    "HubDB",
    "LedgerEntry",
    "Owner",
    "Package",
    "Token",
    "Version",
    "connect",
    "default_db_url",
    "utcnow",
]

#: What a token may be allowed to do; a token holds a non-empty subset.
SCOPES = ("publish", "read", "yank")
#: The outcomes the hub's checker records for a version.
CHECK_STATUSES = ("failed", "passed", "unchecked")

#: Deterministic constraint names: migrations can then drop exactly what they created.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """The hub's clock: aware UTC, to the microsecond."""
    return datetime.now(UTC)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timestamp that goes in and comes out as aware UTC on every backend."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the hub database; use aware UTC")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base carrying the naming convention."""

    metadata = sa.MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(), dict[str, Any]: sa.JSON()}


class Owner(Base):
    """A namespace (``alice`` in ``alice/wordle``); tokens and packages belong to one."""

    __tablename__ = "owners"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime]


class Token(Base):
    """An API token. Only a digest of its secret is stored; ``id`` is public.

    The id is the token's own name inside the secret (``ghub_<id>_<secret>``), so a
    request is looked up by primary key and compared once: no scan over every digest.
    """

    __tablename__ = "tokens"

    id: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    owner_id: Mapped[int] = mapped_column(sa.ForeignKey("owners.id"), index=True)
    secret_sha256: Mapped[str] = mapped_column(sa.String(64))
    scopes: Mapped[str] = mapped_column(sa.String(64))  # sorted, comma-separated
    description: Mapped[str] = mapped_column(sa.String(200), default="")
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]


class Package(Base):
    """One environment package of one owner; its versions hang off it."""

    __tablename__ = "packages"
    __table_args__ = (sa.UniqueConstraint("owner_id", "normalized_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(sa.ForeignKey("owners.id"), index=True)
    name: Mapped[str] = mapped_column(sa.String(100))  # as first published, for display
    normalized_name: Mapped[str] = mapped_column(sa.String(100))  # PEP 503
    #: Reserved for look-alike checks (``l``/``1``, ``o``/``0``); indexed, not unique yet.
    skeleton: Mapped[str] = mapped_column(sa.String(100), index=True)
    description: Mapped[str] = mapped_column(sa.Text, default="")
    created_at: Mapped[datetime]


class Version(Base):
    """A published, visible file. Rows are yanked, never updated in what they serve."""

    __tablename__ = "versions"
    __table_args__ = (sa.UniqueConstraint("package_id", "canonical_version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    package_id: Mapped[int] = mapped_column(sa.ForeignKey("packages.id"), index=True)
    version: Mapped[str] = mapped_column(sa.String(64))  # PEP 440 normalised, for display
    canonical_version: Mapped[str] = mapped_column(sa.String(64))  # identity (1.0 == 1.0.0)
    sha256: Mapped[str] = mapped_column(sa.String(64), index=True)
    size: Mapped[int] = mapped_column(sa.BigInteger)
    filename: Mapped[str] = mapped_column(sa.String(255))
    metadata_json: Mapped[dict[str, Any]] = mapped_column("metadata")
    env_ids: Mapped[list[str]] = mapped_column(sa.JSON)
    uploaded_at: Mapped[datetime]
    uploaded_by: Mapped[str | None] = mapped_column(sa.String(32))  # token id; audit only
    yanked_at: Mapped[datetime | None]
    yank_reason: Mapped[str | None] = mapped_column(sa.Text)
    #: The README as sanitised HTML, rendered once at publish time (never on a request).
    readme_html: Mapped[str | None] = mapped_column(sa.Text)


class LedgerEntry(Base):
    """``(owner, name, version) -> sha256``, written once with the version, kept forever.

    No foreign keys on purpose: the row must survive the deletion of the version, the
    package and the owner it names. Its primary key is also what decides a race between
    two publishes of one version: exactly one insert succeeds.
    """

    __tablename__ = "version_ledger"

    owner_name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    normalized_name: Mapped[str] = mapped_column(sa.String(100), primary_key=True)
    canonical_version: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    sha256: Mapped[str] = mapped_column(sa.String(64))
    recorded_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]
    delete_reason: Mapped[str | None] = mapped_column(sa.Text)


class CheckResult(Base):
    """What the hub's checker measured for one version, bound to the digest it ran on."""

    __tablename__ = "check_results"
    __table_args__ = (
        sa.CheckConstraint(
            "status IN ('failed', 'passed', 'unchecked')", name="status_known"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    version_id: Mapped[int] = mapped_column(sa.ForeignKey("versions.id"), index=True)
    sha256: Mapped[str] = mapped_column(sa.String(64))
    status: Mapped[str] = mapped_column(sa.String(16))
    details: Mapped[dict[str, Any]]
    checked_at: Mapped[datetime]


class CheckJob(Base):
    """A version waiting for (or under) the hub's check: the queue survives restarts.

    One row per version at most; a worker claims a row (``claimed_at``/``claimed_by``),
    records the result and deletes it. A claim older than the check's deadline is taken
    to be a dead worker's and is claimed again. ``owner_id`` lets workers serve owners
    round-robin, so one publisher's burst cannot starve the rest.
    """

    __tablename__ = "check_jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    version_id: Mapped[int] = mapped_column(sa.ForeignKey("versions.id"), unique=True)
    owner_id: Mapped[int] = mapped_column(sa.ForeignKey("owners.id"), index=True)
    enqueued_at: Mapped[datetime]
    claimed_at: Mapped[datetime | None]
    claimed_by: Mapped[str | None] = mapped_column(sa.String(64))
    attempts: Mapped[int] = mapped_column(default=0)


def default_db_url() -> str:
    """``$GYMHUB_HUB_DB``, else a SQLite file under the user's data directory."""
    if url := os.environ.get("GYMHUB_HUB_DB"):
        return url
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return f"sqlite:///{data / 'gymhub' / 'hub.db'}"


def connect(url: str) -> Engine:
    """An engine for ``url`` with the hub's SQLite settings applied.

    SQLite gets WAL (readers never wait for the writer), enforced foreign keys, a busy
    timeout, and ``BEGIN IMMEDIATE`` for transactions started through
    ``engine.execution_options(hub_write=True)``: a deferred transaction that reads and
    then writes can fail at once with ``SQLITE_BUSY`` when another writer got in between,
    whatever the timeout; taking the write lock up front makes writers queue instead.
    Reads keep plain ``BEGIN`` and never block on a writer.
    """
    sa_url = sa.make_url(url)
    if sa_url.get_backend_name() != "sqlite":
        return sa.create_engine(sa_url, pool_pre_ping=True)
    if sa_url.database and sa_url.database != ":memory:":
        Path(sa_url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(sa_url, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves, below
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA journal_mode=WAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        write = conn.get_execution_options().get("hub_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


class HubDB:
    """The engine, migrated to head, and read/write transactions on it.

    Args:
        url: SQLAlchemy URL (``sqlite:///path``, ``postgresql+psycopg://...``).
        migrate: bring the schema to the newest migration on open (the default); a
            service that must not alter its database passes ``False``.
        clock: the source of "now", replaceable so tests can move past an expiry.
    """

    def __init__(
        self, url: str, *, migrate: bool = True, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.url = url
        self.engine = connect(url)
        self.clock = clock
        self._writer = self.engine.execution_options(hub_write=True)
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(self._writer, expire_on_commit=False)
        if migrate:
            from gymhub.hub.migrations import upgrade

            upgrade(self._writer)

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reading; whatever it began is rolled back when it closes."""
        with self._read() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session in a write transaction: committed on success, rolled back on error."""
        with self._write() as session, session.begin():
            yield session

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()
