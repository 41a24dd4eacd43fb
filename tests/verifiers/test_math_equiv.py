"""math_equiv: verdicts, errors that are not zeros, deadlines, threads and the worker pool."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gymhub.errors import SpecError
from gymhub.types import Score, Task
from gymhub.verifiers import compile, math_pool
from gymhub.verifiers.math_pool import MathPool, WorkerFailed, WorkerTimeout

MATH = compile({"type": "math_equiv"})
RUNAWAY = "$9^{9^{9^{9}}}$"  # SymPy works on this for far longer than any test waits


def score(submission: Any, gold: Any, verifier: Any = MATH) -> Score:
    return verifier(submission, Task(id="t", prompt="", gold=gold))


def request(gold: str, answer: str) -> dict[str, Any]:
    return {"gold": gold, "answer": answer}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("spec,field", [
    ({"type": "math_equiv", "timeout_s": 0}, "timeout_s"),
    ({"type": "math_equiv", "timeout_s": "5"}, "timeout_s"),
    ({"type": "math_equiv", "gold_format": "latex"}, "gold_format"),
    ({"type": "math_equiv", "float_rounding": -1}, "float_rounding"),
    ({"type": "math_equiv", "timeout": 5}, "timeout"),
])
def test_bad_specs_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as info:
        compile(spec)
    assert info.value.field == field


@pytest.mark.parametrize("answer,gold,value", [
    ("The answer is $\\boxed{\\frac{1}{2}}$", "0.5", 1.0),
    ("$\\boxed{1/2}$", "\\frac{1}{2}", 1.0),
    ("$\\frac{\\sqrt{8}}{2}$", "\\sqrt{2}", 1.0),
    ("$x^2 - 1$", "(x-1)(x+1)", 1.0),
    ("$\\{1, 2\\} \\cup \\{3\\}$", "\\{1,2,3\\}", 1.0),
    ("$(-\\infty, 2]$", "(-\\infty, 2]", 1.0),
    ("$\\boxed{4\\sqrt{2}}$", "4", 0.0),
    ("$(1, 2)$", "[1, 2]", 0.0),
    ("$0.3333$", "\\frac{1}{3}", 0.0),
    ("$\\boxed{12}$", 12, 1.0),  # a numeric gold is read as its text
])
def test_verdicts(answer: str, gold: Any, value: float) -> None:
    s = score(answer, gold)
    assert s.error is None, s.error
    assert s.value == value, s.details


@pytest.mark.parametrize("submission", ["", "I don't know.", None, ["1/2"]])
def test_unparsable_or_non_text_submission_is_zero_with_reason(submission: Any) -> None:
    s = score(submission, "1/2")
    assert s.error is None and s.value == 0.0 and s.details["reason"].startswith("malformed")


def test_over_long_submission_is_refused_on_the_host() -> None:
    v = compile({"type": "math_equiv", "max_chars": 100})
    assert "limit" in score("1" * 101, "1", v).details["reason"]


@pytest.mark.parametrize("gold", ["\\boxed{}", "", None, ["1"]])
def test_unparsable_gold_is_an_error(gold: Any) -> None:
    s = score("$1$", gold)
    assert s.error is not None and "cannot judge" in s.error


def test_timeout_is_an_error_even_off_the_main_thread() -> None:
    v = compile({"type": "math_equiv", "timeout_s": 0.5})
    out: dict[str, Score] = {}

    def work() -> None:  # math-verify's own SIGALRM timeout would raise here
        out["runaway"] = score(RUNAWAY, "1", v)
        out["after"] = score("$\\boxed{2}$", "2", v)

    t0 = time.monotonic()
    thread = threading.Thread(target=work)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    runaway = out["runaway"]
    assert runaway.error is not None and "0.5 s" in runaway.error and runaway.value == 0.0
    assert out["after"].error is None and out["after"].value == 1.0  # a fresh worker served it
    assert time.monotonic() - t0 < 30


@pytest.fixture(scope="module")
def pool1() -> Iterator[MathPool]:
    """One single-worker pool for the tests below: each leaves it usable for the next."""
    pool = MathPool(size=1)
    yield pool
    pool.shutdown()


def test_pool_is_warm_and_reused(pool1: MathPool) -> None:
    t0 = time.monotonic()
    pool1.request(request("1", "1"), 30)
    cold = time.monotonic() - t0
    (pid,) = pool1.pids()
    started = pool1.started
    t0 = time.monotonic()
    for _ in range(5):
        assert pool1.request(request("2", "$2$"), 30)["status"] == "match"
    warm = (time.monotonic() - t0) / 5
    assert pool1.pids() == [pid] and pool1.started == started
    assert warm < cold


def test_deadline_kills_and_reaps_the_worker(pool1: MathPool) -> None:
    pool1.warm()
    (pid,) = pool1.pids()
    started, killed = pool1.started, pool1.killed
    with pytest.raises(WorkerTimeout):
        pool1.request(request("1", RUNAWAY), 0.3)
    assert not alive(pid) and pool1.killed == killed + 1 and pid not in pool1.pids()
    deadline = time.monotonic() + 30  # a replacement starts in the background
    while not pool1.pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool1.started == started + 1 and len(pool1.pids()) == 1
    assert pool1.request(request("1", "1"), 30)["status"] == "match"
    assert pool1.started == started + 1


def test_worker_dying_mid_request_is_an_error_and_the_pool_recovers(pool1: MathPool) -> None:
    pool1.warm()
    (pid,) = pool1.pids()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            pool1.request(request("1", RUNAWAY), 60)
        except WorkerFailed as exc:
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    time.sleep(0.3)
    os.kill(pid, 9)
    thread.join(30)
    assert len(errors) == 1 and "died" in str(errors[0])
    assert pool1.request(request("1", "1"), 30)["status"] == "match"


def test_worker_that_died_while_idle_is_replaced_silently(pool1: MathPool) -> None:
    pool1.warm()
    (pid,) = pool1.pids()
    os.kill(pid, 9)
    time.sleep(0.1)
    assert pool1.request(request("1", "1"), 30)["status"] == "match"
    assert pool1.pids() != [pid]


def test_threads_share_a_small_pool_and_shutdown_leaves_no_process() -> None:
    pool = MathPool(size=2)
    try:
        answers = ["$\\frac{1}{2}$", "$0.25$"] * 4
        with ThreadPoolExecutor(8) as ex:
            replies = list(ex.map(lambda a: pool.request(request("\\frac{1}{2}", a), 30),
                                  answers))
        assert [r["status"] for r in replies] == ["match", "mismatch"] * 4
        pids = pool.pids()
        assert pool.started <= 2 and 1 <= len(pids) <= 2 and all(alive(p) for p in pids)
    finally:
        pool.shutdown()
    assert not any(alive(p) for p in pids)
    with pytest.raises(WorkerFailed):
        pool.request(request("1", "1"), 5)


def test_process_pool_is_replaced_after_shutdown() -> None:
    first = math_pool.pool()
    math_pool.shutdown()
    assert math_pool.pool() is not first
    assert score("$1$", "1").value == 1.0


def test_a_worker_that_cannot_start_is_an_error(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Any) -> None:
    monkeypatch.setattr(math_pool, "_WORKER", tmp_path / "missing_worker.py")
    pool = MathPool(size=1)
    try:
        with pytest.raises(WorkerFailed, match="did not start"):
            pool.request(request("1", "1"), 5)
        assert pool.pids() == [] and pool.started == 0
    finally:
        pool.shutdown()


def test_a_long_reasoning_is_judged_by_its_final_boxed_answer() -> None:
    v = compile({"type": "math_equiv", "max_chars": 100})
    assert score("Let me think. " * 50 + "So $\\boxed{\\frac{1}{2}}$.", "1/2", v).value == 1.0
    assert "limit" in score("\\boxed{1} " + "x" * 200, "1", v).details["reason"]
