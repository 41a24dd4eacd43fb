"""The hub's registry: publish, yank and look up versions, atomically and immutably.

**Immutability.** ``(owner, name, version)`` maps to one sha256 forever. The version
table enforces it while a version exists; the ledger (:class:`~gymhub.hub.db.LedgerEntry`)
enforces it after: it is keyed by names rather than row ids and nothing here deletes from
it, so removing a version (:meth:`HubStore.delete_version`, the administrator's tool for
malware), its package or its owner cannot free the version for other bytes, nor even for
the same bytes. Publishing consults the ledger first, and inserts into it in the same
transaction as the version, so the rule holds whatever else a future admin tool does to
the other tables. Versions compare canonically (PEP 440: ``1.0`` is ``1.0.0``).

**Atomicity.** :meth:`HubStore.publish` checks everything it can first (names, digest,
the ledger, the owner's quota), renders the README (outside any transaction: it is the
slow part), then writes the blob durably (content-addressed, so idempotent), and only then
inserts the ledger row and the version in one transaction. The version becomes visible
at that commit and not before. A transaction that fails (a lost race, a look-alike name,
the quota) removes the blob it wrote, unless something references it or another publish
put it again since; only a crash in between leaves an unreferenced blob, never a row
pointing at a missing or partial file (:mod:`gymhub.hub.audit` sweeps those).

**Bounded cost.** Every owner has a storage quota (the sum of its version sizes, checked
in the publishing transaction); search is ranked and paged in SQL; "did you mean" reads a
bounded set of candidates through the indexed ``packages.skeleton`` column, never every
package. Versions stop at 64 characters and file names at 255 (the columns' sizes), so an
over-long value is a typed error here, never a database error on PostgreSQL.

**Concurrency.** Two publishes of one version race on the ledger's primary key: exactly
one insert commits; the other gets an ``IntegrityError``, rolls back, re-reads the
winner's row and reports a no-op (same bytes) or :class:`~gymhub.errors.VersionConflict`
(other bytes). A race to create the package is absorbed by a savepoint and a re-read.
On SQLite, write transactions begin ``IMMEDIATE`` and so queue instead of failing.

Names and wheels arrive already validated by the archive checker. Owners follow
:func:`gymhub.hub.names.validate_owner`; a new package whose name looks like any owner's
package (same skeleton, or one typo apart: :func:`gymhub.hub.names.check_new_package_name`)
is refused (:class:`~gymhub.errors.LookalikeName`) inside the transaction that would
create it, under a lock so two such creates serialise.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from packaging.utils import canonicalize_version
from packaging.version import InvalidVersion
from packaging.version import Version as PEP440
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gymhub.errors import (
    BlobCorrupted,
    DigestMismatch,
    HubStoreError,
    InvalidHubInput,
    OwnerNotFound,
    PackageNotFound,
    QuotaExceeded,
    VersionConflict,
    VersionNotFound,
)
from gymhub.hub.blobs import BlobStore, FileBlobStore, check_sha256
from gymhub.hub.db import (
    CHECK_STATUSES,
    CheckJob,
    CheckResult,
    HubDB,
    LedgerEntry,
    Owner,
    Package,
    Version,
)
from gymhub.hub.markdown import readme_from_metadata, render_readme
from gymhub.hub.names import check_new_package_name, normalize
from gymhub.hub.records import (
    CheckInfo,
    PackageInfo,
    PublishResult,
    VersionInfo,
    WheelDescription,
    check_package_name,
    name_skeleton,
    newest,
    parse_version,
    pick_version,
)
from gymhub.hub.search import search, suggestion_pool
from gymhub.hub.tokens import check_owner_name

__all__ = ["CheckInfo", "HubStore", "PackageInfo", "PublishResult", "VersionInfo",
           "WheelDescription"]

_PUBLISH_ATTEMPTS = 3
#: Each owner's default storage quota: the sum of its versions' sizes.
DEFAULT_OWNER_QUOTA_BYTES = 1 << 30
_MAX_VERSION_CHARS, _MAX_FILENAME_CHARS = 64, 255  # the columns' sizes


def _wheel_readme(data: bytes, filename: str) -> str | None:
    """The README in a wheel's ``METADATA`` (for callers that did not pass the checker's)."""
    from gymhub.hub.index import wheel_metadata  # the index imports this module

    raw = wheel_metadata(data, filename)
    return None if raw is None else readme_from_metadata(raw)


def _version_info(owner: str, package: Package, v: Version) -> VersionInfo:
    return VersionInfo(owner, package.name, v.version, v.sha256, v.size, v.filename,
                       tuple(v.env_ids), dict(v.metadata_json), v.uploaded_at, v.yanked_at,
                       v.yank_reason)


class HubStore:
    """The publish/yank/query API over a :class:`HubDB` and a :class:`BlobStore`.

    Args:
        db: the migrated database.
        blobs: where file bytes go.
        owner_quota_bytes: the most one owner's versions may hold together (``None``:
            unlimited); a publish past it is :class:`~gymhub.errors.QuotaExceeded`.
    """

    def __init__(self, db: HubDB, blobs: BlobStore, *,
                 owner_quota_bytes: int | None = DEFAULT_OWNER_QUOTA_BYTES) -> None:
        self.db = db
        self.blobs = blobs
        self.owner_quota_bytes = owner_quota_bytes

    @classmethod
    def open(cls, url: str, storage: str | os.PathLike[str], *,
             owner_quota_bytes: int | None = DEFAULT_OWNER_QUOTA_BYTES) -> HubStore:
        """A store on database ``url`` (migrated to head) with blobs under ``storage``."""
        return cls(HubDB(url), FileBlobStore(storage), owner_quota_bytes=owner_quota_bytes)

    # ------------------------------------------------------------------ writes
    def publish(self, owner: str, wheel: WheelDescription, data: bytes, *,
                uploaded_by: str | None = None, readme: str | None = None) -> PublishResult:
        """Make ``data`` visible as ``owner/wheel.name`` ``wheel.version``, or nothing.

        Args:
            owner: the namespace, already authorised (the owner must exist).
            wheel: the validated description of ``data``.
            data: the wheel's bytes.
            uploaded_by: the token id that published it, kept for audit.
            readme: the wheel's long description as the archive checker read it; ``None``
                reads it from ``data``'s ``METADATA``. Rendered once, here, into
                ``versions.readme_html`` (:func:`~gymhub.hub.markdown.render_readme`).

        Returns:
            The visible version; ``created`` is false when these bytes were already it.

        Raises:
            DigestMismatch: ``data`` is not ``wheel.size`` bytes hashing to ``wheel.sha256``.
            VersionConflict: the version exists with other bytes, or was deleted.
            OwnerNotFound: no such owner.
            InvalidName: a malformed owner; LookalikeName: a new package that looks like
                any owner's package (look-alike characters, or one typo apart).
            InvalidHubInput: a malformed or over-long name, version, digest or filename.
            QuotaExceeded: the owner's versions would pass ``owner_quota_bytes``.
        """
        check_owner_name(owner)
        check_package_name(wheel.name)
        if len(wheel.version) > _MAX_VERSION_CHARS:
            raise InvalidHubInput(f"a version has at most {_MAX_VERSION_CHARS} characters")
        v = parse_version(wheel.version)
        check_sha256(wheel.sha256)
        if (not wheel.filename or "/" in wheel.filename or "\\" in wheel.filename
                or len(wheel.filename) > _MAX_FILENAME_CHARS):
            raise InvalidHubInput(f"invalid file name {wheel.filename[:300]!r}")
        if len(data) != wheel.size or hashlib.sha256(data).hexdigest() != wheel.sha256:
            raise DigestMismatch(f"{wheel.filename}: the uploaded bytes are not the declared "
                                 f"{wheel.size} bytes with sha256 {wheel.sha256}")
        key = (owner, normalize(wheel.name), canonicalize_version(v))
        existing = self._settled(key, wheel)
        if existing is not None:  # putting again repairs a damaged copy
            self.blobs.put(wheel.sha256, data)
            return PublishResult(existing, created=False)
        with self.db.read() as session:  # refuse before writing anything; again below
            self._check_quota(session, owner, wheel.size)
        html = render_readme(_wheel_readme(data, wheel.filename) if readme is None else readme)
        had_blob = self.blobs.exists(wheel.sha256)
        self.blobs.put(wheel.sha256, data)  # durable before any row can point at it
        put_at = time.time()
        try:
            for _ in range(_PUBLISH_ATTEMPTS):
                try:
                    with self.db.write() as session:
                        info = self._insert(session, key, v, wheel, uploaded_by, html)
                    return PublishResult(info, created=True)
                except IntegrityError:
                    existing = self._settled(key, wheel)  # the winner of the race, or raise
                    if existing is not None:
                        return PublishResult(existing, created=False)
            raise HubStoreError(f"publishing {owner}/{wheel.name} {v} kept colliding; retry")
        except BaseException:
            if not had_blob:
                self._drop_orphan(wheel.sha256, put_at)
            raise

    def _drop_orphan(self, sha256: str, put_at: float) -> None:
        """Remove a blob a failed publish wrote, unless a row or a newer put claims it."""
        try:
            with self.db.read() as session:
                if session.scalar(sa.select(Version.id).where(Version.sha256 == sha256)
                                  .limit(1)) is None:
                    self.blobs.delete(sha256, modified_before=put_at)
        except Exception:  # the refusal matters more; an audit sweep finds what is left
            pass

    def _check_quota(self, session: Session, owner: str, size: int) -> None:
        if self.owner_quota_bytes is None:
            return
        used = session.scalar(
            sa.select(sa.func.coalesce(sa.func.sum(Version.size), 0)).select_from(Version)
            .join(Package, Version.package_id == Package.id).join(Owner)
            .where(Owner.name == owner)) or 0
        if used + size > self.owner_quota_bytes:
            raise QuotaExceeded(
                f"{owner} stores {used:,} bytes of {self.owner_quota_bytes:,} allowed; this "
                f"wheel of {size:,} bytes does not fit (yanked versions count too: ask the "
                "hub's administrator for more room)")

    def _settled(self, key: tuple[str, str, str], wheel: WheelDescription) -> VersionInfo | None:
        """The version already published under ``key`` with these bytes, or ``None`` if free.

        Raises:
            VersionConflict: taken by other bytes, or deleted (never reused).
            OwnerNotFound: the owner does not exist.
        """
        owner, norm, canon = key
        label = f"{owner}/{wheel.name} {wheel.version}"
        with self.db.read() as session:
            if session.scalar(sa.select(Owner.id).where(Owner.name == owner)) is None:
                raise OwnerNotFound(f"no owner named {owner!r}")
            entry = session.get(LedgerEntry, key)
            if entry is None:
                return None
            if entry.deleted_at is not None:
                raise VersionConflict(
                    f"{label} was deleted ({entry.delete_reason}); a version is never "
                    "reused: publish a new version number")
            if entry.sha256 != wheel.sha256:
                raise VersionConflict(
                    f"{label} is already published with sha256 {entry.sha256}; versions are "
                    "immutable: publish a new version number")
            found = session.execute(
                sa.select(Package, Version).join(Version).join(Owner)
                .where(Owner.name == owner, Package.normalized_name == norm,
                       Version.canonical_version == canon)).first()
            if found is None:  # removed behind the API's back: still never reused
                raise VersionConflict(f"{label} is no longer available and cannot be reused")
            return _version_info(owner, *found)

    def _insert(self, session: Session, key: tuple[str, str, str], v: PEP440,
                wheel: WheelDescription, uploaded_by: str | None,
                readme_html: str) -> VersionInfo:
        owner, norm, canon = key
        now = self.db.clock()
        owner_id = session.scalar(sa.select(Owner.id).where(Owner.name == owner))
        if owner_id is None:
            raise OwnerNotFound(f"no owner named {owner!r}")
        # The owner's row lock queues its publishes (PostgreSQL; SQLite's writes are serial
        # already), so two that each fit alone cannot pass the quota together.
        session.execute(sa.select(Owner.id).where(Owner.id == owner_id).with_for_update())
        self._check_quota(session, owner, wheel.size)
        package = self._package(session, owner_id, wheel, norm, now)
        session.add(LedgerEntry(owner_name=owner, normalized_name=norm, canonical_version=canon,
                                sha256=wheel.sha256, recorded_at=now))
        row = Version(package_id=package.id, version=str(v), canonical_version=canon,
                      sha256=wheel.sha256, size=wheel.size, filename=wheel.filename,
                      metadata_json=dict(wheel.metadata), env_ids=list(wheel.env_ids),
                      uploaded_at=now, uploaded_by=uploaded_by, readme_html=readme_html)
        session.add(row)
        session.flush()  # the ledger's primary key decides a race here
        info = _version_info(owner, package, row)
        siblings = session.scalars(sa.select(Version).where(Version.package_id == package.id))
        top = newest(_version_info(owner, package, r) for r in siblings)
        if top is not None and top.version == info.version and wheel.description:
            package.description = wheel.description  # the listing shows the newest summary
        return info

    @staticmethod
    def _package(session: Session, owner_id: int, wheel: WheelDescription, norm: str,
                 now: datetime) -> Package:
        query = sa.select(Package).where(Package.owner_id == owner_id,
                                         Package.normalized_name == norm)
        package = session.scalar(query)
        if package is not None:
            return package
        # Refuse a name confusable with any owner's package (indexed candidates only);
        # on PostgreSQL it takes a lock first, so two look-alike creates queue.
        check_new_package_name(session, wheel.name)
        try:
            with session.begin_nested():
                package = Package(owner_id=owner_id, name=wheel.name, normalized_name=norm,
                                  skeleton=name_skeleton(wheel.name),
                                  description=wheel.description, created_at=now)
                session.add(package)
            return package
        except IntegrityError:  # another publish created it first
            return session.scalars(query).one()

    def yank(self, owner: str, name: str, version: str, reason: str) -> VersionInfo:
        """Hide a version from resolution without deleting it (PEP 592).

        Exact pins still install it, so existing locks keep working; the reason is shown
        to whoever does. Yanking twice keeps the first time and reason.

        Raises:
            InvalidHubInput: an empty reason.
            PackageNotFound, VersionNotFound: nothing to yank.
        """
        reason = reason.strip()
        if not reason:
            raise InvalidHubInput("a yank needs a reason (it is shown to everyone who pins it)")
        with self.db.write() as session:
            package, row = self._find(session, owner, name, version)
            if row.yanked_at is None:
                row.yanked_at, row.yank_reason = self.db.clock(), reason[:2000]
            return _version_info(owner, package, row)

    def delete_version(self, owner: str, name: str, version: str, reason: str) -> None:
        """Remove a version from the hub for good (administrators only: malware, leaks).

        Its row and check results go; its ledger entry stays, marked deleted, so the
        version can never be published again, with any bytes. The blob stays on disk
        until a garbage sweep, so nothing served mid-download breaks.

        Raises:
            PackageNotFound, VersionNotFound: nothing to delete.
        """
        with self.db.write() as session:
            package, row = self._find(session, owner, name, version)
            entry = session.get(LedgerEntry, (owner, package.normalized_name,
                                              row.canonical_version))
            if entry is None:  # pre-ledger data: record it now, before the row goes
                entry = LedgerEntry(owner_name=owner, normalized_name=package.normalized_name,
                                    canonical_version=row.canonical_version,
                                    sha256=row.sha256, recorded_at=self.db.clock())
                session.add(entry)
            entry.deleted_at, entry.delete_reason = self.db.clock(), reason.strip() or "deleted"
            session.execute(sa.delete(CheckResult).where(CheckResult.version_id == row.id))
            session.execute(sa.delete(CheckJob).where(CheckJob.version_id == row.id))
            session.delete(row)

    def record_check(self, owner: str, name: str, version: str, status: str,
                     details: Mapping[str, Any]) -> CheckInfo:
        """Store what the checker measured for a version (bound to its sha256).

        Raises:
            InvalidHubInput: ``status`` is not passed, failed or unchecked.
        """
        if status not in CHECK_STATUSES:
            raise InvalidHubInput(f"check status must be one of {CHECK_STATUSES}")
        with self.db.write() as session:
            _, row = self._find(session, owner, name, version)
            result = CheckResult(version_id=row.id, sha256=row.sha256, status=status,
                                 details=dict(details), checked_at=self.db.clock())
            session.add(result)
            return CheckInfo(row.version, row.sha256, status, dict(details), result.checked_at)

    # ------------------------------------------------------------------ reads
    def get_package(self, owner: str, name: str) -> PackageInfo:
        """The package ``owner/name``.

        Raises:
            PackageNotFound: no such package; the message lists near names.
        """
        with self.db.read() as session:
            package = self._package_row(session, owner, name)
            rows = session.scalars(sa.select(Version)
                                   .where(Version.package_id == package.id)).all()
            return self._package_info(owner, package, rows)

    def list_versions(self, owner: str, name: str) -> list[VersionInfo]:
        """Every version of ``owner/name``, newest first, yanked ones flagged."""
        with self.db.read() as session:
            package = self._package_row(session, owner, name)
            rows = session.scalars(sa.select(Version)
                                   .where(Version.package_id == package.id)).all()
            rows = sorted(rows, key=lambda r: PEP440(r.version), reverse=True)
            return [_version_info(owner, package, r) for r in rows]

    def resolve(self, owner: str, name: str, version: str | None = None) -> VersionInfo:
        """The version a request for ``owner/name[@version]`` installs.

        Args:
            owner: the namespace.
            name: the package name (any normalisation of it).
            version: ``None`` for the newest; an exact version (``1.0``, ``==1.0``) that may
                be yanked; or a specifier (``>=1,<2``) whose newest non-yanked match wins,
                pre-releases only when nothing final matches (PEP 440).

        Raises:
            PackageNotFound: no such package.
            VersionNotFound: nothing matches (or everything that does is yanked).
            InvalidHubInput: ``version`` is neither a version nor a specifier.
        """
        return pick_version(self.list_versions(owner, name), version, f"{owner}/{name}")

    def search(self, text: str, *, limit: int = 50, offset: int = 0) -> list[PackageInfo]:
        """Packages matching ``text``, one page of them (:func:`gymhub.hub.search.search`)."""
        return search(self.db, text, limit=limit, offset=offset)

    def readme_html(self, owner: str, name: str, version: str) -> str | None:
        """The version's README as stored, sanitised HTML.

        ``""`` when it has none; ``None`` when it was published before READMEs were
        rendered at publish time (see :meth:`render_missing_readmes`).
        """
        with self.db.read() as session:
            _, row = self._find(session, owner, name, version)
            return row.readme_html

    def render_missing_readmes(self, *, batch: int = 50) -> int:
        """Render the READMEs of versions published before they were rendered at publish.

        A one-off for databases migrated from schema 0001 (``readme_html`` is ``NULL``);
        ``gymhub hub serve`` runs it in the background at start. Reads each wheel once, in
        batches by id; a damaged blob is skipped (its page says the README is not
        available) and retried on the next run.

        Returns:
            How many versions it rendered.
        """
        done, last = 0, 0
        while True:
            with self.db.read() as session:
                rows = session.execute(
                    sa.select(Version.id, Version.sha256, Version.size, Version.filename)
                    .where(Version.readme_html.is_(None), Version.id > last)
                    .order_by(Version.id).limit(batch)).all()
            if not rows:
                return done
            for vid, sha, size, filename in rows:
                last = vid
                try:
                    html = render_readme(_wheel_readme(self.blobs.read(sha, size), filename))
                except BlobCorrupted:
                    continue
                with self.db.write() as session:
                    session.execute(sa.update(Version).where(
                        Version.id == vid, Version.readme_html.is_(None)).values(
                            readme_html=html))
                done += 1

    def read_file(self, info: VersionInfo) -> bytes:
        """The version's bytes, verified against its recorded size and sha256."""
        return self.blobs.read(info.sha256, info.size)

    def latest_check(self, owner: str, name: str, version: str) -> CheckInfo | None:
        """The newest check result of a version, or ``None`` if never checked."""
        with self.db.read() as session:
            _, row = self._find(session, owner, name, version)
            result = session.scalar(sa.select(CheckResult).where(CheckResult.version_id == row.id)
                                    .order_by(CheckResult.checked_at.desc(),
                                              CheckResult.id.desc()).limit(1))
            if result is None:
                return None
            return CheckInfo(row.version, result.sha256, result.status, dict(result.details),
                             result.checked_at)

    def latest_checks(self, owner: str, name: str) -> dict[str, CheckInfo]:
        """Each checked version's newest check, by version, in one query.

        A package page lists every version with its check; asking :meth:`latest_check`
        once per version cost about a millisecond each (1.2 s at 1,000 versions).
        """
        with self.db.read() as session:
            rows = session.execute(
                sa.select(Version.version, CheckResult)
                .join(CheckResult, CheckResult.version_id == Version.id)
                .join(Package, Version.package_id == Package.id).join(Owner)
                .where(Owner.name == owner, Package.normalized_name == normalize(name))
                .order_by(CheckResult.checked_at, CheckResult.id)).all()
            # Later rows overwrite earlier ones: the newest check of each version wins.
            return {v: CheckInfo(v, c.sha256, c.status, dict(c.details), c.checked_at)
                    for v, c in rows}

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _package_info(owner: str, package: Package, rows: Sequence[Version]) -> PackageInfo:
        top = newest(_version_info(owner, package, r) for r in rows)
        return PackageInfo(owner, package.name, package.normalized_name, package.description,
                           package.created_at, top.version if top else None)

    def _package_row(self, session: Session, owner: str, name: str) -> Package:
        package = session.scalar(
            sa.select(Package).join(Owner)
            .where(Owner.name == owner, Package.normalized_name == normalize(name)))
        if package is not None:
            return package
        wanted = f"{owner}/{normalize(name)}"
        known = [f"{o}/{normalize(n)}" for o, n in suggestion_pool(self.db, owner, name)]
        near = difflib.get_close_matches(wanted, known, n=3, cutoff=0.75)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        raise PackageNotFound(f"no package {owner}/{name} on this hub{hint}")

    def _find(self, session: Session, owner: str, name: str,
              version: str) -> tuple[Package, Version]:
        package = self._package_row(session, owner, name)
        try:
            canon = canonicalize_version(PEP440(version))
        except InvalidVersion:
            raise InvalidHubInput(f"{version!r} is not a PEP 440 version") from None
        row = session.scalar(sa.select(Version).where(Version.package_id == package.id,
                                                      Version.canonical_version == canon))
        if row is None:
            raise VersionNotFound(f"{owner}/{name} has no version {version}")
        return package, row
