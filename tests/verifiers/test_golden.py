"""Every registered verifier kind proves itself on its golden cases."""

from __future__ import annotations

import pytest

from gymhub.sandbox import available_backends
from gymhub.verifiers import KINDS, compile
from gymhub.verifiers.golden import REQUIRED, GoldenCase, cases_of, run_golden

compile({"type": "exact_match"})  # registers the built-in kinds before parametrising
# Kinds registered by tests themselves (test_core's "test_crashes") are not built-ins.
BUILTIN = sorted(k for k in KINDS if KINDS[k].build.__module__.startswith("gymhub.verifiers."))


def _available(case: GoldenCase) -> bool:
    return "sandbox" not in case.needs or bool(available_backends())


def test_every_builtin_kind_is_covered() -> None:
    expected = {"exact_match", "regex", "weighted_sum", "all_of", "min", "sql_match",
                "unit_tests", "json_schema", "tool_calls", "math_equiv"}
    assert expected <= set(BUILTIN)


@pytest.mark.parametrize("kind", BUILTIN)
def test_kind_declares_required_expectations(kind: str) -> None:
    declared = {c.expect for c in cases_of(kind)}
    missing = [e for e in REQUIRED if e not in declared]
    assert not missing, f"{kind} declares no golden case for {missing}"


@pytest.mark.parametrize("kind", BUILTIN)
def test_kind_meets_every_golden_case(kind: str) -> None:
    cases = [c for c in cases_of(kind) if _available(c)]
    skipped = len(cases_of(kind)) - len(cases)
    results = run_golden(cases)
    wrong = [r.describe() + f" details={r.score.details}" for r in results if not r.ok]
    assert not wrong, "\n".join(wrong)
    if skipped:
        pytest.skip(f"{skipped} case(s) need a sandbox backend; the other {len(cases)} passed")


def test_a_verifier_that_says_yes_to_everything_is_caught() -> None:
    """The golden check itself has teeth: a lenient kind fails its fail cases."""
    fail = GoldenCase("fail", {"type": "regex", "pattern": ".*"}, "anything")
    assert not run_golden([fail])[0].ok
