"""Finding packages: ranked, paged search and bounded "did you mean" candidates.

Both answer anonymous requests, so neither may cost more as the hub grows: search ranks
and pages in SQL and then reads the versions of one page of packages only (the version
it shows as latest), and suggestions read a bounded set of candidates through indexes
(``packages.skeleton``, the owner's packages, the owners' unique names), never every
package. The old search loaded every match and every match's versions into Python to
sort them; ``benchmarks/bench_hub_search.py`` measures the two side by side.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.orm import InstrumentedAttribute

from gymhub.hub.db import HubDB, Owner, Package, Version
from gymhub.hub.names import did_you_mean, normalize, skeleton
from gymhub.hub.records import PackageInfo, VersionInfo, newest

__all__ = ["SUGGESTION_POOL", "search", "suggest_owners", "suggestion_pool"]

#: The most candidates one suggestion query reads.
SUGGESTION_POOL = 200


def _escape_like(text: str) -> str:
    return re.sub(r"([\\%_])", r"\\\1", text)


def _starts_with(column: InstrumentedAttribute[str], ch: str) -> sa.ColumnElement[bool]:
    """``column`` starts with the letter or digit ``ch``, as an index range.

    A range (not ``LIKE``, which PostgreSQL's default indexes cannot serve) whose upper end
    is the next letter or digit, so it holds under any collation, not only ``C``.
    """
    if ch == "z":
        return column >= ch
    return sa.and_(column >= ch, column < ("a" if ch == "9" else chr(ord(ch) + 1)))


def _latest(owner: str, package: Package, rows: list[Version]) -> str | None:
    top = newest(VersionInfo(owner, package.name, r.version, r.sha256, r.size, r.filename, (),
                             {}, r.uploaded_at, r.yanked_at, r.yank_reason) for r in rows)
    return top.version if top else None


def search(db: HubDB, text: str, *, limit: int = 50, offset: int = 0) -> list[PackageInfo]:
    """Packages whose owner, name or description contains ``text`` (case-insensitive).

    Exact name matches come first, then name prefixes, then the rest, by owner and name.
    Ranked and paged in SQL (``limit``/``offset``): ask for ``limit + 1`` to learn whether
    another page follows. An empty ``text`` matches everything, still one page at a time.
    """
    needle = text.strip().lower()
    like, norm = f"%{_escape_like(needle)}%", normalize(needle)
    tier = sa.case((Package.normalized_name == norm, 0),
                   (Package.normalized_name.like(f"{_escape_like(norm)}%", escape="\\"), 1),
                   else_=2)
    with db.read() as session:
        found = session.execute(
            sa.select(Package, Owner.name).join(Owner).where(sa.or_(
                sa.func.lower(Package.name).like(like, escape="\\"),
                sa.func.lower(Package.description).like(like, escape="\\"),
                sa.func.lower(Owner.name).like(like, escape="\\")))
            .order_by(tier, Owner.name, Package.normalized_name)
            .limit(max(limit, 0)).offset(max(offset, 0))).all()
        ids = [p.id for p, _ in found]
        rows = session.scalars(sa.select(Version).where(Version.package_id.in_(ids))
                               ).all() if ids else []
    by_package: dict[int, list[Version]] = {}
    for r in rows:
        by_package.setdefault(r.package_id, []).append(r)
    return [PackageInfo(o, p.name, p.normalized_name, p.description, p.created_at,
                        _latest(o, p, by_package.get(p.id, []))) for p, o in found]


def suggestion_pool(db: HubDB, owner: str, name: str) -> list[tuple[str, str]]:
    """``(owner, name)`` of the packages a "did you mean" for ``owner/name`` may offer.

    At most ``2 * SUGGESTION_POOL`` rows, through indexes: the packages of any owner whose
    look-alike skeleton equals the name's (a mistyped owner, ``l``/``1`` swaps), and the
    owner's packages whose skeleton starts with the same character (a mistyped name).
    """
    key = skeleton(name)
    base = sa.select(Owner.name, Package.name).join(Owner)
    with db.read() as session:
        pool = [(o, n) for o, n in session.execute(base.where(Package.skeleton == key)
                                                   .limit(SUGGESTION_POOL))]
        if key[:1].isalnum() and key[:1].isascii():
            pool += [(o, n) for o, n in session.execute(
                base.where(Owner.name == owner, _starts_with(Package.skeleton, key[0]))
                .order_by(Package.skeleton).limit(SUGGESTION_POOL))]
    return list(dict.fromkeys(pool))


def suggest_owners(db: HubDB, owner: str) -> list[str]:
    """Owners to suggest for an unknown ``owner``, from a bounded, indexed read.

    The candidates are the owners sharing its first character (a range of the owners'
    unique index), at most ``SUGGESTION_POOL`` of them.
    """
    first = owner[:1].lower()
    if not (first.isalnum() and first.isascii()):
        return []
    with db.read() as session:
        pool = session.scalars(
            sa.select(Owner.name).where(_starts_with(Owner.name, first))
            .order_by(Owner.name).limit(SUGGESTION_POOL)).all()
    return did_you_mean(owner, pool)
