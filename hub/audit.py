"""Is the hub's storage what its database says? Audit it, and sweep what nothing uses.

Publishing writes the blob before the row, so the only inconsistency a crash or a refused
publish can leave is an *unreferenced* blob (or a partial temporary file): harmless, but
it grows. Everything else the audit can find is damage from outside — a blob deleted or
altered on disk, a version whose ledger entry disagrees with it — and must be reported,
never repaired silently: the fix (re-push the same bytes, restore from backup) is a
human's call.

The sweep removes only unreferenced blobs and temporaries older than a grace period,
because a publish in flight holds a freshly written (or freshly touched) blob for the
moment before its row commits.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from gymhub.errors import BlobCorrupted

from .db import LedgerEntry, Owner, Package
from .db import Version as VersionRow
from .store import HubStore

__all__ = ["AuditReport", "audit", "sweep"]

#: An unreferenced blob younger than this may belong to a publish about to commit.
DEFAULT_GRACE_S = 3600.0


@dataclass
class AuditReport:
    """What an audit found. ``ok`` is false only for damage (orphans are not damage).

    Attributes:
        versions: published version rows examined.
        blobs: blobs found in storage.
        missing: ``owner/name version sha256`` of versions whose blob is gone.
        damaged: the same, for blobs of the wrong size or digest.
        ledger_mismatch: versions whose ledger entry names other bytes, or none.
        orphans: sha256 -> age in seconds, of blobs no version references.
    """

    versions: int = 0
    blobs: int = 0
    missing: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    ledger_mismatch: list[str] = field(default_factory=list)
    orphans: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No version points at missing or altered bytes, and the ledger agrees."""
        return not (self.missing or self.damaged or self.ledger_mismatch)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``ok``."""
        return {"ok": self.ok, "versions": self.versions, "blobs": self.blobs,
                "missing": self.missing, "damaged": self.damaged,
                "ledger_mismatch": self.ledger_mismatch,
                "orphans": {k: round(v, 1) for k, v in sorted(self.orphans.items())}}

    def summary(self) -> str:
        """One line per finding, then a verdict."""
        lines = [f"missing blob: {m}" for m in self.missing]
        lines += [f"damaged blob: {d}" for d in self.damaged]
        lines += [f"ledger disagrees: {x}" for x in self.ledger_mismatch]
        lines += [f"unreferenced blob: {sha} ({age:.0f} s old)"
                  for sha, age in sorted(self.orphans.items())]
        verdict = "consistent" if self.ok else "DAMAGED"
        lines.append(f"{verdict}: {self.versions} versions, {self.blobs} blobs, "
                     f"{len(self.orphans)} unreferenced")
        return "\n".join(lines)


def audit(store: HubStore, *, verify: bool = True) -> AuditReport:
    """Compare every version row with its blob and ledger entry, and list orphan blobs.

    Args:
        store: the hub.
        verify: hash every referenced blob (reads all stored bytes); otherwise check sizes.
    """
    report = AuditReport()
    now = time.time()
    stored = {e.sha256: e for e in store.blobs.entries()}
    report.blobs = len(stored)
    referenced: set[str] = set()
    with store.db.read() as session:
        rows = session.execute(
            sa.select(Owner.name, Package.name, Package.normalized_name, VersionRow)
            .select_from(VersionRow).join(Package, VersionRow.package_id == Package.id)
            .join(Owner, Package.owner_id == Owner.id)).all()
        ledger = {(e.owner_name, e.normalized_name, e.canonical_version): e.sha256
                  for e in session.scalars(sa.select(LedgerEntry))}
    for owner, name, normalized, v in rows:
        report.versions += 1
        referenced.add(v.sha256)
        what = f"{owner}/{name} {v.version} {v.sha256}"
        if ledger.get((owner, normalized, v.canonical_version)) != v.sha256:
            report.ledger_mismatch.append(what)
        entry = stored.get(v.sha256)
        if entry is None:
            report.missing.append(what)
        elif entry.size != v.size:
            report.damaged.append(what)
        elif verify:
            try:
                store.blobs.read(v.sha256, v.size)
            except BlobCorrupted:
                report.damaged.append(what)
    report.orphans = {sha: max(0.0, now - e.mtime) for sha, e in stored.items()
                      if sha not in referenced}
    return report


def sweep(store: HubStore, *, grace_s: float = DEFAULT_GRACE_S) -> list[str]:
    """Delete unreferenced blobs and partial writes older than ``grace_s``; their digests.

    The referenced set is read after listing the candidates, so a blob whose row commits
    while the sweep runs is seen as referenced and kept; a blob put again meanwhile (its
    row not yet committed) is young again, and the delete re-checks its age.
    """
    cutoff = time.time() - grace_s
    candidates = [e.sha256 for e in store.blobs.entries() if e.mtime <= cutoff]
    with store.db.read() as session:
        referenced = set(session.scalars(sa.select(VersionRow.sha256)))
    removed = [sha for sha in candidates if sha not in referenced
               and store.blobs.delete(sha, modified_before=cutoff)]
    store.blobs.remove_stale_temporaries(grace_s)
    return removed
