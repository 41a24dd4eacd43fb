"""Loading the policy: model, tokenizer, LoRA adapters, the engine and the LR schedule.

Kept apart from the loop so that evaluation (:mod:`gymhub.trainer.evaluate`) and the
demo load a model exactly the way training does.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from gymhub.errors import ConfigError

from .config import GRPOConfig
from .engines.base import Engine

__all__ = ["apply_lora", "load_policy", "lr_lambda", "make_engine", "resolve_device"]


def load_policy(cfg: GRPOConfig) -> tuple[Any, Any]:
    """Load the model and tokenizer from local directories, and wrap LoRA if asked.

    Only local directories: a name that is not one would otherwise send transformers
    to the model hub (retrying for half a minute without network) instead of failing.

    Raises:
        ConfigError: ``model`` (or ``tokenizer``) is not a model directory.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for key, path in (("model", cfg.model), ("tokenizer", cfg.tokenizer)):
        if path is not None and not (Path(path) / "config.json").is_file() and not (
                key == "tokenizer" and Path(path).is_dir()):
            raise ConfigError(f"{key} {path!r} is not a local model directory (no "
                              "config.json); gymhub loads models from files only")
    tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer or cfg.model, local_files_only=True)
    dtype = torch.bfloat16 if cfg.bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=dtype, local_files_only=True)
    model.to(torch.device(resolve_device(cfg.device)))  # type: ignore[arg-type]  # in place
    if cfg.finetune == "lora":
        model = apply_lora(
            model,
            r=cfg.lora_r,
            alpha=cfg.lora_alpha,
            dropout=cfg.lora_dropout,
            target_modules=cfg.lora_target_modules,
        )
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()  # type: ignore[no-untyped-call]
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()  # type: ignore[no-untyped-call]
    return model, tokenizer


def resolve_device(name: str) -> str:
    """``auto`` is the first GPU torch sees, else the CPU; an explicit GPU must exist.

    Raises:
        ConfigError: ``cuda`` asked for where torch sees no GPU.
    """
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r}: torch sees no GPU here (device = 'cpu' or "
                          "'auto' trains on the CPU)")
    return name


def apply_lora(model: Any, *, r: int, alpha: int, dropout: float, target_modules: list[str]) -> Any:
    """Wrap ``model`` with peft LoRA adapters (only the adapters train)."""
    import warnings

    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=list(target_modules),
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        # peft reads a property that recent transformers deprecates; not ours to fix.
        warnings.filterwarnings(
            "ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning
        )
        return get_peft_model(model, lora)


def make_engine(cfg: GRPOConfig, model: Any, tokenizer: Any, *, train: bool = True) -> Engine:
    """The inference engine ``cfg.engine`` names, sharing ``model`` when colocated.

    ``train=False`` (evaluation) builds a vLLM server engine that only generates, so
    a server started for either kind of fine-tuning will do.
    """
    if cfg.engine == "transformers":
        from .engines.hf import TransformersEngine

        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        return TransformersEngine(
            model,
            tokenizer,
            pad_token_id=pad,
            seed=cfg.seed,
            cross_turn_cache=cfg.cross_turn_cache,
            # every episode in flight keeps one cache between turns; none is evicted early
            max_cached_sessions=max(256, 2 * cfg.max_concurrent_episodes),
        )
    if cfg.engine == "vllm":
        from .engines.vllm_local import VLLMEngine

        return VLLMEngine(
            cfg.model,
            gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
            enforce_eager=cfg.vllm_enforce_eager,
            seed=cfg.seed,
            enable_prefix_caching=cfg.vllm_enable_prefix_caching,
            enable_sleep_mode=cfg.vllm_enable_sleep_mode,
            max_model_len=cfg.max_context_tokens,
            sync_timeout=cfg.vllm_sync_timeout,
        )
    from .engines.vllm_server import VLLMServerEngine

    assert cfg.engine_url is not None
    return VLLMServerEngine(
        cfg.engine_url,
        cfg.model,
        finetune=cfg.finetune if train else None,
        adapter_dir=str(Path(cfg.output_dir).resolve() / "adapters"),
        lora_rank=cfg.lora_r,
        enable_sleep=cfg.vllm_enable_sleep_mode,
        sync_timeout=cfg.vllm_sync_timeout,
    )


def lr_lambda(cfg: GRPOConfig, total: int) -> Any:
    """Multiplier of the peak learning rate per optimizer step (warm-up, then decay)."""
    def f(step: int) -> float:
        if cfg.warmup_steps and step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.lr_schedule == "constant":
            return 1.0
        frac = min(1.0, (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps))
        return 1.0 - frac if cfg.lr_schedule == "linear" else 0.5 * (1 + math.cos(math.pi * frac))

    return f
