"""The hub's former, in-process check: kept only as the baseline of bench_hub_check.py.

Do not use it to decide anything. It imports the author's wheel and writes the verdict
from the same interpreter, so the code under check can rewrite that verdict (an
``atexit`` hook that rewrites ``--out`` was enough to be signed "passed"). The hub now
serves the wheel in the sandbox and checks it from its own process
(:mod:`gymhub.hub.served_check`); this file measures what that costs against the old way.

``python inprocess_check_runner.py --site DIR --out FILE ENV_ID...`` (inside the sandbox).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Sequence
from email.parser import Parser
from pathlib import Path
from typing import Any

__all__ = ["GOLD_TASKS", "main", "missing_requirements", "run_checks"]

#: Tasks each environment's gold and do-nothing policies play (the rest are sampled
#: by ``check_env``'s other checks); bounds the check's time on large task sets.
GOLD_TASKS = 25


def missing_requirements(site: Path) -> list[str]:
    """The wheel's requirements that nothing importable here satisfies (the hub's rule)."""
    from gymhub.hub.checker import missing_requirements as unmet

    lines: list[str] = []
    for meta in sorted(site.glob("*.dist-info/METADATA")):
        lines += Parser().parsestr(meta.read_text(encoding="utf-8")).get_all(
            "Requires-Dist") or []
    return unmet(lines)


def _noop(_env: Any, _obs: Any, _info: Any) -> Any:
    from gymhub.types import Message

    return Message(role="assistant", content="")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _describe(env: Any, env_id: str) -> dict[str, Any]:
    specs = env.tool_specs() if hasattr(env, "tool_specs") else []
    verifier = getattr(env, "verifier", None)
    spec = getattr(env, "env_spec", None)
    name = getattr(verifier, "id", None) or getattr(spec, "verifier", None) or ""
    return {"tools": [s.to_dict() for s in specs], "verifier": str(name),
            "task_count": len(env.tasks), "max_turns": getattr(env, "max_turns", None)}


def run_checks(env_ids: Sequence[str]) -> dict[str, Any]:
    """Check each environment; the ``details`` JSON (see :mod:`gymhub.hub.checker`)."""
    from gymhub.envs import TextEnv, check_env, gold_policy, make, run_episode

    checks: list[dict[str, Any]] = []
    envs: dict[str, Any] = {}
    gold: list[float] = []
    noop: list[float] = []

    def add(name: str, ok: bool, seconds: float, detail: str) -> None:
        checks.append({"name": name, "ok": ok, "ms": round(seconds * 1000, 3),
                       "detail": detail[:2000]})

    for env_id in env_ids:
        t0 = time.perf_counter()
        try:
            env = make(env_id).unwrapped
            if not isinstance(env, TextEnv):
                raise TypeError(f"{type(env).__name__} is not a gymhub TextEnv")
            envs[env_id] = _describe(env, env_id)
        except Exception as exc:
            add(f"{env_id}: loads", False, time.perf_counter() - t0,
                f"{type(exc).__name__}: {exc}")
            continue
        add(f"{env_id}: loads", True, time.perf_counter() - t0, "")
        t0 = time.perf_counter()
        try:
            tasks = env.tasks[:GOLD_TASKS]
            scores = [run_episode(env, gold_policy, task_id=t.id).value or 0.0 for t in tasks]
            nothing = [run_episode(env, _noop, task_id=t.id).value or 0.0 for t in tasks]
            gold += scores
            noop += nothing
            ok = bool(nothing) and max(nothing) < 1.0
            add(f"{env_id}: do-nothing policy scores below 1.0", ok, time.perf_counter() - t0,
                f"mean {_mean(nothing)} over {len(nothing)} tasks")
        except Exception as exc:
            add(f"{env_id}: do-nothing policy scores below 1.0", False,
                time.perf_counter() - t0, f"{type(exc).__name__}: {exc}")
        try:
            report = check_env(env, gold_tasks=GOLD_TASKS, raise_on_failure=False)
        except Exception as exc:  # check_env catches per check; this is a crash around them
            add(f"{env_id}: check_env", False, 0.0, f"{type(exc).__name__}: {exc}")
            continue
        for r in report.results:
            add(f"{env_id}: {r.name}", r.ok, r.seconds, r.message)
    gold_score, noop_score = _mean(gold), _mean(noop)
    failed = [c["name"] for c in checks if not c["ok"]]
    summary = (f"{len(checks) - len(failed)}/{len(checks)} checks passed; gold {gold_score}, "
               f"do-nothing {noop_score}")
    return {"summary": summary, "checks": checks, "envs": envs, "gold_score": gold_score,
            "noop_score": noop_score, "reason": "; ".join(failed)}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point inside the sandbox; always writes ``--out`` unless it crashes."""
    p = argparse.ArgumentParser(prog="inprocess_check_runner.py")
    p.add_argument("--site", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("env_ids", nargs="+")
    args = p.parse_args(argv)
    try:
        missing = missing_requirements(args.site)
        if missing:
            result: dict[str, Any] = {"unchecked": "dependencies not available offline: "
                                                   + ", ".join(missing)}
        else:
            result = run_checks(args.env_ids)
    except Exception:
        result = {"crashed": traceback.format_exc()[-4000:]}
    args.out.write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
