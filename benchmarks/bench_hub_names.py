"""The look-alike check of a new package name: indexed candidates against a full scan.

Why this exists: every new package is compared with every owner's package names (same
skeleton, or one typo apart). :func:`gymhub.hub.names.check_new_package_name` looks the
skeletons of the name's one-edit neighbours up in the indexed ``packages.skeleton``
column; the baseline, in the same run and on the same database, reads every name and
compares each in Python (what a hub without the index would do). Both must find the same
clashes; the probes alternate between the two.

    python benchmarks/bench_hub_names.py --packages 20000 --probes 100
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

from gymhub.errors import LookalikeName
from gymhub.hub.db import HubDB, Owner, Package, utcnow
from gymhub.hub.names import check_new_package_name, find_lookalike, skeleton

WORDS = ["word", "ladder", "chess", "sql", "code", "tool", "math", "grid", "maze", "logic",
         "bank", "shop", "mail", "trade", "route", "plan", "quiz", "deck", "farm", "city"]


def _names(n: int, rng: random.Random) -> list[str]:
    out: set[str] = set()
    while len(out) < n:
        out.add("-".join(rng.sample(WORDS, 2)) + f"-{rng.randrange(100_000)}")
    return sorted(out)


def _fill(db: HubDB, names: list[str]) -> None:
    with db.write() as s:
        owners = [Owner(name=f"owner{i}", created_at=utcnow()) for i in range(200)]
        s.add_all(owners)
        s.flush()
        s.add_all(Package(owner_id=owners[i % len(owners)].id, name=n, normalized_name=n,
                          skeleton=skeleton(n), description="", created_at=utcnow())
                  for i, n in enumerate(names))


def _indexed(db: HubDB, name: str) -> str | None:
    with db.read() as s:
        try:
            check_new_package_name(s, name)
        except LookalikeName as exc:
            return exc.existing.split("/", 1)[1]
    return None


def _scan(db: HubDB, name: str) -> str | None:
    with db.read() as s:
        every = list(s.scalars(sa.select(Package.name).order_by(Package.normalized_name)))
    return find_lookalike(name, every, typos=True)


def main() -> None:
    """Fill a SQLite hub, then time both checks on the same probes, alternating."""
    p = argparse.ArgumentParser()
    p.add_argument("--packages", type=int, default=20_000)
    p.add_argument("--probes", type=int, default=100)
    args = p.parse_args()
    rng = random.Random(0)
    names = _names(args.packages, rng)
    probes = []
    for i in range(args.probes):  # half typos of existing names, half fresh names
        base = rng.choice(names)
        probes.append(base[:-1] + ("x" if base[-1] != "x" else "y") if i % 2 else
                      f"fresh-{i}-name")
    with tempfile.TemporaryDirectory() as tmp:
        db = HubDB(f"sqlite:///{Path(tmp) / 'hub.db'}")
        _fill(db, names)
        fast, slow = [], []
        for probe in probes:
            t0 = time.perf_counter()
            a = _indexed(db, probe)
            fast.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            b = _scan(db, probe)
            slow.append(time.perf_counter() - t0)
            assert (a is None) == (b is None), (probe, a, b)
        db.close()
    f, s = statistics.median(fast), statistics.median(slow)
    print(f"{args.packages} packages, {args.probes} probes (half one typo from a name), "
          "medians:")
    print(f"  indexed skeletons of the one-edit neighbours: {f * 1000:.2f} ms")
    print(f"  full scan in Python (baseline):               {s * 1000:.2f} ms")
    print(f"  ratio: {s / f:.1f}x faster")


if __name__ == "__main__":
    main()
