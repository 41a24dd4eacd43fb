"""``gymhub train --config FILE.toml [--key value ...]``: the command-line entry point."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

USAGE = """usage: gymhub train [--config FILE.toml] [--key value ...]

Train a policy with GRPO against gymhub environments. Every configuration key can be
set in the TOML file (flat keys) and overridden on the command line:

"""


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, train, print where the results are; returns the exit code."""
    from gymhub.errors import ConfigError

    from .config import describe, load_config

    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(USAGE + describe())
        return 0
    path = None
    if "--config" in args:
        i = args.index("--config")
        if i + 1 >= len(args):
            print("gymhub train: --config needs a file", file=sys.stderr)
            return 2
        path = args[i + 1]
        del args[i : i + 2]
    else:
        for i, a in enumerate(args):
            if a.startswith("--config="):
                path = a.partition("=")[2]
                del args[i]
                break
    notes: list[str] = []
    try:
        cfg = load_config(path, args, notes=notes)
        if not cfg.model:
            raise ConfigError("model is not set: give a local model directory (--model PATH)")
    except ConfigError as exc:
        print(f"gymhub train: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"gymhub train: {note}", file=sys.stderr)
    from .loop import GRPOTrainer

    try:
        trainer = GRPOTrainer(cfg)
    except ConfigError as exc:  # e.g. a server that runs the environment differently
        print(f"gymhub train: {exc}", file=sys.stderr)
        return 2
    history = trainer.train()  # closes the run's loop and connections at the end
    last = history[-1] if history else {}
    print(
        f"trained {trainer.step} steps; last reward {last.get('reward_mean', 0.0):.3f}; "
        f"metrics in {trainer.out / 'metrics.jsonl'}"
    )
    return 0
