"""The hub's check queue, kept in the database so that no published version is forgotten.

The queue used to be an in-memory ``queue.Queue``: a full queue recorded the version
``unchecked`` on the spot, and a restart dropped every pending check. Now each version
waiting for the hub's check is one row of ``check_jobs`` (:class:`~gymhub.hub.db.CheckJob`),
written right after the publish commits, so the queue has no bound but the database's,
survives restarts, and is shared by every worker process on the same database.

Life of a job:

1. :func:`enqueue` (or :func:`add_job` inside a caller's own transaction) inserts the row;
   one row per version at most, so a repeated submit is a no-op.
2. A worker :func:`claim` s it: it sets ``claimed_at``/``claimed_by`` with a guarded
   ``UPDATE ... WHERE id = :id AND (claimed_at IS NULL OR claimed_at < :stale)`` and
   keeps the job only when exactly one row changed. On PostgreSQL the second of two
   concurrent updates re-evaluates that condition on the row the first one wrote and
   changes nothing; on SQLite the write transaction is ``BEGIN IMMEDIATE``, so claims are
   serial anyway. Either way two workers never hold one job.
3. The worker records the result (:meth:`HubStore.record_check`) and :func:`finish` es the
   job, deleting the row. A worker that dies between claim and finish leaves a claim that
   turns stale after the check's deadline and is claimed again (``attempts`` counts the
   claims, so a version that keeps killing its worker can be given up on).

**Fairness.** Plain FIFO would let one publisher's burst of a hundred versions delay
everyone else by a hundred checks. :func:`claim` serves owners round-robin instead: among
owners with a claimable job, the one served least recently goes first (never served
beats everything), and within an owner the oldest job. "Served" is the newest of the
owner's recorded check results and of its jobs' claims, both already in the database,
so the order holds across workers and restarts without extra state. The cost is an
aggregate over the check results of the owners that are waiting (index on
``check_results.version_id``), once per claim, which is small next to a check that takes
seconds; a ``owners.last_checked_at`` column would make it one indexed read if a hub
ever has owners with very many checked versions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from packaging.utils import canonicalize_version
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gymhub.hub.db import CheckJob, CheckResult, HubDB, Owner, Package, Version
from gymhub.hub.names import normalize
from gymhub.hub.records import parse_version

__all__ = [
    "QueuedJob",
    "add_job",
    "claim",
    "dequeue",
    "enqueue",
    "enqueue_unchecked",
    "finish",
    "pending_count",
    "queued_versions",
    "remove_jobs",
]

log = logging.getLogger("gymhub.hub")

_CLAIM_ATTEMPTS = 5


@dataclass(frozen=True)
class QueuedJob:
    """A claimed job: which version to check, and how many times it has been claimed.

    Attributes:
        id: the ``check_jobs`` row.
        owner, name, version: the version, as :func:`gymhub.hub.checker.check_version`
            takes it (the package's display name, the version's PEP 440 form).
        attempts: claims so far, this one included; above 1 means earlier workers died.
    """

    id: int
    owner: str
    name: str
    version: str
    attempts: int


def add_job(session: Session, version_id: int, owner_id: int, now: datetime) -> None:
    """Queue ``version_id`` inside the caller's transaction (e.g. the publish's own).

    Idempotent: a version already queued keeps its place (its ``enqueued_at``).
    """
    if session.scalar(sa.select(CheckJob.id).where(CheckJob.version_id == version_id)):
        return
    try:
        with session.begin_nested():
            session.add(CheckJob(version_id=version_id, owner_id=owner_id, enqueued_at=now,
                                 claimed_at=None, claimed_by=None, attempts=0))
    except IntegrityError:  # queued by a concurrent transaction since the select
        pass


def _version_row(session: Session, owner: str, name: str,
                 version: str) -> tuple[int, int] | None:
    """``(version id, owner id)`` of ``owner/name version``, or ``None``."""
    canon = canonicalize_version(parse_version(version))
    row = session.execute(
        sa.select(Version.id, Package.owner_id).join(Package, Version.package_id == Package.id)
        .join(Owner, Package.owner_id == Owner.id)
        .where(Owner.name == owner, Package.normalized_name == normalize(name),
               Version.canonical_version == canon)).first()
    return None if row is None else (row[0], row[1])


def enqueue(db: HubDB, owner: str, name: str, version: str) -> bool:
    """Queue a published version for the hub's check, in its own short transaction.

    Called right after the publish commits; there is no bound, so a version is never
    turned away (nor recorded ``unchecked``) for lack of room.

    Returns:
        ``True`` when the version is queued (now or already); ``False`` when there is no
        such version (deleted meanwhile, or never published).

    Raises:
        InvalidHubInput: ``version`` is not a PEP 440 version.
    """
    with db.write() as session:
        found = _version_row(session, owner, name, version)
        if found is None:
            return False
        add_job(session, found[0], found[1], db.clock())
    return True


def enqueue_unchecked(db: HubDB) -> int:
    """Queue every version that has neither a check result nor a job; returns how many.

    A worker runs this when it starts: a publish whose process died between its commit
    and :func:`enqueue`, or versions published while the hub ran without a checker, are
    then checked too, so every published version ends up with a result.
    """
    has_result = sa.exists().where(CheckResult.version_id == Version.id)
    has_job = sa.exists().where(CheckJob.version_id == Version.id)
    with db.write() as session:
        rows = session.execute(
            sa.select(Version.id, Package.owner_id).join(Package, Version.package_id == Package.id)
            .where(~has_result, ~has_job).order_by(Version.uploaded_at, Version.id)).all()
        now = db.clock()
        for version_id, owner_id in rows:
            add_job(session, version_id, owner_id, now)
    return len(rows)


def _rowcount(result: sa.Result[Any]) -> int:
    """Rows an UPDATE or DELETE changed (what decides a claim)."""
    return int(cast("sa.CursorResult[Any]", result).rowcount)


def _claimable(cutoff: datetime) -> sa.ColumnElement[bool]:
    return sa.or_(CheckJob.claimed_at.is_(None), CheckJob.claimed_at < cutoff)


def _next_job_id(session: Session, cutoff: datetime) -> int | None:
    """The job the round-robin order serves next (see the module docstring), or ``None``."""
    claimable = _claimable(cutoff)
    waiting: list[tuple[int, datetime, int]] = [(o, t, i) for o, t, i in session.execute(
        sa.select(CheckJob.owner_id, sa.func.min(CheckJob.enqueued_at), sa.func.min(CheckJob.id))
        .where(claimable).group_by(CheckJob.owner_id))]
    if not waiting:
        return None
    owners = sa.select(CheckJob.owner_id).where(claimable).distinct()
    served: dict[int, datetime] = {}
    results = session.execute(
        sa.select(Package.owner_id, sa.func.max(CheckResult.checked_at))
        .join(Version, CheckResult.version_id == Version.id)
        .join(Package, Version.package_id == Package.id)
        .where(Package.owner_id.in_(owners)).group_by(Package.owner_id))
    claims = session.execute(
        sa.select(CheckJob.owner_id, sa.func.max(CheckJob.claimed_at))
        .where(CheckJob.claimed_at.is_not(None), CheckJob.owner_id.in_(owners))
        .group_by(CheckJob.owner_id))
    for owner_id, moment in [*results, *claims]:
        if moment is not None and (owner_id not in served or moment > served[owner_id]):
            served[owner_id] = moment

    def order(row: tuple[int, datetime, int]) -> tuple[bool, datetime, datetime, int]:
        owner_id, oldest, first_id = row
        last = served.get(owner_id)
        return last is not None, last or oldest, oldest, first_id

    owner_id = min(waiting, key=order)[0]
    return session.scalar(
        sa.select(CheckJob.id).where(CheckJob.owner_id == owner_id, claimable)
        .order_by(CheckJob.enqueued_at, CheckJob.id).limit(1))


def claim(db: HubDB, worker: str, *, stale_after_s: float) -> QueuedJob | None:
    """Take the next job for ``worker``, or ``None`` when nothing is claimable.

    Args:
        db: the hub database.
        worker: the claimant's name (host, pid, a random part), kept in ``claimed_by``.
        stale_after_s: a claim older than this belongs to a dead worker and is taken
            over; use the check's deadline plus a margin, never less than a check lasts.

    Returns:
        The job, its ``attempts`` already counting this claim.
    """
    for _ in range(_CLAIM_ATTEMPTS):
        now = db.clock()
        cutoff = now - timedelta(seconds=stale_after_s)
        with db.write() as session:
            job_id = _next_job_id(session, cutoff)
            if job_id is None:
                return None
            taken = session.execute(
                sa.update(CheckJob)
                .where(CheckJob.id == job_id, _claimable(cutoff))
                .values(claimed_at=now, claimed_by=worker[:64], attempts=CheckJob.attempts + 1)
                .execution_options(synchronize_session=False))
            if _rowcount(taken) != 1:
                continue  # another worker got it between our select and update (PostgreSQL)
            row = session.execute(
                sa.select(Owner.name, Package.name, Version.version, CheckJob.attempts)
                .select_from(CheckJob).join(Version, CheckJob.version_id == Version.id)
                .join(Package, Version.package_id == Package.id)
                .join(Owner, Package.owner_id == Owner.id)
                .where(CheckJob.id == job_id)).one()
            return QueuedJob(job_id, row[0], row[1], row[2], row[3])
    return None  # lost every race: the caller polls again


def finish(db: HubDB, job_id: int, worker: str) -> bool:
    """Delete a job once its result is recorded; ``False`` if it was no longer ``worker``'s.

    The delete is guarded by ``claimed_by``: when a check outlived its deadline and
    another worker took the job over, that worker's claim is left alone.
    """
    with db.write() as session:
        gone = session.execute(
            sa.delete(CheckJob).where(CheckJob.id == job_id, CheckJob.claimed_by == worker[:64])
            .execution_options(synchronize_session=False))
        return _rowcount(gone) == 1


def remove_jobs(session: Session, version_ids: Iterable[int]) -> int:
    """Drop the jobs of versions about to be deleted, inside the deleting transaction.

    ``check_jobs.version_id`` is a foreign key, so a queued version cannot be deleted
    while its job exists.
    """
    ids = list(version_ids)
    if not ids:
        return 0
    gone = session.execute(sa.delete(CheckJob).where(CheckJob.version_id.in_(ids))
                           .execution_options(synchronize_session=False))
    return _rowcount(gone)


def dequeue(db: HubDB, owner: str, name: str, version: str) -> bool:
    """Drop a version's job (before an administrator deletes the version); ``True`` if any.

    A worker already checking it finds the version gone when it records the result,
    which it tolerates.
    """
    with db.write() as session:
        found = _version_row(session, owner, name, version)
        return found is not None and remove_jobs(session, [found[0]]) > 0


def pending_count(db: HubDB) -> int:
    """Jobs not yet finished, claimed or not (0 means every queued check is recorded)."""
    with db.read() as session:
        return int(session.scalar(sa.select(sa.func.count()).select_from(CheckJob)) or 0)


def queued_versions(db: HubDB, owner: str, name: str) -> set[str]:
    """The versions of ``owner/name`` waiting for (or under) the hub's check.

    Pages and the API show these as ``queued`` rather than "never checked". The strings
    are the versions' display form (:attr:`VersionInfo.version`), so they match
    :meth:`HubStore.list_versions` and :meth:`HubStore.latest_checks` keys.
    """
    with db.read() as session:
        return set(session.scalars(
            sa.select(Version.version).join(CheckJob, CheckJob.version_id == Version.id)
            .join(Package, Version.package_id == Package.id)
            .join(Owner, Package.owner_id == Owner.id)
            .where(Owner.name == owner, Package.normalized_name == normalize(name))))
