"""``GRPOConfig``: every knob of a training run, documented where it is declared.

A run is described by a TOML file of flat ``key = value`` pairs (the field names
below) and may be overridden on the command line with ``--key value`` (or
``--key=value``; dashes and underscores are interchangeable). Values from the command
line are coerced to the field's type; unknown keys and bad values fail before
anything is loaded, with a "did you mean" hint. Each field's documentation lives in
its ``metadata["doc"]`` and is shown by :func:`describe`.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gymhub.errors import ConfigError

__all__ = ["FOREIGN_TABLES", "GRPOConfig", "describe", "load_config", "parse_overrides"]


def _f(default: Any, doc: str) -> Any:
    """A dataclass field with an immutable default and its documentation."""
    return field(default=default, metadata={"doc": doc})


@dataclass
class GRPOConfig:
    """Configuration of one GRPO run. Defaults are a small, safe CPU run."""

    # --- model and engine
    model: str = _f(
        "", "Path of a local transformers model directory (config, weights, tokenizer)."
    )
    tokenizer: str | None = _f(None, "Tokenizer directory when it differs from `model`.")
    engine: Literal["transformers", "vllm", "vllm-server"] = _f(
        "transformers",
        "Generation engine: in-process transformers, colocated vLLM, or a vLLM server.",
    )
    engine_url: str | None = _f(
        None, "Base URL of the vLLM OpenAI-compatible server (engine=vllm-server)."
    )
    vllm_gpu_memory_utilization: float = _f(
        0.3, "Fraction of GPU memory vLLM may take (colocated)."
    )
    vllm_enforce_eager: bool = _f(
        True, "Disable CUDA graphs in vLLM (stable weight updates, less memory)."
    )
    vllm_enable_prefix_caching: bool = _f(
        True, "Reuse KV cache across turns of an episode in vLLM."
    )
    vllm_enable_sleep_mode: bool = _f(False, "Free vLLM's memory while the trainer updates.")
    # --- environments
    env_ids: list[str] = field(
        default_factory=lambda: ["echo-v0"],
        metadata={"doc": "Environment ids to train on; tasks are drawn from all of them."},
    )
    env_urls: list[str] = field(
        default_factory=list,
        metadata={"doc": "Environment server URLs; empty runs the environments in-process."},
    )
    env_args: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "doc": "Constructor arguments of every environment in env_ids (TOML table "
            "[env]), e.g. show_schema = true. In-process they go to gymhub.envs.make; "
            "against servers (env_urls) they belong to `gymhub serve --env-arg`, and a "
            "server that runs with other arguments is an error at start (empty: accept "
            "whatever the servers run)."
        },
    )
    tool_parser: Literal["hermes", "json", "tags"] = _f(
        "hermes", "How tool calls are read from the model's text (see trainer.parsers)."
    )
    tag_tools: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "doc": "For tool_parser=tags: tag -> 'tool' or 'tool:argument' "
            "(e.g. {sql = 'query:sql', submit = 'submit:answer'})."
        },
    )
    eval_tasks: int = _f(
        0,
        "Tasks per environment held out for evaluation (never trained on): those whose "
        "hash of 'env/task_id' sorts first, so the split does not depend on task order.",
    )
    task_filter: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "doc": "Keep only tasks whose meta[key] is one of the comma-separated values "
            "(e.g. {difficulty = 'easy', schema = 'retail,hr'}); applied before the split."
        },
    )
    instructions: str = _f(
        "",
        "Text appended to the environment's system message (e.g. the answer format the "
        "tool parser expects); part of the prompt the model is trained on.",
    )
    render_tools: bool = _f(
        True,
        "Pass the environment's tool schemas to the chat template (off for tag-style "
        "parsing, where they only lengthen the prompt).",
    )
    # --- sampling and budgets
    group_size: int = _f(4, "G: episodes per task; they share the GRPO baseline.")
    tasks_per_step: int = _f(
        2, "Tasks per step; a step trains on tasks_per_step * group_size episodes."
    )
    max_steps: int = _f(10, "Training steps (one rollout batch and its updates each).")
    max_turns: int = _f(4, "Assistant turns per episode before it is truncated.")
    max_tokens_per_turn: int = _f(64, "Tokens the model may generate in one turn.")
    max_tokens_per_episode: int = _f(256, "Tokens the model may generate over a whole episode.")
    max_context_tokens: int = _f(
        2048, "Total episode length (prompt + all turns) before truncation."
    )
    temperature: float = _f(1.0, "Sampling temperature (also divides the trainer's logits).")
    top_p: float = _f(1.0, "Nucleus sampling threshold.")
    stop: list[str] = field(
        default_factory=list,
        metadata={"doc": "Extra stop strings (the end-of-turn token always stops)."},
    )
    max_concurrent_episodes: int = _f(64, "Episodes in flight at once.")
    # --- optimisation
    learning_rate: float = _f(1e-5, "Peak AdamW learning rate.")
    lr_schedule: Literal["constant", "linear", "cosine"] = _f("constant", "Decay after warm-up.")
    warmup_steps: int = _f(0, "Optimizer steps of linear warm-up.")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    max_grad_norm: float = _f(1.0, "Gradient clipping norm; 0 disables.")
    micro_batch_size: int = _f(4, "Trajectories per forward/backward pass.")
    gradient_accumulation_steps: int = _f(
        0, "Micro-batches per optimizer step; 0 = the whole rollout batch in one update."
    )
    # --- loss (see trainer.losses)
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = _f("dapo", "Loss aggregation.")
    importance_sampling_level: Literal["token", "sequence"] = _f(
        "token", "Importance ratio per token, or per sequence (GSPO)."
    )
    epsilon_low: float = _f(0.2, "Lower clip: ratios below 1 - epsilon_low stop the gradient.")
    epsilon_high: float = _f(0.28, "Upper clip (DAPO clip-higher).")
    delta: float | None = _f(
        None, "Two-sided bound on the ratio for negative advantages (INTELLECT-2)."
    )
    beta: float = _f(0.0, "Weight of the k3 KL to the reference model; 0 loads no reference.")
    tis_cap: float | None = _f(
        None, "Cap of the truncated importance weight engine -> trainer; None = off."
    )
    # --- credit assignment (see trainer.advantages)
    reward_scaling: Literal["group", "batch", "none"] = _f("group", "Std used to scale advantages.")
    dynamic_sampling: bool = _f(False, "Drop zero-variance groups from the loss (DAPO).")
    mask_truncated: bool = _f(False, "Mask episodes that hit a budget from the loss.")
    use_turn_rewards: bool = _f(False, "Add per-turn rewards to the final score in the return.")
    discount: float = _f(1.0, "Discount of per-turn rewards, counted from the first turn.")
    # --- model adaptation and precision
    finetune: Literal["lora", "full"] = _f("lora", "LoRA adapters (peft) or full fine-tuning.")
    lora_r: int = _f(16, "LoRA rank (size of the low-rank update).")
    lora_alpha: int = _f(32, "LoRA alpha (the update is scaled by alpha / r).")
    lora_dropout: float = _f(0.0, "LoRA dropout (0 keeps rollouts and updates consistent).")
    lora_target_modules: list[str] = field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
        metadata={"doc": "Module names that get LoRA adapters."},
    )
    bf16: bool = _f(False, "Load and train the model in bfloat16.")
    gradient_checkpointing: bool = _f(False, "Recompute activations in backward to save memory.")
    # --- bookkeeping
    checkpoint_interval: int = _f(0, "Steps between checkpoints; 0 = only at the end.")
    eval_interval: int = _f(0, "Steps between evaluations on held-out tasks; 0 = off.")
    seed: int = _f(0, "Seed of task order, sampling and initialisation.")
    output_dir: str = _f("runs/grpo", "Where metrics, trajectories and checkpoints go.")
    resume: str | None = _f(None, "Checkpoint directory to resume from, or 'latest'.")
    save_trajectories: bool = _f(True, "Write every trajectory to trajectories.jsonl.")
    drift_check: Literal["off", "warn", "strict"] = _f(
        "warn", "Compare each episode's ids with a full render: report, raise, or skip."
    )
    progress: bool = _f(True, "Show a progress line on stderr.")
    report: bool = _f(
        True, "At the end, write report.json and a reward-curve PNG to output_dir."
    )
    tensorboard: bool = _f(
        True, "Also log scalars to output_dir/tensorboard when TensorBoard is installed."
    )

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check types of literals and ranges.

        Raises:
            ConfigError: naming the field and the allowed values.
        """
        hints = _hints()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            allowed = _literal_values(hints[f.name])
            if allowed and value not in allowed:
                raise ConfigError(f"{f.name} must be one of {list(allowed)}, got {value!r}")
        positive = (
            "group_size",
            "tasks_per_step",
            "max_turns",
            "max_tokens_per_turn",
            "max_tokens_per_episode",
            "max_context_tokens",
            "micro_batch_size",
            "max_concurrent_episodes",
            "lora_r",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        nonneg = (
            "max_steps",
            "warmup_steps",
            "gradient_accumulation_steps",
            "checkpoint_interval",
            "eval_interval",
            "eval_tasks",
            "beta",
            "weight_decay",
            "max_grad_norm",
            "epsilon_low",
            "epsilon_high",
        )
        for name in nonneg:
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ConfigError("group_size must be >= 2: GRPO needs a group to form a baseline")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 <= self.discount <= 1.0:
            raise ConfigError(f"discount must be in [0, 1], got {self.discount}")
        if self.delta is not None and self.delta <= 1.0 + self.epsilon_high:
            raise ConfigError(f"delta must exceed 1 + epsilon_high = {1 + self.epsilon_high}")
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ConfigError(f"tis_cap must be > 0, got {self.tis_cap}")
        if self.engine == "vllm-server" and not self.engine_url:
            raise ConfigError("engine 'vllm-server' needs engine_url")
        if not self.env_ids:
            raise ConfigError("env_ids must name at least one environment")

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready dict of every field."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GRPOConfig:
        """Build from a mapping, rejecting unknown keys and values of the wrong type.

        Raises:
            ConfigError: unknown key (with a suggestion) or a value of the wrong type.
        """
        hints = _hints()
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            name = _resolve_key(str(key))
            kwargs[name] = _check_type(name, value, hints[name])
        return cls(**kwargs)


_HINTS: dict[str, Any] = {}


def _hints() -> dict[str, Any]:
    if not _HINTS:
        _HINTS.update(typing.get_type_hints(GRPOConfig))
    return _HINTS


def _field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(GRPOConfig)]


def _resolve_key(key: str) -> str:
    name = key.strip().lstrip("-").replace("-", "_")
    names = _field_names()
    if name in names:
        return name
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"unknown config key {key!r}{hint}")


def _literal_values(tp: Any) -> tuple[Any, ...]:
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    return ()


def _optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _check_type(name: str, value: Any, tp: Any) -> Any:
    """Validate a value that came from TOML (already typed)."""
    inner, optional = _optional(tp)
    if value is None and optional:
        return None
    bad = ConfigError(f"{name} expects {_type_name(tp)}, got {value!r}")
    if _literal_values(inner):
        if value not in _literal_values(inner):
            raise ConfigError(
                f"{name} must be one of {list(_literal_values(inner))}, got {value!r}"
            )
        return value
    if inner is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if inner is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if inner is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad
        return float(value)
    if inner is str:
        if not isinstance(value, str):
            raise bad
        return value
    origin = typing.get_origin(inner)
    if origin is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad
        return list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise bad
        if typing.get_args(inner)[1] is str and not all(isinstance(v, str)
                                                        for v in value.values()):
            raise bad
        return {str(k): v for k, v in value.items()}
    raise bad  # pragma: no cover - every field type is handled above


def _type_name(tp: Any) -> str:
    inner, optional = _optional(tp)
    lit = _literal_values(inner)
    base = ("one of " + "/".join(map(str, lit))) if lit else getattr(inner, "__name__", str(inner))
    if typing.get_origin(inner) is list:
        base = "a list of strings"
    elif typing.get_origin(inner) is dict:
        base = "a table of strings"
    return base + (" or none" if optional else "")


def _coerce(name: str, raw: str, tp: Any) -> Any:
    """Turn a command-line string into the field's type."""
    inner, optional = _optional(tp)
    text = raw.strip()
    if optional and text.lower() in ("none", "null", ""):
        return None
    err = ConfigError(f"--{name.replace('_', '-')} expects {_type_name(tp)}, got {raw!r}")
    if _literal_values(inner):
        return _check_type(name, text, inner)
    if inner is bool:
        low = text.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise err
    if inner in (int, float):
        try:
            return inner(text)
        except ValueError:
            raise err from None
    if inner is str:
        return raw
    origin = typing.get_origin(inner)
    if origin in (list, dict):
        if text.startswith(("[", "{")):
            try:
                return _check_type(name, json.loads(text), inner)
            except json.JSONDecodeError:
                raise err from None
        if origin is list:
            return [p.strip() for p in text.split(",") if p.strip()]
        pairs = [p.partition("=") for p in text.split(",") if p.strip()]
        if not all(sep for _, sep, _ in pairs):
            raise err
        if typing.get_args(inner)[1] is str:
            return {k.strip(): v.strip() for k, _, v in pairs}
        return {k.strip(): _json_or_text(v.strip()) for k, _, v in pairs}
    raise err  # pragma: no cover


def _json_or_text(text: str) -> Any:
    """``true`` -> True, ``3`` -> 3, ``"a"`` -> "a"; anything that is not JSON stays text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_overrides(argv: Sequence[str]) -> dict[str, Any]:
    """Parse ``--key value`` / ``--key=value`` pairs into typed values.

    A bare ``--flag`` followed by another ``--key`` (or nothing) means ``true``.

    Raises:
        ConfigError: a stray value, an unknown key or a value that does not coerce.
    """
    hints = _hints()
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("--"):
            raise ConfigError(f"expected --key value, got {tok!r}")
        key, eq, val = tok[2:].partition("=")
        name = _resolve_key(key)
        if not eq:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is None or (nxt.startswith("--") and len(nxt) > 2 and not nxt[2].isdigit()):
                if _optional(hints[name])[0] is not bool:
                    raise ConfigError(f"--{key} needs a value ({_type_name(hints[name])})")
                val, i = "true", i + 1
            else:
                val, i = nxt, i + 2
        else:
            i += 1
        out[name] = _coerce(name, val, hints[name])
    return out


#: TOML tables and the field each one fills.
_TABLES = {"env": "env_args"}
#: Tables other programs read from the same file; ``gymhub train`` leaves them alone.
FOREIGN_TABLES = {"demo": "read by `python -m gymhub.trainer.demo` (its warm-up) only"}


def load_config(path: str | Path | None = None, overrides: Sequence[str] = (), *,
                notes: list[str] | None = None) -> GRPOConfig:
    """Read a TOML file (flat keys, plus an ``[env]`` table) and apply command-line overrides.

    Args:
        path: the TOML file, or ``None`` for defaults and overrides only.
        overrides: ``--key value`` / ``--key=value`` items.
        notes: receives one line per table of :data:`FOREIGN_TABLES` that was skipped.

    Raises:
        ConfigError: the file is missing or not TOML, or any key or value is invalid.
    """
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {str(p)!r} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: not valid TOML: {exc}") from None
    for table, why in FOREIGN_TABLES.items():
        if isinstance(data.get(table), dict):
            del data[table]
            if notes is not None:
                notes.append(f"[{table}] skipped: {why}")
    for table, name in _TABLES.items():
        if isinstance(data.get(table), dict):
            data[name] = data.pop(table)
    merged = {_resolve_key(k): v for k, v in data.items()}
    merged.update(parse_overrides(overrides))
    return GRPOConfig.from_dict(merged)


def describe() -> str:
    """Every field with its type, default and documentation (for ``--help``)."""
    hints = _hints()
    lines = []
    for f in dataclasses.fields(GRPOConfig):
        factory: Any = f.default_factory
        default = f.default if f.default is not dataclasses.MISSING else factory()
        lines.append(
            f"  --{f.name.replace('_', '-')} ({_type_name(hints[f.name])}, "
            f"default {default!r})\n      {f.metadata['doc']}"
        )
    return "\n".join(lines)
