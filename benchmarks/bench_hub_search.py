"""Search and "did you mean" at 10,000 packages: paged in SQL against the full scans they replace.

Why this exists: search and 404 suggestions answer anyone, so their cost must not grow
with the hub. The old search selected every match, loaded every match's versions into
Python and sorted there, then cut to ``limit``; the old suggestion read every
``owner/name`` on the hub into ``difflib``. Both baselines are reproduced below exactly
as they were at commit 256fb46 (``HubStore.search`` and ``HubStore._package_row``) and
timed side by side with :func:`gymhub.hub.search.search` (ranked and paged in SQL; one
page of versions read) and :func:`gymhub.hub.search.suggestion_pool` (indexed, bounded),
on the same database in the same run.

The database is SQLite (or PostgreSQL with ``--postgres URL``) filled directly with
``--packages`` packages spread over 100 owners, three versions each, every description
mentioning "environment" (the query that matches everything), so the rows are what a hub
of that size holds without 30,000 wheel uploads.

    python benchmarks/bench_hub_search.py --packages 10000 --repeats 30
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_hub_index import database

from gymhub.hub.db import HubDB, Owner, Package, Version
from gymhub.hub.names import did_you_mean, normalize, skeleton
from gymhub.hub.records import PackageInfo, VersionInfo, newest
from gymhub.hub.search import search, suggestion_pool

WORDS = ["maze", "sudoku", "chess", "wordle", "sql", "code", "tools", "math", "ladder", "poker"]


def fill(db: HubDB, packages: int) -> list[tuple[str, str]]:
    """``packages`` packages over 100 owners, three versions each; their ``(owner, name)``."""
    now = datetime.now(UTC)
    owners = [f"owner{i:03d}" for i in range(100)]
    made: list[tuple[str, str]] = []
    with db.write() as session:
        session.execute(sa.insert(Owner), [{"name": o, "created_at": now} for o in owners])
        ids = {o: i for o, i in session.execute(sa.select(Owner.name, Owner.id))}
        rows = []
        for i in range(packages):
            owner = owners[i % len(owners)]
            name = f"{WORDS[i % len(WORDS)]}-{hashlib.sha256(str(i).encode()).hexdigest()[:8]}"
            made.append((owner, name))
            rows.append({"owner_id": ids[owner], "name": name, "normalized_name": name,
                         "skeleton": skeleton(name), "created_at": now,
                         "description": f"A {WORDS[(i * 7) % len(WORDS)]} environment, #{i}"})
        session.execute(sa.insert(Package), rows)
        pids = session.execute(sa.select(Package.id)).scalars().all()
        session.execute(sa.insert(Version), [
            {"package_id": pid, "version": v, "canonical_version": v, "size": 1000,
             "sha256": hashlib.sha256(f"{pid}-{v}".encode()).hexdigest(),
             "filename": f"p{pid}-{v}-py3-none-any.whl", "metadata_json": {}, "env_ids": [],
             "uploaded_at": now} for pid in pids for v in ("1.0", "1.1", "2.0")])
    return made


# ------------------------------------------------------------------- baselines (256fb46)
def old_search(db: HubDB, text: str, limit: int = 50) -> list[PackageInfo]:
    """``HubStore.search`` before this change: every match and its versions, ranked in Python."""
    needle = text.strip().lower()
    like = "%" + re.sub(r"([\\%_])", r"\\\1", needle) + "%"
    with db.read() as session:
        found = session.execute(
            sa.select(Package, Owner.name).join(Owner).where(sa.or_(
                sa.func.lower(Package.name).like(like, escape="\\"),
                sa.func.lower(Package.description).like(like, escape="\\"),
                sa.func.lower(Owner.name).like(like, escape="\\")))).all()
        ids = [p.id for p, _ in found]
        rows = session.scalars(sa.select(Version)
                               .where(Version.package_id.in_(ids))).all() if ids else []
    by_package: dict[int, list[Version]] = {}
    for r in rows:
        by_package.setdefault(r.package_id, []).append(r)
    norm = normalize(needle)

    def rank(item: tuple[Package, str]) -> tuple[int, str]:
        p, o = item
        tier = 0 if p.normalized_name == norm else 1 if p.normalized_name.startswith(
            norm) else 2
        return tier, f"{o}/{p.normalized_name}"

    out = []
    for p, o in sorted(((p, o) for p, o in found), key=rank)[:limit]:
        top = newest(VersionInfo(o, p.name, r.version, r.sha256, r.size, r.filename, (), {},
                                 r.uploaded_at, r.yanked_at, r.yank_reason)
                     for r in by_package.get(p.id, []))
        out.append(PackageInfo(o, p.name, p.normalized_name, p.description, p.created_at,
                               top.version if top else None))
    return out


def old_suggestions(db: HubDB, owner: str, name: str) -> list[str]:
    """The old not-found hint: every ``owner/name`` on the hub through ``difflib``."""
    wanted = f"{owner}/{normalize(name)}"
    with db.read() as session:
        known = [f"{o}/{n}" for o, n in session.execute(
            sa.select(Owner.name, Package.normalized_name).join(Package))]
    return difflib.get_close_matches(wanted, known, n=3, cutoff=0.75)


def new_suggestions(db: HubDB, owner: str, name: str) -> list[str]:
    pool = suggestion_pool(db, owner, name)
    return did_you_mean(f"{owner}/{name}", [f"{o}/{n}" for o, n in pool])


def _p50(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm the caches
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packages", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--postgres", default="", metavar="URL",
                    help="run on PostgreSQL (a fresh schema there) instead of SQLite")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_hub_search_"))
    with database(args.postgres, tmp) as url:
        db = HubDB(url)
        try:
            _run(db, args)
        finally:
            db.close()


def _run(db: HubDB, args: argparse.Namespace) -> None:
    t = time.perf_counter()
    made = fill(db, args.packages)
    print(f"database: {db.engine.dialect.name}; {args.packages:,} packages, "
          f"{3 * args.packages:,} versions, filled in {time.perf_counter() - t:.1f} s")
    owner, name = made[len(made) // 2]
    queries = {"'environment' (every package)": "environment",
               f"'{WORDS[3]}' (a tenth)": WORDS[3], f"exact name {name!r}": name}
    print(f"\n{'search (first page of 50)':44} {'old p50':>10} {'new p50':>10} {'ratio':>8}")
    ratios = []
    for label, q in queries.items():
        old_ids = [(p.owner, p.name) for p in old_search(db, q)]
        new_ids = [(p.owner, p.name) for p in search(db, q, limit=50)]
        assert len(old_ids) == len(new_ids) and set(old_ids[:1]) == set(new_ids[:1]), label
        old = _p50(lambda q=q: old_search(db, q), args.repeats)
        new = _p50(lambda q=q: search(db, q, limit=51), args.repeats)
        ratios.append(old / new)
        print(f"{label:44} {old * 1e3:8.1f}ms {new * 1e3:8.1f}ms {old / new:7.1f}x")
    typo = name[:-1] + ("x" if name[-1] != "x" else "y")
    suggest = {f"typo in the name ({owner}/{typo})": (owner, typo),
               f"typo in the owner ({owner[:-1]}9/{name})": (owner[:-1] + "9", name)}
    print(f"\n{'did you mean':44} {'old p50':>10} {'new p50':>10} {'ratio':>8}")
    for label, (o, n) in suggest.items():
        assert new_suggestions(db, o, n), label  # the new pool still finds the package
        old = _p50(lambda o=o, n=n: old_suggestions(db, o, n), args.repeats)
        new = _p50(lambda o=o, n=n: new_suggestions(db, o, n), args.repeats)
        print(f"{label:44} {old * 1e3:8.1f}ms {new * 1e3:8.1f}ms {old / new:7.1f}x")
    print(f"\nsearch p50 at {args.packages:,} packages, the query matching everything: "
          f"{ratios[0]:.1f}x faster paged in SQL than the full-scan baseline")


if __name__ == "__main__":
    main()
