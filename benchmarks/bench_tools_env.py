"""tools-v0 per-episode costs against sql-v0's, and reference-policy scores by category.

Figures (issue 11):

* reset median: tools-v0 (restore the world image into the env's connection, build
  the user and the prompt) beside sql-v0 (restore a fixture image, build the prompt),
  interleaved in the same run so machine noise hits both alike;
* step median: a tools-v0 read (``search_products``), write (``transfer_funds``, one
  transaction) and terminal step (``finish``: snapshot, ``state_match``, policies)
  beside sql-v0's ``run_sql`` and ``submit`` (execution match on three databases).
  Each sample is one step on a freshly reset episode; the reset is not timed;
* the mean score of the gold, noop, refuse and random policies per task category
  over every task (the do-nothing and refuse-everything rows are the anti-hacking
  evidence: tau2-bench's airline domain gives a do-nothing agent 1.0 on 23 of 50).

Run: ``python benchmarks/bench_tools_env.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from gymhub.envs import run_episode
from gymhub.envs.core import TextEnv
from gymhub.envs.sql.env import SqlEnv
from gymhub.envs.tools.env import ToolsEnv
from gymhub.envs.tools.tasks import CATEGORIES
from gymhub.types import Message, ToolCall


def call(name: str, **arguments: Any) -> Message:
    return Message(role="assistant", content="", tool_calls=(ToolCall("b", name, arguments),))


def reset_samples(env: TextEnv, task_id: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        env.reset(options={"task_id": task_id})
        out.append((time.perf_counter() - t0) * 1000)
    return out


def step_samples(env: TextEnv, task_id: str, prefix: list[Message], action: Message,
                 n: int) -> list[float]:
    """Milliseconds of ``action`` played after ``prefix`` on a fresh episode, ``n`` times."""
    out = []
    for _ in range(n):
        env.reset(options={"task_id": task_id})
        for m in prefix:
            env.step(m)
        t0 = time.perf_counter()
        env.step(action)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def paired(a: Callable[[int], list[float]], b: Callable[[int], list[float]], n: int,
           rounds: int = 5) -> tuple[list[float], list[float]]:
    xs: list[float] = []
    ys: list[float] = []
    for _ in range(rounds):
        xs += a(n // rounds)
        ys += b(n // rounds)
    return xs, ys


def row(name: str, xs: list[float], base_name: str, ys: list[float]) -> None:
    mx, my = statistics.median(xs), statistics.median(ys)
    print(f"{name:<30} median {mx:7.3f} ms | {base_name:<30} median {my:7.3f} ms | "
          f"ratio {mx / my:6.2f}x")


def policy_table(env: ToolsEnv) -> None:
    rng = random.Random(0)
    kinds: dict[str, Callable[[ToolsEnv], Message]] = {
        "gold": lambda e: e.gold_action(),
        "noop": lambda e: e.noop_action(),
        "refuse": lambda e: e.refuse_action(),
        "random": lambda e: e.random_action(rng),
    }
    scores: dict[tuple[str, str], list[float]] = defaultdict(list)
    errors = 0
    t0 = time.perf_counter()
    for kind, act in kinds.items():
        for task in env.tasks:
            out = run_episode(env, lambda e, o, i, act=act: act(e), task_id=task.id)
            if out.value is None:
                errors += 1
                continue
            scores[(kind, task.meta["category"])].append(out.value)
            scores[(kind, "ALL")].append(out.value)
    seconds = time.perf_counter() - t0
    counts = {c: sum(1 for t in env.tasks if t.meta["category"] == c) for c in CATEGORIES}
    print(f"\nmean score by task category ({len(env.tasks)} tasks x 4 policies, "
          f"{seconds:.1f} s, {errors} errors; random = seeded valid random calls)")
    print(f"{'category':<12} {'tasks':>5} " + " ".join(f"{k:>7}" for k in kinds))
    for cat in (*CATEGORIES, "ALL"):
        n = len(env.tasks) if cat == "ALL" else counts[cat]
        cells = " ".join(f"{statistics.fmean(scores[(k, cat)]):7.3f}" for k in kinds)
        print(f"{cat:<12} {n:>5} {cells}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples")
    args = ap.parse_args()
    n = 200 if args.quick else 1000
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core

    t0 = time.perf_counter()
    tools = ToolsEnv()
    print(f"tools-v0: {len(tools.tasks)} tasks generated and gold-run in "
          f"{time.perf_counter() - t0:.2f} s")
    sql = SqlEnv()
    join = next(t for t in sql.tasks if t.meta.get("category", "").startswith("join"))
    gold_sql = sql.gold_query(join)
    sql.verify(gold_sql, join)  # warm sql-v0's gold cache, as in a long-running server

    transfer = tools.task_by_id("transfer-00")
    program = transfer.gold["program"]
    prefix = [call(program[0]["name"], **program[0]["arguments"])]
    write = call(program[1]["name"], **program[1]["arguments"])
    finish = call(program[2]["name"], **program[2]["arguments"])
    read = call("search_products", query="Desk")

    xs, ys = paired(lambda k: reset_samples(tools, transfer.id, k),
                    lambda k: reset_samples(sql, join.id, k), n)
    row("reset", xs, "sql-v0 reset", ys)
    sql_step = call("run_sql", query=gold_sql)
    xs, ys = paired(lambda k: step_samples(tools, transfer.id, [], read, k),
                    lambda k: step_samples(sql, join.id, [], sql_step, k), n)
    row("step: read (search_products)", xs, "sql-v0 step: run_sql", ys)
    ws, ys2 = paired(lambda k: step_samples(tools, transfer.id, prefix, write, k),
                     lambda k: step_samples(sql, join.id, [], sql_step, k), n)
    row("step: write (transfer_funds)", ws, "sql-v0 step: run_sql", ys2)
    submit = call("submit", query=gold_sql)
    fs, ss = paired(lambda k: step_samples(tools, transfer.id, [*prefix, write], finish, k),
                    lambda k: step_samples(sql, join.id, [], submit, k), n // 2)
    row("step: finish (scored)", fs, "sql-v0 step: submit (scored)", ss)

    policy_table(tools)
    tools.close()
    sql.close()


if __name__ == "__main__":
    main()
