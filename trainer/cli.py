"""``gymhub train --config FILE.toml [--key value ...]``: the command-line entry point.

A :class:`~gymhub.errors.GymhubError` (a bad key, a server that never started, one that
serves something else) ends the command as one ``gymhub: error: ...`` line with the
status :func:`gymhub.cli_errors.exit_status` gives it (``gymhub --debug train ...``
adds the traceback): the person who typed the command needs the message, not the stack.
"""

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
    from gymhub.cli_errors import report
    from gymhub.errors import GymhubError

    try:
        return _train(list(sys.argv[1:] if argv is None else argv))
    except GymhubError as exc:
        return report(exc)


def _config_path(args: list[str]) -> str | None:
    """Take ``--config FILE`` (or ``--config=FILE``) out of ``args``; the file or None.

    Raises:
        ConfigError: ``--config`` without a file.
    """
    from gymhub.errors import ConfigError

    for i, a in enumerate(args):
        if a == "--config":
            if i + 1 >= len(args):
                raise ConfigError("--config needs a file")
            path = args[i + 1]
            del args[i : i + 2]
            return path
        if a.startswith("--config="):
            del args[i]
            return a.partition("=")[2]
    return None


def _train(args: list[str]) -> int:
    from gymhub.errors import ConfigError

    from .config import describe, load_config

    if any(a in ("-h", "--help") for a in args):
        print(USAGE + describe())
        return 0
    path = _config_path(args)
    notes: list[str] = []
    cfg = load_config(path, args, notes=notes)
    if not cfg.model:
        raise ConfigError("model is not set: give a local model directory (--model PATH)")
    for note in notes:
        print(f"gymhub train: {note}", file=sys.stderr)
    from .loop import GRPOTrainer

    trainer = GRPOTrainer(cfg)  # waits for the servers and checks them first
    history = trainer.train()  # closes the run's loop and connections at the end
    last = history[-1] if history else {}
    print(
        f"trained {trainer.step} steps; last reward {last.get('reward_mean', 0.0):.3f}; "
        f"metrics in {trainer.out / 'metrics.jsonl'}"
    )
    return 0
