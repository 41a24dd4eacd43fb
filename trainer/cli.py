"""``gymhub train --config FILE.toml [--key value ...]``: the command-line entry point.

A :class:`~gymhub.errors.GymhubError` (a bad key, a server that never started, one that
serves something else) ends the command as one ``gymhub: error: ...`` line with the
status :func:`gymhub.cli_errors.exit_status` gives it (``gymhub --debug train ...``
adds the traceback): the person who typed the command needs the message, not the stack.

``nproc > 1`` re-launches the same arguments through ``torch.distributed.run`` (see
:mod:`.distributed`); the processes it starts run ``python -m gymhub.trainer``, which is
this command again, and never launch anything themselves. Among them only rank 0 prints.
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
    import os

    from gymhub.errors import ConfigError

    from .config import describe, load_config

    if any(a in ("-h", "--help") for a in args):
        print(USAGE + describe())
        return 0
    given = list(args)
    path = _config_path(args)
    notes: list[str] = []
    cfg = load_config(path, args, notes=notes)
    if not cfg.model:
        raise ConfigError("model is not set: give a local model directory (--model PATH)")
    from .distributed import launch, should_launch

    if should_launch(cfg):
        return launch(cfg.nproc, given)  # the processes it starts print the notes
    main_rank = int(os.environ.get("RANK") or 0) == 0
    for note in notes if main_rank else ():
        print(f"gymhub train: {note}", file=sys.stderr)
    from .loop import GRPOTrainer

    trainer = GRPOTrainer(cfg)  # waits for the servers and checks them first
    try:
        history = trainer.train()  # closes the run's loop and connections at the end
    finally:
        trainer.dist.close()
    last = history[-1] if history else {}
    if main_rank:
        print(
            f"trained {trainer.step} steps; last reward {last.get('reward_mean', 0.0):.3f}; "
            f"metrics in {trainer.out / 'metrics.jsonl'}"
        )
    return 0
