r"""``math_equiv``: the submission's final answer equals ``task.gold`` mathematically.

Spec::

    {"type": "math_equiv", "timeout_s": 5, "float_rounding": 6, "numeric_precision": 15,
     "strict": true, "gold_format": "auto", "max_chars": 20000}

Both sides are text: LaTeX, ``\boxed{}``, fractions, expressions, sets, intervals,
parsed and compared by the ``math-verify`` library (gold first; its comparison is
asymmetric). ``gold_format: auto`` reads a bare gold such as ``2\pi`` or ``[0,1)`` as
LaTeX (math-verify would otherwise find only the ``2`` of ``2\pi`` in plain text);
``raw`` hands the gold over unchanged. ``float_rounding``, ``numeric_precision`` and
``strict`` are math-verify's own switches.

Every parse and comparison runs in a worker process of :mod:`.math_pool`, killed at
``timeout_s``; so the verifier is safe from any thread and against answers SymPy would
chew on for ever. Outcomes:

* equal: 1.0; not equal: 0.0 with both parsed forms in ``details``;
* the submission is not text, has no answer math-verify can find, or is longer than
  ``max_chars`` without a ``\boxed{}`` answer within its last ``max_chars`` (a long
  reasoning is judged from its last ``\boxed{`` on): 0.0 with a reason (``malformed``);
* the gold has no parsable answer, the worker timed out, ran out of memory or died:
  ``Score.error`` (the verifier could not judge; a timeout is never a 0).

Note that math-verify reads plain-text answers with SymPy's ``parse_expr`` (an ``eval``
on a pattern-filtered extract); the worker process contains a crash or a runaway, but it
is not a security sandbox.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from gymhub.types import Score

from . import math_pool
from .core import SpecReader, VerifyFn, verifier_kind
from .golden import GoldenCase

__all__: list[str] = []


_EXPONENT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+\s*")


def _gold(task: Any) -> str:
    gold = getattr(task, "gold", task)
    if isinstance(gold, int | float) and not isinstance(gold, bool):
        gold = repr(gold)
    if not isinstance(gold, str) or not gold.strip():
        raise ValueError(f"task.gold must be non-empty text, got {gold!r:.60}")
    if _EXPONENT.fullmatch(gold):
        # Read as LaTeX, "1e16" is Euler's e times one plus sixteen: write it out.
        return format(Decimal(gold.strip()), "f")
    return gold


@verifier_kind("math_equiv", depends_on=("gymhub.verifiers.math_worker",))
def build_math_equiv(spec: SpecReader) -> VerifyFn:
    """Compile a ``math_equiv`` spec (fields in the module docstring)."""
    timeout_s = spec.number("timeout_s", 5.0, lo=0.05, hi=300.0)
    options = {
        "float_rounding": spec.integer("float_rounding", 6, lo=0),
        "numeric_precision": spec.integer("numeric_precision", 15, lo=1),
        "strict": spec.get("strict", bool, True),
        "gold_format": spec.choice("gold_format", ["auto", "raw"], "auto"),
    }
    max_chars = spec.integer("max_chars", 20_000, lo=1)

    def verify(submission: Any, task: Any, state: Any) -> Score:
        try:
            gold = _gold(task)
        except ValueError as exc:
            return Score.failed(f"cannot judge: {exc}")
        if not isinstance(submission, str):
            return Score(0.0, details={
                "reason": f"malformed: submission is {type(submission).__name__}, not text"})
        if len(submission) > max_chars:
            # A long chain of reasoning is judged by its final answer; only an answer that
            # is itself over the cap (or no boxed answer at all) is refused.
            at = submission.rfind("\\boxed{")
            if at == -1 or len(submission) - at > max_chars:
                return Score(0.0, details={"reason": f"malformed: submission is "
                                                     f"{len(submission):,} characters; the "
                                                     f"limit is {max_chars:,}"})
            submission = submission[at:]
        try:
            reply = math_pool.pool().request(
                {"gold": gold, "answer": submission, **options}, timeout_s)
        except math_pool.WorkerFailed as exc:
            return Score.failed(f"math worker: {exc}")
        status = reply.get("status")
        parsed: dict[str, Any] = {k: reply[k] for k in ("gold", "answer") if k in reply}
        if status == "match":
            return Score(1.0, details={"reason": "equivalent", **parsed})
        if status == "mismatch":
            return Score(0.0, details={"reason": "not equivalent", **parsed})
        if status == "answer_unparsed":
            return Score(0.0, details={"reason": "malformed: no answer could be parsed "
                                                 "from the submission", **parsed})
        if status == "gold_unparsed":
            return Score.failed(f"cannot judge: task.gold {gold!r:.80} has no parsable answer")
        return Score.failed(f"math worker: {reply.get('message', reply)}")

    return verify


_M = {"type": "math_equiv"}
GOLDEN = [
    GoldenCase("pass", _M, "So the answer is $\\boxed{\\frac{2}{4}}$.", gold="\\frac{1}{2}",
               note="a fraction in \\boxed{}"),
    GoldenCase("pass", _M, "$(x+1)^2$", gold="x^2+2x+1", note="an expression, expanded"),
    GoldenCase("pass", _M, "$\\{3, 2, 1\\}$", gold="\\{1,2,3\\}", note="a set, reordered"),
    GoldenCase("pass", _M, "$[0,1)$", gold="[0, 1)", note="an interval"),
    GoldenCase("fail", _M, "$(0, 1]$", gold="[0, 1)", note="the other half-open interval"),
    GoldenCase("fail", _M, "\\boxed{2}", gold="2\\pi", note="bare gold read as LaTeX"),
    GoldenCase("malformed", _M, "I could not solve it.", gold="3", note="no answer at all"),
    GoldenCase("malformed", _M, 3, gold="3", note="not text"),
    GoldenCase("error", _M, "3", gold="\\boxed{}", note="the gold has no answer"),
    GoldenCase("error", {"type": "math_equiv", "timeout_s": 1.0}, "$9^{9^{9^{9}}}$", gold="1",
               note="a runaway comparison is killed at its deadline: an error, not a 0"),
]
