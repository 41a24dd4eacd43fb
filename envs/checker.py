"""``check_env``: the acceptance gate every environment passes before it is served or published.

It runs Gymnasium's own checker, then what Gymnasium cannot know about a text
environment: seeded determinism of whole episodes, the gold policy scoring 1.0, the
noop policy *not* scoring 1.0 where gold does, evidence that the scoring tells right
from wrong, hostile actions answered with
messages rather than exceptions, and a typed error for a step after the end. Every
check runs even if an earlier one fails, so one report shows all.

An agent that does nothing must not pass. In 23 of tau2-bench's 50 airline tasks it did
(the goal state was the start state), and every trained agent inherited the free
points. The check plays :meth:`~gymhub.envs.TextEnv.noop_action` on the tasks the gold
check plays and fails on any task that both noop and gold pass (a task gold fails is
already reported by the gold check). A noop action that does not end the episode at
once is noted, not failed: the episode then runs out of turns, which scores what a
silent agent scores.

Evidence that the scoring tells right from wrong comes in one of two forms:

* An environment with a standalone verifier (it overrides ``verify``) declares golden
  cases for it (pass, fail, malformed — none of them an error), and they must hold.
  Having written a verifier, its author can say what it must accept and refuse.
* An environment whose tools score it (a ``@tool`` returns ``Final(text, Score(...))``,
  no ``verify``) has no verifier to feed cases to, and asking for cases anyway would
  fail the first environment a new author writes for a reason that is not a fault.
  The checker derives the evidence from the episodes instead: for each checked task it
  replays the gold actions of a *different* task (one whose gold actions differ), and
  that episode must end with a valid score below 1.0. Together with the gold policy
  scoring 1.0, that catches what golden cases catch in a tool-scored environment: a
  score that does not depend on the answer (always 1.0, or always 0.0), and a scoring
  that errors. An environment with neither cases nor two tasks whose gold differs
  cannot show either, and fails.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from gymhub.errors import EnvCheckFailed, EpisodeFinished
from gymhub.types import Message, Score, ToolCall

from .core import MAX_ACTION_CHARS, TextEnv, VerifierCase
from .policies import noop_policy
from .rollout import Policy, gold_policy, run_episode
from .tasks import Task

__all__ = ["CheckReport", "CheckResult", "bad_actions", "check_env"]


@dataclass
class CheckResult:
    """One named check and its outcome."""

    name: str
    ok: bool
    message: str = ""
    seconds: float = 0.0


@dataclass
class CheckReport:
    """All checks run on one environment."""

    env: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return all(r.ok for r in self.results)

    def summary(self) -> str:
        """A human-readable table of results."""
        lines = [f"check_env {self.env}: {'PASS' if self.ok else 'FAIL'}"]
        for r in self.results:
            mark = "ok  " if r.ok else "FAIL"
            note = f": {r.message}" if r.message else ""
            lines.append(f"  [{mark}] {r.name} ({r.seconds * 1000:.0f} ms){note}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"env": self.env, "ok": self.ok, "results": [vars(r) for r in self.results]}


def bad_actions(env: TextEnv) -> list[tuple[str, Any]]:
    """Hostile or malformed actions every environment must answer without raising."""
    names = [s.name for s in env.tool_specs()]
    acts: list[tuple[str, Any]] = [
        ("user-role message", Message(role="user", content="hi")),
        ("not a message", 42),
        ("garbage dict", {"foo": [1, 2]}),
        ("empty text", Message(role="assistant", content="")),
        ("oversized content", Message(role="assistant", content="x" * (MAX_ACTION_CHARS + 1))),
        ("lone surrogate text", Message(role="assistant", content="bad \udcff text")),
    ]
    if names:
        call = Message(
            role="assistant",
            content="",
            tool_calls=(ToolCall(id="c1", name="no_such_tool_" + names[0], arguments={}),),
        )
        acts.append(("unknown tool", call))
        many = tuple(ToolCall(id=f"c{i}", name=names[0], arguments={}) for i in range(50))
        acts.append(("fifty tool calls", Message(role="assistant", content="", tool_calls=many)))
        for n in names:
            for label, args in (
                ("unknown argument", {"__bogus__": 1}),
                ("wrong types", {"query": 5, "table": [], "sql": {}, "code": 1.5}),
                ("surrogate argument", {"query": "SELECT '\udcff'", "table": "\udcff"}),
            ):
                msg = Message(
                    role="assistant",
                    content="",
                    tool_calls=(ToolCall(id="c1", name=n, arguments=args),),
                )
                acts.append((f"{n}: {label}", msg))
    return acts


def check_env(
    env: TextEnv,
    *,
    gold_tasks: int | None = 25,
    seeds: Sequence[int] = (0, 1, 2),
    verifier_tasks: int = 5,
    raise_on_failure: bool = True,
) -> CheckReport:
    """Check an environment against gymhub's contract.

    Args:
        env: the environment (unwrapped).
        gold_tasks: how many tasks the gold policy must solve (``None``: all of them).
        seeds: seeds for the determinism check.
        verifier_tasks: tasks whose golden verifier cases are checked (or, for an
            environment scored by its tools, that play another task's gold actions).
        raise_on_failure: raise :class:`EnvCheckFailed` if any check fails.

    Returns:
        The report of every check.
    """
    spec = getattr(env, "env_spec", None)
    report = CheckReport(env=getattr(spec, "id", type(env).__name__))

    def run(name: str, fn: Callable[[], str | None]) -> None:
        t0 = time.perf_counter()
        try:
            note = fn() or ""
            report.results.append(CheckResult(name, True, note, time.perf_counter() - t0))
        except Exception as exc:
            report.results.append(
                CheckResult(name, False, f"{type(exc).__name__}: {exc}", time.perf_counter() - t0)
            )

    run("gymnasium.check_env", lambda: _gymnasium(env))
    run("seeded determinism", lambda: _determinism(env, seeds))
    run("gold policy scores 1.0", lambda: _gold(env, gold_tasks))
    run("noop policy does not pass", lambda: _noop(env, gold_tasks))
    if getattr(type(env), "expected_scores", TextEnv.expected_scores) \
            is not TextEnv.expected_scores:  # only an environment that states bounds
        run("reference policies within their stated bounds",
            lambda: _stated_bounds(env, gold_tasks))
    run("verifier golden cases", lambda: _scoring_evidence(env, verifier_tasks))
    run("bad actions answered", lambda: _bad_actions(env))
    run("step after end is a typed error", lambda: _after_end(env))
    env.close()
    if raise_on_failure and not report.ok:
        raise EnvCheckFailed(report.summary(), report)
    return report


def _gymnasium(env: TextEnv) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gymnasium_check_env(env, skip_render_check=True)
    notes = sorted({str(w.message)[:120] for w in caught})
    return f"{len(notes)} warning(s): " + " | ".join(notes) if notes else ""


def _transcript(env: TextEnv, seed: int) -> tuple[list[Message], float | None]:
    env.action_space.seed(seed)
    probe = env.action_space.sample()
    obs, info = env.reset(seed=seed)
    seen = list(obs)
    obs, _, term, trunc, info = env.step(probe)
    seen += obs
    while not (term or trunc):
        obs, _, term, trunc, info = env.step(gold_policy(env, obs, info))
        seen += obs
    score = info.get("score")
    return seen, score.value if isinstance(score, Score) else None


def _determinism(env: TextEnv, seeds: Sequence[int]) -> str:
    for seed in seeds:
        first, second = _transcript(env, seed), _transcript(env, seed)
        if first != second:
            raise AssertionError(f"seed {seed}: two runs with the same actions differ")
    return f"{len(seeds)} seeds"


def _gold(env: TextEnv, limit: int | None) -> str:
    tasks = env.tasks if limit is None else env.tasks[:limit]
    failures = []
    for task in tasks:
        out = run_episode(env, gold_policy, task_id=task.id)
        s = out.score
        if s is None or not s.ok or s.value < 1.0 - 1e-9:
            failures.append(f"{task.id}: {s.error or s.details if s else 'no score'}")
    if failures:
        raise AssertionError(f"{len(failures)}/{len(tasks)} failed, e.g. {failures[0]}")
    return f"{len(tasks)} tasks"


def _stated_bounds(env: TextEnv, limit: int | None) -> str:
    """``refuse`` and ``random`` score within what the environment says they must."""
    from .policies import policy_named

    tasks = env.tasks if limit is None else env.tasks[:limit]
    wrong, checked = [], 0
    for name in ("refuse", "random"):
        policy = policy_named(name, seed=0)
        for task in tasks:
            bounds = env.expected_scores(name, task)
            if bounds is None:
                continue
            checked += 1
            value = run_episode(env, policy, task_id=task.id).value
            if value is None or not bounds[0] - 1e-9 <= value <= bounds[1] + 1e-9:
                wrong.append(f"{name} on {task.id}: {value} not in [{bounds[0]}, {bounds[1]}]")
    if wrong:
        raise AssertionError(f"{len(wrong)}/{checked} episodes outside their bounds "
                             f"(e.g. {wrong[0]})")
    return f"{checked} episodes"


def _noop(env: TextEnv, limit: int | None) -> str:
    tasks = env.tasks if limit is None else env.tasks[:limit]
    passed, slow, unjudged = [], 0, []
    for task in tasks:
        out = run_episode(env, noop_policy, task_id=task.id)
        slow += out.turns > 1
        if out.score is not None and not out.score.ok:
            unjudged.append(f"{task.id}: {out.score.error}")
        if out.value is not None and out.value >= 1.0 - 1e-9:
            gold = run_episode(env, gold_policy, task_id=task.id).value
            if gold is not None and gold >= 1.0 - 1e-9:
                passed.append(task.id)
    if passed:
        raise AssertionError(
            f"{len(passed)}/{len(tasks)} tasks score 1.0 when the agent does nothing "
            f"(e.g. {passed[0]}): their score does not depend on the agent's work"
        )
    if unjudged:  # doing nothing must be judged a 0, not escape as "could not judge"
        raise AssertionError(
            f"{len(unjudged)}/{len(tasks)} do-nothing episodes could not be scored "
            f"(e.g. {unjudged[0]}): an empty answer must score 0 with a reason"
        )
    note = f"{len(tasks)} tasks"
    if slow:
        note += (f"; noop_action did not end {slow} episode(s) at once (they ran out of "
                 "turns; override noop_action if something else ends an episode)")
    return note


def _scoring_evidence(env: TextEnv, limit: int) -> str:
    cases = [(task, case) for task in env.tasks[:limit] for case in env.verifier_cases(task)]
    if cases:
        return _verifier_cases(env, cases)
    # A served environment (RemoteEnv) says which kind it is; a local one shows it.
    standalone = (type(env).verify is not TextEnv.verify if isinstance(env, TextEnv)
                  else bool(getattr(env, "standalone_verifier", True)))
    if not standalone:
        return _wrong_answers(env, limit)
    raise AssertionError("the environment has a verifier (verify) but declares no golden "
                         "cases for it (verifier_cases)")


def _verifier_cases(env: TextEnv, cases: list[tuple[Task, VerifierCase]]) -> str:
    count = 0
    for task, case in cases:
        s = env.verify(case.submission, task)
        count += 1
        where = f"{task.id} {case.expect} ({case.note or case.submission!r})"
        if not s.ok:
            raise AssertionError(f"{where}: verifier error {s.error}")
        if case.expect == "pass" and s.value < 1.0 - 1e-9:
            raise AssertionError(f"{where}: expected 1.0, got {s.value} {s.details}")
        if case.expect == "fail" and s.value >= 1.0 - 1e-9:
            raise AssertionError(f"{where}: expected a fail, got {s.value}")
        if case.expect == "malformed" and (s.value != 0.0 or not s.details.get("reason")):
            raise AssertionError(
                f"{where}: expected 0.0 with a reason, got {s.value} {s.details}"
            )
    return f"{count} cases"


def _gold_actions(env: TextEnv, task: Task) -> list[Message]:
    out = run_episode(env, gold_policy, task_id=task.id)
    return [m for m in out.transcript if m.role == "assistant"]


def _replay(actions: list[Message]) -> Policy:
    """A policy that plays ``actions`` in order, then repeats the last until the end."""
    pending = iter(actions)

    def policy(env: TextEnv, observation: list[Message], info: dict[str, Any]) -> Message:
        return next(pending, actions[-1])

    return policy


def _wrong_answers(env: TextEnv, limit: int) -> str:
    """Replay another task's gold actions on each checked task; none may score 1.0."""
    golds: dict[str, list[Message]] = {}

    def gold(task: Task) -> list[Message]:
        if task.id not in golds:
            golds[task.id] = _gold_actions(env, task)
        return golds[task.id]

    tasks, played = env.tasks, 0
    for i, task in enumerate(tasks[:limit]):
        others = (tasks[(i + k) % len(tasks)] for k in range(1, min(len(tasks), 2 * limit + 1)))
        other = next((o for o in others if gold(o) != gold(task)), None)
        if other is None or not gold(other):
            continue
        out = run_episode(env, _replay(gold(other)), task_id=task.id)
        where = f"task {task.id} played with the gold actions of task {other.id}"
        if out.score is None:
            raise AssertionError(f"{where}: the episode ended without a score")
        if not out.score.ok:
            raise AssertionError(f"{where}: scoring error {out.score.error}")
        if out.score.value >= 1.0 - 1e-9:
            raise AssertionError(f"{where}: scored {out.score.value}, so the score does not "
                                 "depend on the answer")
        played += 1
    if played == 0:
        raise AssertionError("no verifier golden cases, and no two tasks whose gold actions "
                             "differ to score a wrong answer with: declare verifier_cases")
    return f"no standalone verifier: {played} wrong answers (other tasks' gold) scored < 1.0"


def _bad_actions(env: TextEnv) -> str:
    acts = bad_actions(env)
    for label, action in acts:
        env.reset(seed=0)
        obs, _, term, _, _ = env.step(action)
        if not env.observation_space.contains(obs) or not obs:
            raise AssertionError(f"{label}: the answer is not a non-empty list of messages")
        if term:
            raise AssertionError(f"{label}: a bad action ended the episode")
    return f"{len(acts)} actions"


def _after_end(env: TextEnv) -> str:
    out = run_episode(env, gold_policy, seed=0)
    if not (out.terminated or out.truncated):
        raise AssertionError("gold episode did not end")
    try:
        env.step(Message(role="assistant", content="again"))
    except EpisodeFinished:
        return ""
    raise AssertionError("step after the end did not raise EpisodeFinished")
