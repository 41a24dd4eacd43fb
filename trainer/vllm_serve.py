"""``gymhub vllm-serve MODEL``: a vLLM server started with every flag the learner needs.

The server engine (:mod:`gymhub.trainer.engines.vllm_server`) checks these at start, so
a server started by hand without one of them is a clear error rather than wrong
numbers. Flags and variables are those of vLLM 0.33.0 (``vllm/engine/arg_utils.py``,
``vllm/envs.py``):

* ``--logprobs-mode processed_logprobs``: the default reports untempered logprobs.
* ``--generation-config vllm``: otherwise ``generation_config.json`` supplies sampling
  defaults and extra stop ids.
* LoRA: ``--enable-lora --max-lora-rank R`` (R the smallest allowed rank covering
  ``lora_r``; vLLM accepts only :data:`LORA_RANKS`) and
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``.
* Full fine-tuning: ``--weight-transfer-config '{"backend": "nccl"}'``.
* ``VLLM_SERVER_DEV_MODE=1``: the sleep, cache, server-info and weight-transfer routes.
* ``--enforce-eager``, ``--enable-sleep-mode``, ``--gpu-memory-utilization`` and
  ``--max-model-len`` follow the training config (``--config FILE.toml``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence

__all__ = ["LORA_RANKS", "build_command", "main"]

#: ``MaxLoRARanks`` in ``vllm/config/lora.py``.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def build_command(
    model: str,
    *,
    finetune: str = "lora",
    lora_rank: int = 16,
    enforce_eager: bool = True,
    enable_sleep_mode: bool = False,
    gpu_memory_utilization: float | None = None,
    max_model_len: int | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    extra: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """The ``vllm serve`` argv and the environment variables it needs.

    Raises:
        ValueError: ``lora_rank`` exceeds the largest rank vLLM supports.
    """
    argv = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model,
            "--host", host, "--port", str(port),
            "--logprobs-mode", "processed_logprobs",
            "--generation-config", "vllm"]
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if finetune == "lora":
        rank = next((r for r in LORA_RANKS if r >= lora_rank), None)
        if rank is None:
            raise ValueError(f"lora_r {lora_rank} exceeds vLLM's largest LoRA rank "
                             f"{LORA_RANKS[-1]}")
        argv += ["--enable-lora", "--max-lora-rank", str(rank), "--max-loras", "1"]
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
    else:
        argv += ["--weight-transfer-config", json.dumps({"backend": "nccl"})]
    if enforce_eager:
        argv.append("--enforce-eager")
    if enable_sleep_mode:
        argv.append("--enable-sleep-mode")
    if gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    return argv + list(extra), env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gymhub vllm-serve",
        description="Start a vLLM server for `gymhub train --engine vllm-server`. "
        "Arguments after `--` go to `vllm serve` unchanged.",
    )
    p.add_argument("model", help="local model directory (the same string as `model`)")
    p.add_argument("--config", help="training config (TOML): finetune, lora_r, "
                   "vllm_enforce_eager, vllm_enable_sleep_mode, max_context_tokens")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--finetune", choices=("lora", "full"), default=None)
    p.add_argument("--lora-rank", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=None)
    p.add_argument("--dry-run", action="store_true", help="print the command and exit")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, then replace this process with ``vllm serve`` (or print it: ``--dry-run``)."""
    from gymhub.errors import ConfigError

    from .config import GRPOConfig, load_config

    args_in = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in args_in:
        i = args_in.index("--")
        args_in, extra = args_in[:i], args_in[i + 1:]
    args = _parser().parse_args(args_in)
    try:
        cfg = load_config(args.config) if args.config else GRPOConfig()
        cmd, env = build_command(
            args.model,
            finetune=args.finetune or cfg.finetune,
            lora_rank=args.lora_rank or cfg.lora_r,
            enforce_eager=cfg.vllm_enforce_eager,
            enable_sleep_mode=cfg.vllm_enable_sleep_mode,
            gpu_memory_utilization=args.gpu_memory_utilization,
            max_model_len=cfg.max_context_tokens if args.config else None,
            host=args.host,
            port=args.port,
            extra=extra,
        )
    except (ConfigError, ValueError) as exc:  # what the command line asked is impossible
        print(f"gymhub: error: {exc}", file=sys.stderr)
        return 2
    shown = " ".join(f"{k}={v}" for k, v in env.items()) + " " + shlex.join(cmd)
    if args.dry_run:
        print(shown)
        return 0
    if not _vllm_installed():  # exec'd anyway, vLLM would only say "No module named vllm"
        from .engines.vllm_local import VLLM_INSTALL_HINT

        print(f"gymhub vllm-serve: vLLM is not installed: {VLLM_INSTALL_HINT}", file=sys.stderr)
        return 1
    print(f"gymhub vllm-serve: {shown}", file=sys.stderr, flush=True)
    try:
        os.execvpe(cmd[0], cmd, {**os.environ, **env})
    except OSError as exc:  # pragma: no cover - exec only returns on failure
        print(f"gymhub vllm-serve: cannot start vLLM: {exc}", file=sys.stderr)
        return 1
    return 0  # pragma: no cover


def _vllm_installed() -> bool:
    """Whether ``python -m vllm...`` can start here (looked up, not imported: that is slow)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None
