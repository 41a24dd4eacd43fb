"""String verifiers: exact match and regular expressions against ``task.gold``."""

from __future__ import annotations

import re
from typing import Any

from gymhub.errors import SpecError
from gymhub.types import Score

from .core import SpecReader, VerifyFn, verifier_kind
from .golden import GoldenCase

__all__: list[str] = []


def _gold(task: Any) -> str:
    gold = getattr(task, "gold", task)
    if not isinstance(gold, str):
        raise TypeError(f"task.gold must be a string, got {type(gold).__name__}")
    return gold


@verifier_kind("exact_match")
def build_exact(spec: SpecReader) -> VerifyFn:
    """``{"type": "exact_match", "strip": true, "case_sensitive": true}``."""
    strip = spec.get("strip", bool, True)
    case = spec.get("case_sensitive", bool, True)

    def norm(s: str) -> str:
        s = s.strip() if strip else s
        return s if case else s.casefold()

    def verify(submission: Any, task: Any, state: Any) -> Score:
        if not isinstance(submission, str):
            return Score(
                0.0, details={"reason": f"submission is {type(submission).__name__}, not text"}
            )
        ok = norm(submission) == norm(_gold(task))
        return Score(1.0 if ok else 0.0, details={"reason": "match" if ok else "mismatch"})

    return verify


@verifier_kind("regex")
def build_regex(spec: SpecReader) -> VerifyFn:
    """``{"type": "regex", "pattern": "...", "fullmatch": true, "max_chars": 10000}``.

    The pattern is compiled once; submissions over ``max_chars`` score 0 with a reason.
    """
    pattern = spec.get("pattern", str)
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise SpecError(spec._field("pattern"), f"invalid regular expression: {exc}") from exc
    full = spec.get("fullmatch", bool, True)
    # Python's re has no timeout. The pattern is the environment author's (trusted; a
    # catastrophic pattern is their bug), the submission is not: capping its length keeps
    # a sane pattern's matching time bounded.
    max_chars = spec.integer("max_chars", 10_000, lo=1)

    def verify(submission: Any, task: Any, state: Any) -> Score:
        if isinstance(submission, str) and len(submission) > max_chars:
            reason = f"submission is {len(submission):,} characters; the limit is {max_chars:,}"
            return Score(0.0, details={"reason": reason})
        if not isinstance(submission, str):
            return Score(
                0.0, details={"reason": f"submission is {type(submission).__name__}, not text"}
            )
        m = rx.fullmatch(submission.strip()) if full else rx.search(submission)
        return Score(1.0 if m else 0.0, details={"reason": "match" if m else "no match"})

    return verify


GOLDEN = [
    GoldenCase("pass", {"type": "exact_match"}, " hi\n", gold="hi", note="whitespace stripped"),
    GoldenCase("fail", {"type": "exact_match"}, "Hi", gold="hi", note="case-sensitive"),
    GoldenCase("pass", {"type": "exact_match", "case_sensitive": False}, "HI", gold="hi"),
    GoldenCase("malformed", {"type": "exact_match"}, {"answer": "hi"}, gold="hi",
               note="a mapping is not text"),
    GoldenCase("error", {"type": "exact_match"}, "hi", gold=None,
               note="a task without a text gold cannot be judged"),
    GoldenCase("pass", {"type": "regex", "pattern": r"\d+"}, " 42 ", note="fullmatch, stripped"),
    GoldenCase("fail", {"type": "regex", "pattern": r"\d+"}, "42 apples"),
    GoldenCase("malformed", {"type": "regex", "pattern": r"\d+"}, None, note="no text at all"),
    GoldenCase("malformed", {"type": "regex", "pattern": r"\d+", "max_chars": 8}, "1" * 9,
               note="over the length cap"),
]
