"""How a ``tools-v0`` episode is scored: state × policy × answer × ending.

* ``state``: the end state equals the gold end state (``state_match`` on natural keys,
  generated ids ignored, so collateral changes count as extra or changed rows);
* ``policy``: no company policy broken and no value invented (see :mod:`.policies`);
* ``answer``: the typed answer is right, where the task asks a question (numbers: every
  number in the answer must be the gold one, so listing candidates does not pass;
  ids: exactly the gold set);
* ``ending``: the episode ended the expected way (finish, refuse or handoff).

Each component is reported in ``Score.components`` and explained in ``details``.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from typing import Any

from gymhub.types import Score
from gymhub.verifiers.core import Verifier, compile_cached

from .session import Session
from .world import Snapshot, World, WorldRef

__all__ = ["STATE_SPEC", "check_answer", "initial_snapshot", "score_session", "state_verifier"]

STATE_SPEC: Mapping[str, Any] = {
    "type": "state_match",
    "gold": "state",
    "keys": {
        "teams": ["name"], "people": ["email"], "meetings": ["title", "start"],
        "outbox": ["to_addr", "subject"], "products": ["sku"],
        "orders": ["customer", "sku", "created_at"], "accounts": ["number"],
        "transfers": ["from_account", "to_account", "amount", "memo"],
        "approvals": ["from_account", "to_account", "amount"],
        "tickets": ["customer", "subject"], "handoffs": ["requester", "reason"],
    },
    "ignore": {"*": ["id"], "handoffs": ["summary"]},
}

_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")
# Identifiers (ACC-0012, SKU-107), dates and clock times are not quantities.
_NOT_QUANTITY = re.compile(
    r"\b[A-Za-z]{2,}-[0-9A-Za-z]+\b|\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}:\d{2}\b")
_ID = re.compile(r"\b[A-Z]{3}-[0-9A-F]{3,6}\b")


def state_verifier() -> Verifier:
    """The compiled ``state_match`` verifier tools-v0 uses (shared, compiled once)."""
    return compile_cached(STATE_SPEC, name="tools_state")


@functools.lru_cache(maxsize=64)
def _initial(ref: WorldRef) -> tuple[tuple[str, tuple[tuple[tuple[str, Any], ...], ...]], ...]:
    world = World()
    try:
        world.load(ref)
        snap = world.snapshot()
    finally:
        world.close()
    return tuple((t, tuple(tuple(r.items()) for r in rows)) for t, rows in snap.items())


def initial_snapshot(ref: WorldRef) -> Snapshot:
    """A fresh copy of world ``ref``'s snapshot (cached per process)."""
    return {t: [dict(r) for r in rows] for t, rows in _initial(ref)}


def check_answer(expected: Mapping[str, Any] | None, ending: tuple[str, str] | None
                 ) -> tuple[bool, dict[str, Any]]:
    """Whether the final answer is right; ``expected=None`` means no question was asked."""
    if expected is None:
        return True, {"reason": "no question asked"}
    if ending is None or ending[0] != "finish":
        return False, {"reason": "the question was never answered with finish(answer)"}
    text, kind, gold = ending[1], expected["type"], expected["value"]
    if kind == "number":
        found = {float(m.replace(",", "").rstrip(","))
                 for m in _NUMBER.findall(_NOT_QUANTITY.sub(" ", text))}
        ok = bool(found) and all(math.isclose(x, float(gold), abs_tol=0.005) for x in found)
        reason = "right" if ok else (f"expected {gold}, found numbers {sorted(found)}" if found
                                     else f"expected {gold}, found no number")
        return ok, {"reason": reason, "expected": gold, "found": sorted(found)}
    if kind == "ids":
        got = set(_ID.findall(text.upper()))
        ok = got == set(gold)
        return ok, {"reason": "right" if ok else "wrong set of ids", "expected": sorted(gold),
                    "found": sorted(got)}
    return False, {"reason": f"unknown answer type {kind!r}"}


def score_session(session: Session) -> Score:
    """Score the episode that ``session`` holds (call once it has ended)."""
    task = session.task
    gold = task.gold
    after = session.world.snapshot()
    verifier = state_verifier()
    state = verifier(None, task, after)
    if not state.ok:
        return Score.failed(f"state_match could not judge: {state.error}", verifier.id)
    # Every write was checked as it happened (Session.run), so the end state holds no
    # broken rule those checks did not already see.
    broken = session.broken + session.invented
    answer_ok, answer = check_answer(gold.get("answer"), session.ending)
    got = session.ending[0] if session.ending else None
    components = {"state": state.value, "policy": 0.0 if broken else 1.0,
                  "answer": 1.0 if answer_ok else 0.0,
                  "ending": 1.0 if got == gold["ending"] else 0.0}
    value = math.prod(components.values())
    failed = [k for k, v in components.items() if v < 1.0]
    if broken:
        reason = "policy broken: " + ", ".join(sorted({v["rule"] for v in broken}))
    elif failed:
        reason = "wrong " + ", ".join(failed)
    else:
        reason = "solved"
    details = {
        "reason": reason,
        "state": state.details,
        "policy": {"violations": broken},
        "answer": answer,
        "ending": {"expected": gold["ending"], "got": got},
    }
    return Score(value, components, details=details, verifier=verifier.id)
