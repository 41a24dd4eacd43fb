"""Verifiers built from verifiers: weighted sum, all-of gate, minimum.

If any part could not judge, the combination cannot either: the error propagates
instead of being averaged into a number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gymhub.errors import SpecError
from gymhub.types import Score

from .core import SpecReader, Verifier, VerifyFn, compile_child, verifier_kind
from .golden import GoldenCase

__all__: list[str] = []


def _run_parts(
    parts: Sequence[Verifier], submission: Any, task: Any, state: Any
) -> tuple[list[Score], Score | None]:
    scores = [p(submission, task, state) for p in parts]
    for p, s in zip(parts, scores, strict=True):
        if not s.ok:
            return scores, Score.failed(f"{p.id}: {s.error}")
    return scores, None


def _reason(parts: Sequence[Verifier], scores: Sequence[Score]) -> str:
    """The parts that fell short, each with its own reason: why the whole scored less."""
    short = [f"{i}:{p.name}={s.value:g} ({s.details.get('reason', 'no reason given')})"
             for i, (p, s) in enumerate(zip(parts, scores, strict=True)) if s.value < 1.0]
    return "; ".join(short) if short else f"all {len(parts)} parts scored 1"


def _combine(parts: Sequence[Verifier], fold: Callable[[list[Score]], float]) -> VerifyFn:
    def verify(submission: Any, task: Any, state: Any) -> Score:
        scores, failure = _run_parts(parts, submission, task, state)
        if failure is not None:
            return failure
        components = {
            f"{i}:{p.name}": s.value for i, (p, s) in enumerate(zip(parts, scores, strict=True))
        }
        details: dict[str, Any] = {p.id: s.details for p, s in zip(parts, scores, strict=True)}
        details["reason"] = _reason(parts, scores)
        return Score(value=fold(scores), components=components, details=details)

    return verify


@verifier_kind("weighted_sum")
def build_weighted_sum(spec: SpecReader) -> VerifyFn:
    """``{"type": "weighted_sum", "parts": [{"weight": w, "verifier": {...}}, ...]}``."""
    parts, weights = [], []
    for child in spec.children("parts"):
        weights.append(child.number("weight", lo=0.0))
        parts.append(
            compile_child(SpecReader(child.get("verifier", dict), child._field("verifier")))
        )
        child.finish()
    total = sum(weights)
    if total == 0:
        raise SpecError(spec._field("parts"), "the weights must not all be 0")
    norm = spec.get("normalize", bool, True)
    scale = total if (norm and total > 0) else 1.0
    return _combine(
        parts, lambda s: sum(w * x.value for w, x in zip(weights, s, strict=True)) / scale
    )


@verifier_kind("all_of")
def build_all_of(spec: SpecReader) -> VerifyFn:
    """``{"type": "all_of", "parts": [...], "threshold": 1.0}``: 1.0 only if every part passes."""
    parts = [compile_child(c) for c in spec.children("parts")]
    threshold = spec.number("threshold", 1.0, lo=0.0)
    return _combine(parts, lambda s: 1.0 if all(x.value >= threshold for x in s) else 0.0)


@verifier_kind("min")
def build_min(spec: SpecReader) -> VerifyFn:
    """``{"type": "min", "parts": [...]}``: the weakest part's score."""
    parts = [compile_child(c) for c in spec.children("parts")]
    return _combine(parts, lambda s: min(x.value for x in s))


_PARTS = [{"type": "exact_match"}, {"type": "regex", "pattern": "h[a-z]"}]
_WEIGHTED = {"type": "weighted_sum", "parts": [{"weight": 3, "verifier": _PARTS[0]},
                                               {"weight": 1, "verifier": _PARTS[1]}]}
_BROKEN = {"type": "exact_match"}  # with a gold that is not text: the part crashes

GOLDEN = [
    GoldenCase("pass", _WEIGHTED, "hi", gold="hi"),
    GoldenCase("fail", _WEIGHTED, "ho", gold="hi", note="only the regex part: 0.25"),
    GoldenCase("malformed", _WEIGHTED, None, gold="hi", note="no text: every part says why"),
    GoldenCase("error", _WEIGHTED, "hi", gold=7, note="a part that cannot judge spoils the sum"),
    GoldenCase("pass", {"type": "all_of", "parts": _PARTS}, "hi", gold="hi"),
    GoldenCase("fail", {"type": "all_of", "parts": _PARTS}, "ho", gold="hi",
               note="one part passes, the gate stays shut"),
    GoldenCase("malformed", {"type": "all_of", "parts": _PARTS}, ["hi"], gold="hi"),
    GoldenCase("error", {"type": "all_of", "parts": [_PARTS[1], _BROKEN]}, "hi", gold=None,
               note="the error propagates even though the regex part passed"),
    GoldenCase("pass", {"type": "min", "parts": _PARTS}, "hi", gold="hi"),
    GoldenCase("fail", {"type": "min", "parts": _PARTS}, "hx", gold="hi"),
    GoldenCase("malformed", {"type": "min", "parts": _PARTS}, b"hi", gold="hi",
               note="bytes are not text"),
    GoldenCase("error", {"type": "min", "parts": [_BROKEN]}, "hi", gold=None),
]
