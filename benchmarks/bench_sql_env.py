"""sql-v0 per-episode costs, each printed beside a baseline measured in the same run.

Figures (issue 1): reset (fixture copy) median, step median for a typical ``run_sql``,
verification median with a warm gold cache, gold-policy episodes/s on one core, and how
reset grows with fixture size (~1k, 10k, 100k rows). Baselines, interleaved with the
measured runs so machine noise hits both alike:

* reset: the common alternative, copying the fixture file per episode and connecting
  to the copy (what a file-per-episode design such as SkyRL-SQL's pays at least);
* step: the same query on a raw, unguarded sqlite3 connection (the guard's overhead);
* verification: the same comparison without the gold cache (gold re-run every time,
  as SkyRL-SQL does);
* episodes/s: ``echo-v0``, the cheapest possible episode (the framework's floor).

Run: ``python benchmarks/bench_sql_env.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gymhub.envs import make, run_episode
from gymhub.envs.sql.env import DEFAULT_VERIFIER, SqlEnv
from gymhub.envs.sql.fixtures import FixtureRef, sqlite_image, table_row_counts
from gymhub.sandbox.sql import SqliteDatabase
from gymhub.types import Message, ToolCall
from gymhub.verifiers import compile as compile_verifier


def sample(fn: Callable[[], object], n: int) -> list[float]:
    """Milliseconds per call over ``n`` calls after a short warm-up."""
    for _ in range(min(20, n)):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def paired(a: Callable[[], object], b: Callable[[], object], n: int, rounds: int = 5):
    """Interleave ``rounds`` blocks of a and b; return their pooled samples."""
    xs: list[float] = []
    ys: list[float] = []
    for _ in range(rounds):
        xs += sample(a, n // rounds)
        ys += sample(b, n // rounds)
    return xs, ys


def p(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1] if len(xs) > 2 else xs[0]


def row(name: str, xs: list[float], base_name: str, ys: list[float]) -> None:
    mx, my = statistics.median(xs), statistics.median(ys)
    print(f"{name:<34} median {mx:8.3f} ms  p95 {p(xs, 95):8.3f} ms | {base_name:<30} "
          f"median {my:8.3f} ms | ratio {mx / my:6.3f}x")


def file_copy_reset(image: bytes, tmp: Path) -> Callable[[], object]:
    src = tmp / "fixture.sqlite"
    src.write_bytes(image)

    def run() -> None:
        dst = tmp / "episode.sqlite"
        dst.write_bytes(src.read_bytes())
        con = sqlite3.connect(dst)
        con.execute("SELECT 1").fetchall()
        con.close()

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples")
    args = ap.parse_args()
    n = 300 if args.quick else 2000
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the issue asks

    env = SqlEnv()
    join_task = next(t for t in env.tasks if t.meta.get("category", "").startswith("join"))
    image = sqlite_image(join_task.fixture)
    rows = sum(table_row_counts(join_task.fixture).values())
    print(f"sql-v0: {len(env.tasks)} tasks; fixture {join_task.fixture.key} is "
          f"{len(image) / 1024:.0f} KiB, {rows} rows\n")

    with tempfile.TemporaryDirectory() as d:
        xs, ys = paired(lambda: env.reset(options={"task_id": join_task.id}),
                        file_copy_reset(image, Path(d)), n)
    row("reset (episode copy + prompt)", xs, "file copy + connect", ys)

    env.reset(options={"task_id": join_task.id})
    gold = env.gold_query(join_task)
    raw = sqlite3.connect(":memory:")
    raw.deserialize(image)
    act = Message(role="assistant", content="",
                  tool_calls=(ToolCall("b", "run_sql", {"query": gold}),))

    def step() -> None:
        env.step(act)
        env.turn = 0  # keep the episode open for the benchmark

    xs, ys = paired(step, lambda: raw.execute(gold).fetchall(), n)
    row("step run_sql (guard + render)", xs, "raw sqlite3 fetchall", ys)

    env.verify(gold, join_task)  # warm the gold cache

    sources = env.sources(join_task)

    def verify_uncached() -> None:
        # the same verifier, freshly compiled, so its gold cache is empty: gold re-runs
        compile_verifier(DEFAULT_VERIFIER)(gold, join_task, sources)

    xs, ys = paired(lambda: env.verify(gold, join_task), verify_uncached, n // 2)
    row("verify, warm gold cache (3 dbs)", xs, "no cache: gold re-run", ys)

    tasks = env.tasks[: (100 if args.quick else len(env.tasks))]
    t0 = time.perf_counter()
    for t in tasks:
        run_episode(env, task_id=t.id)
    sql_eps = len(tasks) / (time.perf_counter() - t0)
    echo = make("echo-v0")
    t0 = time.perf_counter()
    for t in echo.tasks:
        run_episode(echo, task_id=t.id)
    echo_eps = len(echo.tasks) / (time.perf_counter() - t0)
    print(f"{'gold-policy episodes/s (1 core)':<34} {sql_eps:10.0f} /s          | "
          f"{'echo-v0 (framework floor)':<30} {echo_eps:8.0f} /s | "
          f"ratio {sql_eps / echo_eps:6.3f}x")

    print("\nreset vs fixture size (private in-memory copy; ratio to the smallest):")
    base = None
    for scale in (1, 10, 100) if not args.quick else (1, 10):
        ref = FixtureRef(join_task.fixture.schema, 0, scale)
        img = sqlite_image(ref)
        rows = sum(table_row_counts(ref).values())
        ms = statistics.median(sample(lambda img=img: SqliteDatabase.from_image(img).close(),
                                      max(50, n // (4 * scale))))
        with tempfile.TemporaryDirectory() as d:
            fc = statistics.median(sample(file_copy_reset(img, Path(d)), max(20, n // (8 * scale))))
        base = base or ms
        print(f"  scale {scale:>3}: {rows:>7} rows, {len(img) / 1024:8.0f} KiB  restore median "
              f"{ms:8.3f} ms ({ms / base:6.1f}x)  | file copy + connect {fc:8.3f} ms "
              f"(ratio {ms / fc:5.2f}x)")


if __name__ == "__main__":
    main()
