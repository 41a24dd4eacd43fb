"""``tool_calls``: the submitted tool calls match the expected ones by BFCL's AST rules.

Spec: ``{"type": "tool_calls", "order": "any"}`` (``"any"``, the default, matches
parallel calls regardless of order; ``"exact"`` keeps it).

``task.gold`` is a list of expected calls, each ``{"name": ..., "arguments": {param:
[acceptable values]}}`` (BFCL's own ``{name: {param: [values]}}`` is read too). An empty
string among a parameter's values marks it optional. The submission is a list of
:class:`~gymhub.types.ToolCall`, of ``{"name", "arguments"}`` mappings (OpenAI's
``{"function": {...}}`` shape too; ``arguments`` may be JSON text), or an assistant
:class:`~gymhub.types.Message` whose ``tool_calls`` are taken.

A call matches when the names are equal, every required parameter is present, no
parameter outside the gold is, and each value equals one acceptable value:

* strings compare case-insensitively with whitespace and ``,./-_*^`` removed;
* an ``int`` is accepted where a ``float`` is expected, never a ``bool`` for a number,
  a ``float`` for an ``int``, or ``"5"`` for ``5`` (that is ``wrong_type``);
* lists compare element by element; a dict value is a pattern like the arguments
  themselves (each key maps to its acceptable values, ``""`` marks it optional), checked
  recursively.

With ``order: any`` the calls are paired by a maximum bipartite matching (a greedy
pairing can miss a perfect one when an early call fits several expected calls). The
score is 1.0 or 0.0 with ``details["reason"]`` one of :data:`REASONS` plus ``call``,
``submitted``, ``param``, ``expected`` and ``got`` where they apply, and ``message`` in
words. A submission that is not a list of tool calls is ``malformed`` (a 0); a gold that
does not follow the format above is the judge's fault: ``Score.error``, never a 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gymhub.types import Message, Score, ToolCall

from .core import SpecReader, VerifyFn, verifier_kind
from .golden import GoldenCase

__all__ = ["REASONS"]

#: Every value ``details["reason"]`` can take.
REASONS: tuple[str, ...] = (
    "match", "missing_call", "extra_call", "wrong_name", "wrong_order", "missing_param",
    "unexpected_param", "wrong_value", "wrong_type", "malformed",
)
_STRIP = re.compile(r"[\s,./\-_*^]")
_SHOW = 120


class _GoldError(ValueError):
    """``task.gold`` is not a list of expected calls in the documented format."""


class _Malformed(ValueError):
    """The submission is not a list of tool calls."""


@dataclass(frozen=True)
class _Expected:
    name: str
    arguments: Mapping[str, list[Any]]


@dataclass(frozen=True)
class _Mismatch:
    """Why one submitted call does not fit one expected call."""

    reason: str
    param: str | None = None
    expected: Any = None
    got: Any = None
    message: str = ""


# ------------------------------------------------------------------ reading gold and calls
def _read_gold(task: Any) -> list[_Expected]:
    gold = getattr(task, "gold", task)
    if isinstance(gold, Mapping) or not isinstance(gold, Sequence) or isinstance(gold, str):
        raise _GoldError(f"task.gold must be a list of expected calls, got {type(gold).__name__}")
    out = []
    for i, item in enumerate(gold):
        if not isinstance(item, Mapping):
            raise _GoldError(f"task.gold[{i}] must be a mapping, got {type(item).__name__}")
        if "name" in item and set(item) <= {"name", "arguments"}:
            name, args = item["name"], item.get("arguments", {})
        elif len(item) == 1 and "arguments" not in item:  # BFCL's: {"fn": {"param": [...]}}
            name, args = next(iter(item.items()))
        else:
            raise _GoldError(f"task.gold[{i}] must be {{'name', 'arguments'}}, got keys "
                             f"{sorted(map(str, item))}")
        if not isinstance(name, str) or not name:
            raise _GoldError(f"task.gold[{i}].name must be a non-empty string")
        _check_pattern(args, f"task.gold[{i}].arguments")
        out.append(_Expected(name, args))
    return out


def _check_pattern(pattern: Any, path: str) -> None:
    """A pattern maps each key to a non-empty list of acceptable values."""
    if not isinstance(pattern, Mapping):
        raise _GoldError(f"{path} must be a mapping of parameter -> [acceptable values]")
    for key, values in pattern.items():
        if not isinstance(key, str):
            raise _GoldError(f"{path} has a non-string key {key!r:.40}")
        if not isinstance(values, list) or not values:
            raise _GoldError(f"{path}.{key} must be a non-empty list of acceptable values, "
                             f"got {values!r:.60}")
        for j, value in enumerate(values):
            _check_value(value, f"{path}.{key}[{j}]")


def _check_value(value: Any, path: str) -> None:
    if isinstance(value, Mapping):
        _check_pattern(value, path)
    elif isinstance(value, list | tuple):
        for j, item in enumerate(value):
            _check_value(item, f"{path}[{j}]")
    elif not (value is None or isinstance(value, str | int | float)):
        raise _GoldError(f"{path} is a {type(value).__name__}, not a JSON value")


def _read_calls(submission: Any) -> list[ToolCall]:
    if isinstance(submission, Message):
        submission = list(submission.tool_calls or ())
    if isinstance(submission, str | bytes | Mapping) or not isinstance(submission, Sequence):
        raise _Malformed(f"submission must be a list of tool calls, got "
                         f"{type(submission).__name__}")
    calls = []
    for i, call in enumerate(submission):
        try:
            if isinstance(call, ToolCall):  # built in code: its arguments are unchecked
                call = {"id": call.id, "name": call.name, "arguments": call.arguments}
            calls.append(ToolCall.from_dict(call))
        except (ValueError, TypeError) as exc:
            raise _Malformed(f"call {i}: {exc}") from exc
        except RecursionError:
            raise _Malformed(f"call {i}: arguments nested too deeply") from None
    return calls


# --------------------------------------------------------------------------- comparing
def _norm(text: str) -> str:
    return _STRIP.sub("", text).casefold()


def _show(value: Any) -> Any:
    """The value for ``details``, or a cut JSON rendering when it is long."""
    try:
        text = json.dumps(value, default=repr, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
        return text if len(text) <= _SHOW else text[: _SHOW - 3] + "..."
    return value if len(text) <= _SHOW else text[: _SHOW - 3] + "..."


def _same_kind(got: Any, want: Any) -> bool:
    """Whether ``got`` has a type that ``want`` accepts (int for float, never bool)."""
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(want, bool) and isinstance(got, bool)
    if isinstance(want, float):
        return isinstance(got, int | float)
    if isinstance(want, int):
        return isinstance(got, int)
    if isinstance(want, str):
        return isinstance(got, str)
    if isinstance(want, list | tuple):
        return isinstance(got, list | tuple)
    if isinstance(want, Mapping):
        return isinstance(got, Mapping)
    return got is None and want is None


def _value_mismatch(got: Any, want: Any, path: str) -> _Mismatch | None:
    """``None`` when ``got`` equals the one acceptable value ``want``."""
    if not _same_kind(got, want):
        return _Mismatch("wrong_type", path, _show(want), _show(got),
                         f"{path}: expected {type(want).__name__}, got {type(got).__name__}")
    if isinstance(want, str):
        ok = _norm(got) == _norm(want)
    elif isinstance(want, list | tuple):
        if len(got) != len(want):
            return _Mismatch("wrong_value", path, _show(want), _show(got),
                             f"{path}: expected {len(want)} items, got {len(got)}")
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            bad = _value_mismatch(g, w, f"{path}[{i}]")
            if bad is not None:
                return bad
        return None
    elif isinstance(want, Mapping):
        return _pattern_mismatch(got, want, path)
    else:
        ok = got == want
    if ok:
        return None
    return _Mismatch("wrong_value", path, _show(want), _show(got),
                     f"{path}: got {_show(got)!r}, expected {_show(want)!r}")


def _one_of(got: Any, values: list[Any], path: str) -> _Mismatch | None:
    """``None`` when ``got`` matches an acceptable value; else the most telling mismatch."""
    found: list[_Mismatch] = []
    for want in values:  # "" too: passing it explicitly is omitting it, as in BFCL
        bad = _value_mismatch(got, want, path)
        if bad is None:
            return None
        found.append(bad)
    real = [i for i, v in enumerate(values) if not (isinstance(v, str) and v == "")]
    keep = real or list(range(len(values)))  # report against the values that say something
    options = [values[i] for i in keep]
    found = [found[i] for i in keep]
    # a value of the right type that is wrong says more than a type error on another option
    typed = [m for m in found if m.reason != "wrong_type"]
    best = typed[0] if typed else found[0]
    if len(options) > 1 and best.param == path:
        return _Mismatch(best.reason, path, [_show(v) for v in options], _show(got),
                         f"{path}: got {_show(got)!r}, expected one of "
                         f"{[_show(v) for v in options]!r}")
    return best


def _pattern_mismatch(got: Any, pattern: Mapping[str, list[Any]], path: str) -> _Mismatch | None:
    if not isinstance(got, Mapping):
        return _Mismatch("wrong_type", path, "object", _show(got),
                         f"{path}: expected an object, got {type(got).__name__}")
    for key in got:
        if key not in pattern:
            return _Mismatch("unexpected_param", _join(path, key), None, _show(got[key]),
                             f"{_join(path, key)} is not an expected parameter "
                             f"(expected: {sorted(pattern)})")
    for key, values in pattern.items():
        if key not in got:
            if "" in values:
                continue
            return _Mismatch("missing_param", _join(path, key), [_show(v) for v in values],
                             None, f"required parameter {_join(path, key)} is missing")
        bad = _one_of(got[key], values, _join(path, key))
        if bad is not None:
            return bad
    return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _call_mismatch(call: ToolCall, expected: _Expected) -> _Mismatch | None:
    if call.name != expected.name:
        return _Mismatch("wrong_name", None, expected.name, _show(call.name),
                         f"called {_show(call.name)!r}, expected {expected.name!r}")
    return _pattern_mismatch(call.arguments, expected.arguments, "")


# --------------------------------------------------------------------------- matching
def _max_matching(fits: list[list[int]], n_right: int) -> list[int | None]:
    """Kuhn's augmenting paths: ``match[left] = right`` for a maximum matching."""
    owner: list[int | None] = [None] * n_right

    def augment(left: int, seen: list[bool]) -> bool:
        for right in fits[left]:
            if seen[right]:
                continue
            seen[right] = True
            current = owner[right]
            if current is None or augment(current, seen):
                owner[right] = left
                return True
        return False

    for start in range(len(fits)):
        augment(start, [False] * n_right)
    match: list[int | None] = [None] * len(fits)
    for right, paired in enumerate(owner):
        if paired is not None:
            match[paired] = right
    return match


def _diagnose(gold: list[_Expected], calls: list[ToolCall], g: int,
              candidates: Sequence[int]) -> dict[str, Any]:
    """Explain why expected call ``g`` has no partner: against the closest candidate."""
    same = [c for c in candidates if calls[c].name == gold[g].name]
    for c in same or candidates:
        bad = _call_mismatch(calls[c], gold[g])
        if bad is not None:
            return _details(bad, g, c)
    return {"reason": "missing_call", "call": g, "expected": gold[g].name,
            "message": f"expected call {g} ({gold[g].name}) was not made"}


def _details(bad: _Mismatch, g: int, c: int) -> dict[str, Any]:
    out: dict[str, Any] = {"reason": bad.reason, "call": g, "submitted": c,
                           "message": f"call {c} vs expected call {g}: {bad.message}"}
    if bad.param is not None:
        out["param"] = bad.param
    out["expected"], out["got"] = bad.expected, bad.got
    return out


def _judge_any(gold: list[_Expected], calls: list[ToolCall]) -> dict[str, Any]:
    fits = [[c for c, call in enumerate(calls) if _call_mismatch(call, exp) is None]
            for exp in gold]
    match = _max_matching(fits, len(calls))
    used = {c for c in match if c is not None}
    free_calls = [c for c in range(len(calls)) if c not in used]
    missing = [g for g, c in enumerate(match) if c is None]
    if not missing and not free_calls:
        return {"reason": "match"}
    if not missing:
        c = free_calls[0]
        return {"reason": "extra_call", "submitted": c, "got": calls[c].name,
                "message": f"call {c} ({calls[c].name}) was not expected "
                           f"({len(calls)} calls made, {len(gold)} expected)"}
    g = missing[0]
    if not free_calls:
        return {"reason": "missing_call", "call": g, "expected": gold[g].name,
                "message": f"expected call {g} ({gold[g].name}) was not made "
                           f"({len(calls)} calls made, {len(gold)} expected)"}
    out = _diagnose(gold, calls, g, free_calls)
    if len(calls) < len(gold):  # one call too few explains more than the closest misfit
        out = {**out, "reason": "missing_call", "cause": out["reason"]}
    elif len(calls) > len(gold):
        out = {**out, "reason": "extra_call", "cause": out["reason"]}
    return out


def _in_order_gap(gold: list[_Expected], calls: list[ToolCall]) -> dict[str, Any] | None:
    """``missing_call`` / ``extra_call`` where every call made fits in order around a gap.

    Calls ``[a, c]`` against ``[a, b, c]`` left ``b`` out: comparing position by position
    would call ``c`` a wrong name for ``b``. Each call is paired with the earliest expected
    call after the last pair that it fits (earliest is never worse for the calls after it).
    """
    short, long_, missing = (calls, gold, True) if len(calls) < len(gold) else (gold, calls, False)
    if len(short) == len(long_):
        return None
    skipped: int | None = None
    j = 0
    for item in short:
        while j < len(long_) and not _fits(item, long_[j], missing):
            skipped = j if skipped is None else skipped
            j += 1
        if j == len(long_):
            return None
        j += 1
    first = skipped if skipped is not None else j  # else: the gap is at the end
    if missing:
        return {"reason": "missing_call", "call": first, "expected": gold[first].name,
                "message": f"expected call {first} ({gold[first].name}) was not made; "
                           "the other calls were made in order"}
    return {"reason": "extra_call", "submitted": first, "got": calls[first].name,
            "message": f"call {first} ({calls[first].name}) was not expected; "
                       "the expected calls were made in order around it"}


def _fits(item: Any, other: Any, item_is_call: bool) -> bool:
    call, exp = (item, other) if item_is_call else (other, item)
    return _call_mismatch(call, exp) is None


def _judge_exact(gold: list[_Expected], calls: list[ToolCall]) -> dict[str, Any]:
    for i, (call, exp) in enumerate(zip(calls, gold, strict=False)):
        bad = _call_mismatch(call, exp)
        if bad is not None:
            if len(calls) == len(gold) and _judge_any(gold, calls)["reason"] == "match":
                return {"reason": "wrong_order", "call": i, "submitted": i,
                        "expected": exp.name, "got": call.name,
                        "message": "the right calls in the wrong order; first differing "
                                   f"position {i}: {bad.message}"}
            gap = _in_order_gap(gold, calls)
            if gap is not None:  # calls left out (or extra ones), the rest in order
                return {**gap, "cause": bad.reason}
            return _details(bad, i, i)
    if len(calls) < len(gold):
        g = len(calls)
        return {"reason": "missing_call", "call": g, "expected": gold[g].name,
                "message": f"expected call {g} ({gold[g].name}) was not made"}
    if len(calls) > len(gold):
        c = len(gold)
        return {"reason": "extra_call", "submitted": c, "got": calls[c].name,
                "message": f"call {c} ({calls[c].name}) was not expected"}
    return {"reason": "match"}


@verifier_kind("tool_calls")
def build_tool_calls(spec: SpecReader) -> VerifyFn:
    """Compile a ``tool_calls`` spec (rules in the module docstring)."""
    judge = _judge_any if spec.choice("order", ["any", "exact"], "any") == "any" else _judge_exact

    def verify(submission: Any, task: Any, state: Any) -> Score:
        try:
            gold = _read_gold(task)
        except _GoldError as exc:
            return Score.failed(f"cannot judge: {exc}")
        try:
            calls = _read_calls(submission)
        except _Malformed as exc:
            return Score(0.0, details={"reason": "malformed", "message": str(exc)})
        details = judge(gold, calls)
        details.setdefault("message", "every expected call was made, and no other")
        return Score(1.0 if details["reason"] == "match" else 0.0, details=details)

    return verify


_WEATHER = {"name": "get_weather",
            "arguments": {"city": ["San Francisco", "SF"], "unit": ["celsius", ""],
                          "days": [3.0]}}
_EMAIL = {"name": "send_email", "arguments": {"to": [["ann@x.org", "bob@x.org"]],
                                              "meta": [{"priority": [1], "tag": ["", "work"]}]}}
_ANY = {"type": "tool_calls"}
_EXACT = {"type": "tool_calls", "order": "exact"}
_EMAIL_CALL = {"name": "send_email",
               "arguments": {"to": ["ann@x.org", "bob@x.org"], "meta": {"priority": 1}}}

GOLDEN = [
    GoldenCase("pass", _ANY, [ToolCall("1", "get_weather", {"city": "san-francisco", "days": 3})],
               gold=[_WEATHER], note="string normalised, optional unit omitted, int for float"),
    GoldenCase("pass", _ANY, [_EMAIL_CALL, {"name": "get_weather",
                                            "arguments": '{"city": "SF", "days": 3.0}'}],
               gold=[_WEATHER, _EMAIL],
               note="parallel calls out of order, JSON-text arguments, nested dict pattern"),
    GoldenCase("fail", _EXACT, [_EMAIL_CALL, {"name": "get_weather",
                                              "arguments": {"city": "SF", "days": 3}}],
               gold=[_WEATHER, _EMAIL], note="order: exact"),
    GoldenCase("fail", _ANY, [{"name": "get_weather", "arguments": {"city": "SF", "days": "3"}}],
               gold=[_WEATHER], note='"3" is not 3.0'),
    GoldenCase("fail", _ANY, [{"name": "get_weather", "arguments": {"city": "SF"}}],
               gold=[_WEATHER], note="a required parameter is missing"),
    GoldenCase("fail", _ANY, [{"name": "get_weather",
                               "arguments": {"city": "SF", "days": 3, "lang": "en"}}],
               gold=[_WEATHER], note="an unexpected parameter"),
    GoldenCase("fail", _ANY, [], gold=[_WEATHER], note="no call at all"),
    GoldenCase("malformed", _ANY, [{"name": "get_weather", "arguments": '{"city": '}],
               gold=[_WEATHER], note="arguments are not valid JSON"),
    GoldenCase("malformed", _ANY, "get_weather(city='SF')", gold=[_WEATHER],
               note="text, not a list of calls"),
    GoldenCase("error", _ANY, [{"name": "get_weather", "arguments": {"city": "SF"}}],
               gold=[{"name": "get_weather", "arguments": {"city": "SF"}}],
               note="gold values must be lists of acceptable values: the judge is broken"),
]
