"""The hub's verdict on an environment it can only talk to: ``check_env`` over the wire.

The hub must never let the code it checks write the verdict. The environment therefore
runs as ``gymhub serve`` inside the sandbox (:mod:`gymhub.hub.checker` starts it), and
this module, in the hub's own process, drives it through the HTTP protocol on a Unix
socket: it opens :class:`~gymhub.client.RemoteEnv` episodes, plays the gold and
do-nothing policies, asks for the golden verifier cases and has them scored, and runs
the same :func:`~gymhub.envs.check_env` an author runs locally. Everything recorded is
computed here, from answers that crossed a process boundary as bounded, validated JSON.

What the environment can still do is answer dishonestly (claim 1.0 for its gold
actions): a check proves that the environment *behaves* as the contract asks when
played from outside, not that its code is benign. Nothing it does at import, at exit,
or by patching gymhub inside the sandbox reaches the hub's memory, files or database.

Details (what :meth:`HubStore.record_check` stores and the pages render)::

    {"summary": str, "checks": [{"name", "ok", "ms", "detail"}],
     "envs": {env_id: {"tools": [...], "verifier": str, "task_count": int,
                       "max_turns": int | None}},
     "gold_score": float | None, "noop_score": float | None, "reason": str}
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from gymhub.client import RemoteEnv
from gymhub.envs import TextEnv, check_env, gold_policy, run_episode
from gymhub.envs.policies import noop_policy

__all__ = ["GOLD_TASKS", "MAX_REPLY_BYTES", "check_served"]

#: Tasks each environment's gold and do-nothing policies play (the rest are sampled by
#: ``check_env``'s other checks); bounds the check's time on large task sets.
GOLD_TASKS = 25
#: Largest reply the hub reads from the checked server: far above any episode reply,
#: far below what would hurt the hub.
MAX_REPLY_BYTES = 8 << 20
_DETAIL_CHARS = 2000


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _as_text_env(env: RemoteEnv) -> TextEnv:
    """RemoteEnv offers TextEnv's whole public surface (tests/client/test_remote.py)."""
    return cast(TextEnv, env)


def _describe(env: RemoteEnv) -> dict[str, Any]:
    d = env.description
    verifier = d.get("verifier_id") or d.get("verifier") or ""
    max_turns = d.get("max_turns")
    return {"tools": [s.to_dict() for s in env.tool_specs()], "verifier": str(verifier)[:200],
            "task_count": len(env.tasks),
            "max_turns": max_turns if isinstance(max_turns, int) else None}


def _remote(uds: str, env_id: str, timeout_s: float) -> RemoteEnv:
    # base_url only names the Host header: every connection goes to the socket.
    return RemoteEnv("http://sandbox", env_id, uds=uds, max_response_bytes=MAX_REPLY_BYTES,
                     timeout=timeout_s, retries=1, batch=False, max_connections=4)


def check_served(uds: str, env_ids: Sequence[str], *,
                 call_timeout_s: float = 60.0) -> dict[str, Any]:
    """Check each environment served on the Unix socket ``uds``; the ``details`` JSON.

    Args:
        uds: host path of the server's socket.
        env_ids: the environments the wheel declares (the hub's record, not the server's).
        call_timeout_s: the longest one request may take; the caller owns the whole
            check's deadline (it stops the server, which ends every call at once).
    """
    checks: list[dict[str, Any]] = []
    envs: dict[str, Any] = {}
    gold: list[float] = []
    noop: list[float] = []

    def add(name: str, ok: bool, seconds: float, detail: str) -> None:
        checks.append({"name": name, "ok": ok, "ms": round(seconds * 1000, 3),
                       "detail": detail[:_DETAIL_CHARS]})

    for env_id in env_ids:
        t0 = time.perf_counter()
        try:
            env = _remote(uds, env_id, call_timeout_s)
            envs[env_id] = _describe(env)
        except Exception as exc:
            add(f"{env_id}: loads", False, time.perf_counter() - t0,
                f"{type(exc).__name__}: {exc}")
            continue
        try:
            add(f"{env_id}: loads", True, time.perf_counter() - t0, "")
            _reference_scores(env, env_id, add, gold, noop)
            try:
                report = check_env(_as_text_env(env), gold_tasks=GOLD_TASKS,
                               raise_on_failure=False)
            except Exception as exc:  # check_env catches per check; this is around them
                add(f"{env_id}: check_env", False, 0.0, f"{type(exc).__name__}: {exc}")
                continue
            for r in report.results:
                add(f"{env_id}: {r.name}", r.ok, r.seconds, r.message)
        finally:
            env.close()
    gold_score, noop_score = _mean(gold), _mean(noop)
    failed = [c["name"] for c in checks if not c["ok"]]
    summary = (f"{len(checks) - len(failed)}/{len(checks)} checks passed; gold {gold_score}, "
               f"do-nothing {noop_score}")
    return {"summary": summary, "checks": checks, "envs": envs, "gold_score": gold_score,
            "noop_score": noop_score, "reason": "; ".join(failed)[:_DETAIL_CHARS]}


def _reference_scores(env: RemoteEnv, env_id: str, add: Any, gold: list[float],
                      noop: list[float]) -> None:
    """The gold and do-nothing means the page shows (first :data:`GOLD_TASKS` tasks)."""
    t0 = time.perf_counter()
    name = f"{env_id}: do-nothing policy scores below 1.0"
    try:
        tasks = env.tasks[:GOLD_TASKS]
        played = _as_text_env(env)
        scores = [run_episode(played, gold_policy, task_id=t.id).value or 0.0 for t in tasks]
        nothing = [run_episode(played, noop_policy, task_id=t.id).value or 0.0 for t in tasks]
    except Exception as exc:
        add(name, False, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}")
        return
    gold += scores
    noop += nothing
    ok = bool(nothing) and max(nothing) < 1.0
    add(name, ok, time.perf_counter() - t0, f"mean {_mean(nothing)} over {len(nothing)} tasks")
