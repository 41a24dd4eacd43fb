"""``GRPOConfig``: every knob of a training run, documented where it is declared.

A run is described by a TOML file of flat ``key = value`` pairs (the field names
below) and may be overridden on the command line with ``--key value`` (or
``--key=value``; dashes and underscores are interchangeable). Unknown keys and bad
values fail before anything is loaded, as a :class:`~gymhub.errors.ConfigError` that
names the key (with a "did you mean" hint for a misspelt one).

Why pydantic and argparse, and where the line between them is:

* :class:`GRPOConfig` is a pydantic model: the field types, ranges (``Field(ge=...)``)
  and cross-field rules are declared once and pydantic enforces them, in strict mode,
  because a TOML file is already typed and ``group_size = "8"`` is a mistake to report,
  not a string to coerce. Each field's ``description`` is what ``--help`` shows.
* The command line is read by :mod:`argparse` (every field is an option, a ``bool``
  may be a bare flag) and each value, a string, is converted by pydantic's lax mode
  for that field's type (``"1e-4"``, ``"yes"``, ``"grpo"``). The only syntax of our
  own is what a shell string cannot otherwise say: ``none`` for an optional value,
  ``a,b`` for a list and ``k=v,k2=v2`` for a table (JSON works for both too).

pydantic's and argparse's own messages are rewritten into one line per problem that
names the key, because the person reading it typed a TOML key or a flag, not a
pydantic location.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import tomllib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from pydantic_core import ErrorDetails

from gymhub.errors import ConfigError

__all__ = ["FOREIGN_TABLES", "GRPOConfig", "describe", "load_config", "parse_overrides"]

_LORA_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class GRPOConfig(BaseModel):
    """Configuration of one GRPO run. Defaults are a small, safe CPU run.

    Construction validates every field (types strictly, ranges, cross-field rules) and
    raises :class:`~gymhub.errors.ConfigError` naming the key; attribute assignment
    afterwards is not re-validated, as with the dataclass this replaced.
    """

    # defer_build: ``gymhub train --help`` reads the fields, not the validator.
    model_config = ConfigDict(strict=True, extra="forbid", defer_build=True)

    # --- model and engine
    model: str = Field(
        default="",
        description="Path of a local transformers model directory (config, weights, tokenizer).",
    )
    tokenizer: str | None = Field(
        default=None, description="Tokenizer directory when it differs from `model`."
    )
    engine: Literal["transformers", "vllm", "vllm-server"] = Field(
        default="transformers",
        description="Generation engine: in-process transformers, colocated vLLM, or a vLLM "
        "server.",
    )
    engine_url: str | None = Field(
        default=None,
        description="Base URL of the vLLM OpenAI-compatible server (engine=vllm-server).",
    )
    cross_turn_cache: bool = Field(
        default=True,
        description="transformers engine: keep each episode's KV cache between its turns, so "
        "a turn prefills only the new observation; off re-reads the whole context every turn "
        "(for comparison and debugging; the ids and log-probabilities are the engine's either "
        "way).",
    )
    vllm_gpu_memory_utilization: float = Field(
        default=0.3, description="Fraction of GPU memory vLLM may take (colocated)."
    )
    vllm_enforce_eager: bool = Field(
        default=True,
        description="Disable CUDA graphs in vLLM (stable weight updates, less memory).",
    )
    vllm_enable_prefix_caching: bool = Field(
        default=True, description="Reuse KV cache across turns of an episode in vLLM."
    )
    vllm_enable_sleep_mode: bool = Field(
        default=False, description="Free vLLM's memory while the trainer updates."
    )
    vllm_sync_timeout: float = Field(
        default=300.0, gt=0,
        description="Seconds one weight push into vLLM may take before the run fails.",
    )
    # --- environments
    env_ids: list[str] = Field(
        default_factory=lambda: ["echo-v0"],
        min_length=1,
        description="Environment ids to train on; tasks are drawn from all of them.",
    )
    env_urls: list[str] = Field(
        default_factory=list,
        description="Environment server URLs; empty runs the environments in-process.",
    )
    env_urls_file: str | None = Field(
        default=None,
        description="A file listing environment server URLs, one per line (blank lines and "
        "# comments ignored), as `gymhub launch ray --urls-file` keeps it. Re-read while "
        "training (at most every second): servers added join, servers removed get no new "
        "episodes, a server replaced under a new URL is picked up without a restart. "
        "Exclusive with env_urls.",
    )
    env_wait_s: float = Field(
        default=60.0,
        ge=0,
        description="Seconds to wait before the first step for environment servers that are "
        "still starting (connection refused, 503, an env_urls_file missing or empty); past "
        "it the run stops with an error naming each server and why. 0 looks once.",
    )
    env_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Constructor arguments of every environment in env_ids (TOML table "
        "[env]), e.g. show_schema = true. In-process they go to gymhub.envs.make; against "
        "servers (env_urls) they belong to `gymhub serve --env-arg`, and a server that runs "
        "with other arguments is an error at start (empty: accept whatever the servers run).",
    )
    tool_parser: Literal["hermes", "json", "tags"] = Field(
        default="hermes",
        description="How tool calls are read from the model's text (see trainer.parsers).",
    )
    tag_tools: dict[str, str] = Field(
        default_factory=dict,
        description="For tool_parser=tags: tag -> 'tool' or 'tool:argument' "
        "(e.g. {sql = 'query:sql', submit = 'submit:answer'}).",
    )
    eval_tasks: int = Field(
        default=0,
        ge=0,
        description="Tasks per environment held out for evaluation (never trained on): those "
        "whose hash of 'env/task_id' sorts first, so the split does not depend on task order.",
    )
    task_filter: dict[str, str] = Field(
        default_factory=dict,
        description="Keep only tasks whose meta[key] is one of the comma-separated values "
        "(e.g. {difficulty = 'easy', schema = 'retail,hr'}); applied before the split.",
    )
    instructions: str = Field(
        default="",
        description="Text appended to the environment's system message (e.g. the answer "
        "format the tool parser expects); part of the prompt the model is trained on.",
    )
    render_tools: bool = Field(
        default=True,
        description="Pass the environment's tool schemas to the chat template (off for "
        "tag-style parsing, where they only lengthen the prompt).",
    )
    # --- sampling and budgets
    group_size: int = Field(
        default=4, ge=2, description="G: episodes per task; they share the GRPO baseline."
    )
    tasks_per_step: int = Field(
        default=2,
        ge=1,
        description="Tasks per step; a step trains on tasks_per_step * group_size episodes.",
    )
    max_steps: int = Field(
        default=10, ge=0, description="Training steps (one rollout batch and its updates each)."
    )
    max_turns: int = Field(
        default=4, ge=1, description="Assistant turns per episode before it is truncated."
    )
    max_tokens_per_turn: int = Field(
        default=64, ge=1, description="Tokens the model may generate in one turn."
    )
    max_tokens_per_episode: int = Field(
        default=256, ge=1, description="Tokens the model may generate over a whole episode."
    )
    max_context_tokens: int = Field(
        default=2048, ge=1, description="Total episode length (prompt + all turns) before "
        "truncation."
    )
    temperature: float = Field(
        default=1.0, ge=0, description="Sampling temperature (also divides the trainer's logits)."
    )
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling threshold.")
    stop: list[str] = Field(
        default_factory=list,
        description="Extra stop strings (the end-of-turn token always stops).",
    )
    max_concurrent_episodes: int = Field(
        default=64, ge=1, description="Episodes in flight at once."
    )
    # --- optimisation
    learning_rate: float = Field(default=1e-5, description="Peak AdamW learning rate.")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        default="constant", description="Decay after warm-up."
    )
    warmup_steps: int = Field(default=0, ge=0, description="Optimizer steps of linear warm-up.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(
        default=1.0, ge=0, description="Gradient clipping norm; 0 disables."
    )
    micro_batch_size: int = Field(
        default=4, ge=1, description="Trajectories per forward/backward pass."
    )
    updates_per_batch: int = Field(
        default=1, ge=1, le=16,
        description="Passes over each rollout batch (GRPO's mu, TRL's num_iterations): "
        "more updates per generation; passes after the first are clipped against the "
        "sampling policy's log-probabilities.",
    )
    gradient_accumulation_steps: int = Field(
        default=0,
        ge=0,
        description="Micro-batches per optimizer step; 0 = the whole rollout batch in one update.",
    )
    # --- loss (see trainer.losses)
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = Field(
        default="dapo", description="Loss aggregation."
    )
    importance_sampling_level: Literal["token", "sequence"] = Field(
        default="token", description="Importance ratio per token, or per sequence (GSPO)."
    )
    epsilon_low: float = Field(
        default=0.2,
        ge=0,
        description="Lower clip: ratios below 1 - epsilon_low stop the gradient.",
    )
    epsilon_high: float = Field(default=0.28, ge=0, description="Upper clip (DAPO clip-higher).")
    delta: float | None = Field(
        default=None,
        description="Two-sided bound (> 1 + epsilon_high) on the ratio for negative "
        "advantages (INTELLECT-2).",
    )
    beta: float = Field(
        default=0.0, ge=0, description="Weight of the k3 KL to the reference model; 0 loads no "
        "reference."
    )
    tis_cap: float | None = Field(
        default=None,
        gt=0,
        description="Cap of the truncated importance weight engine -> trainer; None = off.",
    )
    # --- credit assignment (see trainer.advantages)
    reward_scaling: Literal["group", "batch", "none"] = Field(
        default="group", description="Std used to scale advantages."
    )
    dynamic_sampling: bool = Field(
        default=False, description="Drop zero-variance groups from the loss (DAPO)."
    )
    mask_truncated: bool = Field(
        default=False, description="Mask episodes that hit a budget from the loss."
    )
    partial_credit: dict[str, float] = Field(
        default_factory=dict,
        description="Reward shaping: weights of the verifier's score components added to "
        "the return, e.g. {runs = 0.1, rows = 0.3} for sql_match; evaluation still uses "
        "the score. A name the score lacks is an error.",
    )
    use_turn_rewards: bool = Field(
        default=False, description="Add per-turn rewards to the final score in the return."
    )
    discount: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="Discount of per-turn rewards, counted from the first turn.",
    )
    # --- model adaptation and precision
    finetune: Literal["lora", "full"] = Field(
        default="lora", description="LoRA adapters (peft) or full fine-tuning."
    )
    lora_r: int = Field(default=16, ge=1, description="LoRA rank (size of the low-rank update).")
    lora_alpha: int = Field(
        default=32, description="LoRA alpha (the update is scaled by alpha / r)."
    )
    lora_dropout: float = Field(
        default=0.0, description="LoRA dropout (0 keeps rollouts and updates consistent)."
    )
    lora_target_modules: list[str] = Field(
        default_factory=lambda: list(_LORA_MODULES),
        description="Module names that get LoRA adapters.",
    )
    bf16: bool = Field(default=False, description="Load and train the model in bfloat16.")
    device: str = Field(
        default="auto",
        pattern=r"^(auto|cpu|cuda(:\d+)?)$",
        description="Where the policy trains: auto (the first GPU when torch sees one, else "
        "the CPU), cpu, cuda or cuda:N.",
    )
    gradient_checkpointing: bool = Field(
        default=False, description="Recompute activations in backward to save memory."
    )
    shared_prompt_update: bool = Field(
        default=True,
        description="In the update, forward a GRPO group's common prompt once and let every "
        "sample attend to its keys and values (same values and gradients, far less work "
        "when prompts are long); off under gradient_checkpointing.",
    )
    # --- processes (see trainer.distributed)
    nproc: int = Field(
        default=1,
        ge=1,
        description="Learner processes on this machine. Above 1, `gymhub train` re-launches "
        "itself through torch.distributed.run (torchrun --standalone): each process plays "
        "its share of every step's GRPO groups and the policy is sharded with FSDP2 (gloo on "
        "the CPU, NCCL with one GPU per process); results do not depend on the number. "
        "Ignored inside a process torchrun started (its --nproc-per-node decides).",
    )
    dist_timeout_s: float = Field(
        default=1800.0,
        gt=0,
        description="With several processes: seconds a collective (gathering the step's "
        "trajectories, a weight all-gather, a checkpoint) waits for the slowest process "
        "before the run fails with an error, instead of hanging on one that died.",
    )
    # --- bookkeeping
    checkpoint_interval: int = Field(
        default=0, ge=0, description="Steps between checkpoints; 0 = only at the end."
    )
    eval_interval: int = Field(
        default=0, ge=0, description="Steps between evaluations on held-out tasks; 0 = off."
    )
    seed: int = Field(default=0, description="Seed of task order, sampling and initialisation.")
    output_dir: str = Field(
        default="runs/grpo", description="Where metrics, trajectories and checkpoints go."
    )
    resume: str | None = Field(
        default=None, description="Checkpoint directory to resume from, or 'latest'."
    )
    save_trajectories: bool = Field(
        default=True, description="Write every trajectory to trajectories.jsonl."
    )
    drift_check: Literal["off", "warn", "strict"] = Field(
        default="warn",
        description="Compare each episode's ids with a full render: report, raise, or skip.",
    )
    progress: bool = Field(default=True, description="Show a progress line on stderr.")
    report: bool = Field(
        default=True,
        description="At the end, write report.json and a reward-curve PNG to output_dir.",
    )
    tensorboard: bool = Field(
        default=True,
        description="Also log scalars to output_dir/tensorboard when TensorBoard is installed.",
    )

    if not TYPE_CHECKING:  # type checkers keep the typed keyword __init__ pydantic declares

        def __init__(self, **data: Any) -> None:
            # pydantic wraps every ValueError raised during validation (ConfigError is
            # one) in a ValidationError; this is the one place that turns it back.
            try:
                super().__init__(**data)
            except ValidationError as exc:
                raise _config_error(exc, data) from None

    @model_validator(mode="after")
    def _cross_field_rules(self) -> Self:
        if self.delta is not None and self.delta <= 1.0 + self.epsilon_high:
            raise ValueError(f"delta must exceed 1 + epsilon_high = {1 + self.epsilon_high}")
        bad = {k: v for k, v in self.partial_credit.items() if not (k and math.isfinite(v))}
        if bad:
            raise ValueError(f"partial_credit needs component names and finite weights, got {bad}")
        if self.env_urls and self.env_urls_file:
            raise ValueError("env_urls and env_urls_file are exclusive: list the servers in "
                             "one of them")
        if self.engine == "vllm-server" and not self.engine_url:
            raise ValueError("engine 'vllm-server' needs engine_url")
        if self.engine != "transformers" and not (
            self.temperature == 0 or 0.01 <= self.temperature <= 2.0
        ):
            raise ValueError(
                f"engine {self.engine!r} needs temperature 0 or within [0.01, 2]: vLLM refuses "
                "a temperature above 2 and raises one below 0.01, which the trainer would not "
                f"(got {self.temperature})"
            )
        if self.engine != "transformers" and self.top_p < 1.0:
            raise ValueError(
                f"engine {self.engine!r} needs top_p = 1: vLLM renormalises its "
                "log-probabilities over the top-p nucleus, which the trainer does not"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-ready dict of every field (what checkpoints record)."""
        return self.model_dump()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GRPOConfig:
        """Build from a mapping (e.g. parsed TOML); keys may use dashes or underscores.

        Raises:
            ConfigError: unknown key (with a suggestion) or a value of the wrong type.
        """
        return cls(**{_normalise(str(k)): v for k, v in data.items()})


# ------------------------------------------------------------------- messages
def _normalise(key: str) -> str:
    return key.strip().lstrip("-").replace("-", "_")


def _unknown_key(key: str) -> ConfigError:
    close = difflib.get_close_matches(_normalise(key), list(GRPOConfig.model_fields), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"unknown config key {key!r}{hint}")


_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
           "less_than_equal": "<="}


def _explain(err: ErrorDetails, data: Mapping[str, Any], flag: str = "") -> str:
    """One line for one pydantic error, naming the key (or ``flag`` on the command line)."""
    kind, loc, ctx = err["type"], err["loc"], err.get("ctx", {})
    if not loc:  # a cross-field rule: its message already names the keys
        return str(ctx.get("error", err["msg"]))
    key = str(loc[0])
    if kind == "extra_forbidden":
        return str(_unknown_key(key))
    name = flag or key
    value = data.get(key, err["input"])
    if kind == "literal_error":
        return f"{name} must be one of {ctx['expected']}, got {value!r}"
    if kind in _BOUNDS:
        limit = next(iter(ctx.values()))
        return f"{name} must be {_BOUNDS[kind]} {limit}, got {value!r}"
    if kind == "too_short":
        return f"{name} must not be empty"
    field = GRPOConfig.model_fields.get(key)
    expected = _type_name(field.annotation) if field is not None else "another type"
    return f"{name} expects {expected}, got {value!r}"


def _config_error(
    exc: ValidationError, data: Mapping[str, Any], flag: str = "", field: str = ""
) -> ConfigError:
    """``field``: the key a one-field validation (no location of its own) was about."""
    errors = exc.errors()
    if field:
        errors = [{**e, "loc": (field, *e["loc"])} for e in errors]
    lines = list(dict.fromkeys(_explain(e, data, flag) for e in errors))
    return ConfigError("; ".join(lines))


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(tp) if a is not type(None))
    return None


def _type_name(tp: Any) -> str:
    """How ``--help`` and error messages spell a field's type."""
    inner = _union_args(tp)
    if inner is not None and len(inner) == 1:
        return _type_name(inner[0]) + " or none"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return "one of " + "/".join(map(str, args))
    if origin is list:
        return "a list of strings"
    if origin is dict:
        return "a table of strings" if args[1] is str else "a table"
    return str(getattr(tp, "__name__", tp))


def _constraints(name: str) -> str:
    """``" >= 2"``-style bounds of a field, from its pydantic metadata."""
    parts = []
    for meta in GRPOConfig.model_fields[name].metadata:
        for attr, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if getattr(meta, attr, None) is not None:
                parts.append(f"{op} {getattr(meta, attr)}")
    return (" " + ", ".join(parts)) if parts else ""


# --------------------------------------------------------------- command line
def _coerce(name: str, raw: str) -> Any:
    """A command-line string -> the field's type, by pydantic's lax mode for that type."""
    tp: Any = GRPOConfig.model_fields[name].annotation
    flag = "--" + name.replace("_", "-")
    text = raw.strip()
    if _union_args(tp) is not None and text.lower() in ("none", "null", ""):
        return None
    origin = typing.get_origin(tp)
    value: Any = raw if tp is str else text
    try:
        if origin in (list, dict) and text.startswith(("[", "{")):
            return TypeAdapter(tp).validate_json(text)
        if origin is list:
            value = [p.strip() for p in text.split(",") if p.strip()]
        elif origin is dict:
            pairs = [p.partition("=") for p in text.split(",") if p.strip()]
            if not all(sep for _, sep, _ in pairs):
                raise ConfigError(f"{flag} expects {_type_name(tp)} as k=v,k2=v2, got {raw!r}")
            texts = typing.get_args(tp)[1] is str
            value = {k.strip(): v.strip() if texts else _json_or_text(v.strip())
                     for k, _, v in pairs}
        return TypeAdapter(tp).validate_python(value, strict=False)
    except ValidationError as exc:
        raise _config_error(exc, {name: raw}, flag, name) from None


def _json_or_text(text: str) -> Any:
    """``true`` -> True, ``3`` -> 3, ``"a"`` -> "a"; anything that is not JSON stays text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _argument_parser() -> argparse.ArgumentParser:
    """One option per field, both spellings; a ``bool`` may stand alone (``--bf16``)."""
    parser = argparse.ArgumentParser(
        prog="gymhub train", add_help=False, allow_abbrev=False, exit_on_error=False
    )
    for name, info in GRPOConfig.model_fields.items():
        flags = dict.fromkeys([f"--{name.replace('_', '-')}", f"--{name}"])
        bare = {"nargs": "?", "const": "true"} if info.annotation is bool else {}
        parser.add_argument(*flags, dest=name, default=argparse.SUPPRESS, **bare)  # type: ignore[arg-type]
    return parser


def parse_overrides(argv: Sequence[str]) -> dict[str, Any]:
    """Parse ``--key value`` / ``--key=value`` pairs into typed values.

    A bare ``--flag`` followed by another ``--key`` (or nothing) means ``true``. A value
    that begins with a dash other than a plain negative number (``-3``, ``-0.5``) needs
    the ``--key=value`` form.

    Raises:
        ConfigError: a stray value, an unknown key or a value that does not convert.
    """
    try:
        namespace, rest = _argument_parser().parse_known_args(list(argv))
    except argparse.ArgumentError as exc:
        name = exc.argument_name or "an option"
        if "expected one argument" in exc.message:
            flag = name.split("/")[0]
            tp = GRPOConfig.model_fields[_normalise(flag)].annotation
            raise ConfigError(
                f"{flag} needs a value ({_type_name(tp)}; write {flag}=VALUE for a value "
                "that starts with a dash)"
            ) from None
        raise ConfigError(f"{name}: {exc.message}") from None
    for tok in rest:
        if tok.startswith("--") and len(tok) > 2:
            raise _unknown_key(tok.partition("=")[0])
        raise ConfigError(f"expected --key value, got {tok!r}")
    return {name: _coerce(name, raw) for name, raw in vars(namespace).items()}


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
    merged = {_normalise(k): v for k, v in data.items()}
    merged.update(parse_overrides(overrides))
    return GRPOConfig.from_dict(merged)


def describe() -> str:
    """Every field with its type, bounds, default and documentation (for ``--help``)."""
    lines = []
    for name, info in GRPOConfig.model_fields.items():
        default = info.get_default(call_default_factory=True)
        kind = _type_name(info.annotation)
        base, optional, _ = kind.partition(" or none")  # bounds belong to the number
        kind = base + _constraints(name) + optional
        lines.append(
            f"  --{name.replace('_', '-')} ({kind}, default {default!r})\n      {info.description}"
        )
    return "\n".join(lines)
