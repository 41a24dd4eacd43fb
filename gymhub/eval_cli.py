"""``gymhub eval`` and ``gymhub rescore``: scoring policies and re-scoring what they played.

Kept apart from :mod:`gymhub.cli` so that the command table stays readable; like it,
this module imports the environments only when a command runs.

Exit status: ``eval`` returns 1 when the gold policy scores below 1.0 on any task or
when any episode errors (the other policies are measurements, so only errors fail
them); ``rescore`` returns 1 when a trajectory could not be replayed. Bad input (an
unknown environment, policy or file, a line that is not a record, an invalid verifier
spec) is a usage error, 2; an environment server or engine that fails is 1 (both as
one ``gymhub: error:`` line, see :mod:`gymhub.cli_errors`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

__all__ = ["add_eval_commands"]

#: Changes and failures ``rescore`` prints without ``--json``.
_LISTED = 20


def add_eval_commands(sub: Any) -> None:
    """Add the ``eval`` and ``rescore`` subcommands to ``gymhub``'s parser."""
    ev = sub.add_parser("eval", help="score a policy on an environment's tasks")
    ev.add_argument("env")
    ev.add_argument("--policy", default="gold",
                    help="gold, noop, refuse or random (default: gold)")
    ev.add_argument("--seed", type=int, default=0,
                    help="reset seed of every episode and the random policy's seed (default: 0)")
    ev.add_argument("--tasks", type=int, default=None, help="first N tasks (default: all)")
    ev.add_argument("--save", default=None, metavar="TRAJ.jsonl",
                    help="write every episode to this file, for `gymhub rescore`")
    ev.add_argument("--json", action="store_true")
    ev.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    ev.add_argument("--model", default=None, help="score this local model directory instead")
    ev.add_argument(
        "--parser", default=None, choices=["hermes", "json", "tags"], help="tool-call format"
    )
    ev.add_argument("--env-url", default=None, help="play on this environment server")
    ev.add_argument("--config", default=None, help="training TOML (prompt, parser, budgets)")
    ev.add_argument("--samples", type=int, default=1, metavar="K",
                    help="with --model: K sampled episodes per task, scored by their mean "
                         "(avg@K; needs --temperature)")
    ev.add_argument("--temperature", type=float, default=0.0,
                    help="with --model: sampling temperature (default 0: greedy)")
    ev.set_defaults(fn=_cmd_eval)

    rs = sub.add_parser(
        "rescore", help="replay stored trajectories and report which scores change"
    )
    rs.add_argument("trajectories", metavar="TRAJ.jsonl", help="written by `gymhub eval --save`")
    rs.add_argument("--verifier", default=None, metavar="SPEC",
                    help="score with this verifier spec instead: JSON, or @FILE holding it")
    rs.add_argument("--json", action="store_true")
    rs.set_defaults(fn=_cmd_rescore)


def _env_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    from gymhub.envs.registration import parse_env_args

    return parse_env_args(pairs)[""]


def _cmd_eval(args: argparse.Namespace) -> int:
    if args.model is not None:
        return _cmd_eval_model(args)
    from gymhub.envs import make
    from gymhub.envs.evaluation import evaluate_policy
    from gymhub.envs.policies import policy_named
    from gymhub.envs.trajectories import TrajectoryRecord, TrajectoryWriter

    policy_named(args.policy)  # an unknown name fails before anything is built
    kwargs = _env_kwargs(args.env_arg)
    writer = TrajectoryWriter(args.save) if args.save else None
    try:
        env = make(args.env, **kwargs)
    except BaseException:
        if writer is not None:
            writer.close()
        raise

    def save(task: Any, outcome: Any) -> None:
        if writer is not None:
            writer.write(TrajectoryRecord.from_outcome(
                outcome, env=args.env, env_kwargs=kwargs, policy=args.policy, seed=args.seed))

    try:
        report = evaluate_policy(env, args.policy, env_id=args.env, seed=args.seed,
                                 tasks=args.tasks, on_episode=save)
    finally:
        env.close()
        if writer is not None:
            writer.close()
    result = report.to_dict()
    if args.save:
        result["saved"] = args.save
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(
            f"{args.env} policy={args.policy}: {result['episodes']} episodes, mean score "
            f"{result['mean_score']:.4f}, {result['errors']} errors, "
            f"{result['episodes_per_s']:.1f} episodes/s"
        )
        for name, cat in result["by_category"].items():
            print(f"  {name}: {cat['episodes']} episodes, mean {cat['mean_score']:.4f}, "
                  f"{cat['errors']} errors")
        for f in result["failures"][:5]:
            print(f"  {f}")
        if args.save:
            print(f"saved {len(report.outcomes)} trajectories to {args.save}")
    return 1 if result["failed"] else 0


def _cmd_eval_model(args: argparse.Namespace) -> int:
    from gymhub.errors import ConfigError

    if args.save:
        # The learner's trajectories keep assistant turns as the model's raw text; a
        # replay needs the parsed tool calls, which the learner does not store yet.
        raise ConfigError("--save works with --policy, not yet with --model")
    from gymhub.trainer.evaluate import evaluate_model

    result = evaluate_model(
        args.env,
        args.model,
        tasks=args.tasks,
        parser=args.parser,
        env_url=args.env_url,
        env_kwargs=_env_kwargs(args.env_arg),
        config=args.config,
        samples=args.samples,
        temperature=args.temperature,
    )
    out = {"env": args.env, "model": args.model, **result.to_dict()}
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"{args.env} model={args.model}: {result.episodes} episodes"
            + (f" (avg@{result.samples}, T={result.temperature:g})" if result.samples > 1 else "")
            + ", mean score "
            f"{result.mean:.4f} ± {result.stderr:.4f}, {result.errors} errors"
            + (f" ({result.lost} lost by the servers)" if result.lost else "") + ", "
            f"{result.episodes_per_s:.2f} episodes/s"
        )
    return 0


def _verifier_spec(text: str) -> Any:
    """A spec given inline as JSON or as ``@FILE``."""
    from pathlib import Path

    from gymhub.errors import ConfigError

    where = "--verifier"
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise ConfigError(f"--verifier {text}: no such file")
        where, text = str(path), path.read_text(encoding="utf-8")
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not a JSON verifier spec ({exc.msg} at line {exc.lineno} "
                          f"column {exc.colno})") from exc
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: a verifier spec is a JSON object with a 'type'")
    return spec


def _cmd_rescore(args: argparse.Namespace) -> int:
    from gymhub.envs import make
    from gymhub.envs.rescore import rescore
    from gymhub.envs.trajectories import read_trajectories
    from gymhub.verifiers import compile as compile_verifier

    verifier = compile_verifier(_verifier_spec(args.verifier)) if args.verifier else None
    records = list(read_trajectories(args.trajectories))  # every line checked before any work
    report = rescore(records, lambda env_id, kwargs: make(env_id, **kwargs), verifier=verifier)
    result = {"file": args.trajectories, **report.to_dict()}
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(f"{args.trajectories}: {result['trajectories']} trajectories, "
              f"{result['changed']} changed, {result['unchanged']} unchanged, "
              f"{result['errors']} errors")
        for pair, count in result["verifiers"].items():
            print(f"  verifier {pair}: {count}")
        for c in result["changes"][:_LISTED]:
            print(f"  line {c['line']} {c['task_id']}: {c['old']} -> {c['new']}")
        for e in result["failures"][:_LISTED]:
            print(f"  line {e['line']} {e['task_id']}: {e['error']}")
        hidden = sum(max(0, len(result[k]) - _LISTED) for k in ("changes", "failures"))
        if hidden:
            print(f"  ... {hidden} more (--json lists all)")
    return 1 if report.errors else 0
