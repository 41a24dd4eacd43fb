"""Golden cases for verifier kinds: the evidence that a kind judges what it claims.

An environment's golden cases (:class:`~gymhub.types.VerifierCase`) pin one task's
verifier; these pin a *kind*, independent of any environment. Each kind module lists
``GOLDEN`` cases next to its builder, and :func:`run_golden` replays them. A kind without
a ``pass``, a ``fail`` and a ``malformed`` case is reported as unproven, so a new kind
cannot land without showing that it can say yes, say no, and survive garbage.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gymhub.types import Score, Task

from .core import KINDS, compile

__all__ = ["REQUIRED", "GoldenCase", "GoldenResult", "cases_of", "run_golden"]

#: Expectations every kind must cover with at least one case.
REQUIRED: tuple[str, ...] = ("pass", "fail", "malformed")


@dataclass(frozen=True)
class GoldenCase:
    """One judged example for a verifier kind.

    Attributes:
        expect: ``pass`` (scores 1.0), ``fail`` (scores below 1.0, judged), ``malformed``
            (a submission of the wrong shape: scores 0.0 with a reason, never a crash) or
            ``error`` (the verifier cannot judge, e.g. a timeout: ``Score.error`` is set).
        spec: the verifier spec, ``{"type": kind, ...}``.
        submission: what the agent submitted.
        gold: ``task.gold`` for the case.
        state: the environment state passed to the verifier, if the kind reads it.
        note: what the case demonstrates (shown when it fails).
        fixture: ``task.fixture`` for kinds that read it.
        meta: ``task.meta`` for the case.
        needs: what the case needs from the machine, e.g. ``("sandbox",)`` for code
            that must run in a sandbox backend; a test may skip a case whose needs this
            machine cannot meet (cases that judge without it stay checked).
    """

    expect: Literal["pass", "fail", "malformed", "error"]
    spec: Mapping[str, Any]
    submission: Any
    gold: Any = None
    state: Any = None
    note: str = ""
    fixture: Any = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    needs: tuple[str, ...] = ()

    @property
    def kind(self) -> str:
        """The verifier type the case is for."""
        return str(self.spec["type"])


@dataclass(frozen=True)
class GoldenResult:
    """How one golden case came out; ``ok`` is whether it met its expectation."""

    case: GoldenCase
    score: Score
    ok: bool

    def describe(self) -> str:
        """One line for a report: the verdict, the case and what the verifier said."""
        verdict = "ok" if self.ok else "WRONG"
        note = f" ({self.case.note})" if self.case.note else ""
        got = f"error={self.score.error!r}" if self.score.error else f"value={self.score.value}"
        return f"{verdict}: {self.case.kind} expect={self.case.expect}{note}: {got}"


def _meets(expect: str, score: Score) -> bool:
    if expect == "error":
        return score.error is not None
    if score.error is not None:
        return False
    if expect == "pass":
        return score.value == 1.0
    if expect == "malformed":
        return score.value == 0.0 and bool(score.details.get("reason"))
    return score.value < 1.0


def cases_of(kind: str) -> list[GoldenCase]:
    """The ``GOLDEN`` cases declared by the module that registered ``kind``."""
    compile({"type": "exact_match"})  # make sure the built-in kinds are registered
    entry = KINDS[kind]
    module = importlib.import_module(entry.build.__module__)
    return [c for c in getattr(module, "GOLDEN", []) if c.kind == kind]


def run_golden(cases: Iterable[GoldenCase]) -> list[GoldenResult]:
    """Compile and judge every case; never raises for a case (a crash is a wrong result)."""
    results = []
    for case in cases:
        verifier = compile(case.spec)
        task = Task(id="golden", prompt="", fixture=case.fixture, gold=case.gold, meta=case.meta)
        score = verifier(case.submission, task, case.state)
        results.append(GoldenResult(case, score, _meets(case.expect, score)))
    return results
