"""code-v0 end to end with the gold policy: episodes per second, beside a baseline.

Measured (issue 5, "a code episode end to end with the gold policy: episodes per
second"): full ``code-v0`` episodes (reset, submit the reference solution, hidden tests
scored by ``unit_tests`` in a fresh sandbox, episode released) per second on one caller.

Baseline, in the same run and interleaved task by task so machine noise hits both alike:
the same episodes, but the hidden tests verified the common way, one sandboxed process
per test (a fresh sandbox call per assert, as harnesses that run each test file in its
own container or process do). Both check the same cases with the same harness code, so
the ratio is the saving of running a suite in one sandbox call with a fork per test.

Run: ``python benchmarks/bench_code_env.py [--tasks N] [--rounds R] [--backend B]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from gymhub.envs import make
from gymhub.envs.code.env import CodeEnv
from gymhub.envs.code.tasks import CodeFixture
from gymhub.sandbox import get_sandbox
from gymhub.types import Message, Score, ToolCall
from gymhub.verifiers import unit_tests as ut


def episode(env: CodeEnv, task_id: str) -> Score:
    """One gold episode through the public API; returns its terminal score."""
    env.reset(options={"task_id": task_id})
    _, _, term, _, info = env.step(env.gold_action())
    assert term
    score = info["score"]
    assert isinstance(score, Score)
    return score


def per_test_episode(env: CodeEnv, task_id: str, sandbox: Any) -> Score:
    """The same episode, but each hidden test verified in its own sandbox call."""
    env.reset(options={"task_id": task_id})
    assert env.task is not None and isinstance(env.task.fixture, CodeFixture)
    fx, code = env.task.fixture, str(env.task.gold)
    steps = ut.split_tests(fx.tests)
    setup = tuple(s for s in steps if s.kind == "setup")
    outcomes = []
    for case in (s for s in steps if s.kind == "case"):
        run = ut.run_suites(sandbox, [ut.Job(code, fx.entry_point, (*setup, case))],
                            timeout_s=env.timeout_s, memory_mb=env.memory_mb)[0]
        outcomes += run.outcomes
    call = ToolCall(id="end", name="no_such_tool", arguments={})
    env.step(Message(role="assistant", content="", tool_calls=(call,)))
    return ut.score_run(ut.SuiteRun(outcomes))


def main() -> None:
    """Measure and print both rates and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30, help="tasks per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backend", default=None)
    args = parser.parse_args()

    env = make("code-v0", backend=args.backend)
    assert isinstance(env, CodeEnv)
    sandbox = get_sandbox(args.backend)
    ids = [t.id for t in env.tasks[: args.tasks]]
    episode(env, ids[0])  # warm-up: sandbox objects, compiled verifier, task cache
    ours: list[float] = []
    base: list[float] = []
    tests = 0
    for _ in range(args.rounds):
        for task_id in ids:
            t0 = time.perf_counter()
            score = episode(env, task_id)
            ours.append(time.perf_counter() - t0)
            assert score.ok and score.value == 1.0, (task_id, score)
            t0 = time.perf_counter()
            score = per_test_episode(env, task_id, sandbox)
            base.append(time.perf_counter() - t0)
            assert score.ok and score.value == 1.0, (task_id, score)
            tests += int(score.details["total"])
    env.close()

    n = len(ours)
    rate, base_rate = n / sum(ours), n / sum(base)
    print(f"code-v0 gold episodes, backend {sandbox.name}, {n} episodes "
          f"({len(ids)} tasks x {args.rounds} rounds, {tests / n:.1f} hidden tests each)")
    print(f"{'':34}{'episodes/s':>12}{'median ms':>12}{'p95 ms':>10}")
    for label, xs, r in (("one sandbox call per episode", ours, rate),
                         ("baseline: one sandbox per test", base, base_rate)):
        ms = sorted(x * 1000 for x in xs)
        print(f"{label:34}{r:12.2f}{statistics.median(ms):12.1f}"
              f"{ms[int(0.95 * (len(ms) - 1))]:10.1f}")
    print(f"ratio (ours / baseline episodes per second): {rate / base_rate:.2f}x")


if __name__ == "__main__":
    main()
