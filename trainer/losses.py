"""The GRPO policy loss, as pure functions of log-probability tensors.

What it is: a PPO-style clipped surrogate without a value function. Every token of a
completion carries its trajectory's advantage ``A`` (one scalar per row, see
:mod:`gymhub.trainer.advantages`); the importance ratio ``r = π_θ / π_old`` is clipped
to ``[1 - ε_low, 1 + ε_high]`` and the per-token loss is ``-min(r·A, clip(r)·A)``.

Where it departs from the textbook recipe, and why (each is a knob, defaults follow
the 2025 consensus and reproduce TRL's numbers exactly, see
``reference/trl_grpo_spec.md`` §3-§5):

* **Asymmetric clipping** (DAPO): ``ε_high`` may exceed ``ε_low`` so that unlikely
  tokens with positive advantage can still grow ("clip-higher").
* **Two-sided clipping** (``delta``, INTELLECT-2): PPO's ``min`` leaves the loss
  unbounded when ``A < 0`` and ``r`` is large; ``r`` is additionally capped at ``δ``
  in the unclipped branch so one stale token cannot blow the update up.
* **Sequence-level ratios** (``level="sequence"``, GSPO): the ratio is the geometric
  mean over the completion's loss tokens, shared by every token of the row.
* **Aggregation** (``loss_type``): how the token losses become one number matters
  more than it looks. ``grpo`` averages per sequence then over sequences (long
  answers get less weight per token); ``bnpo`` averages over the micro-batch's
  tokens; ``dr_grpo`` divides by a constant ``B · max_completion_length`` (no length
  bias); ``dapo`` divides by the token count of the *whole* generation batch, so
  gradient accumulation computes an exact token mean.
* **KL** to a reference, only when ``beta > 0``, with the k3 estimator
  ``exp(x) - x - 1``, ``x = log π_ref - log π_θ`` (non-negative, low variance). It is
  added after the importance-sampling weights and is not masked by them.
* **Global counts** (``counts``, a :class:`StepCounts`): on several processes every
  denominator is the whole optimizer step's, over every process (its sequences for
  ``grpo`` and ``dr_grpo``, its loss tokens for ``bnpo`` and ``dapo``), so the processes'
  losses, and their gradients, sum to the ones a single process computes when the step
  is one micro-batch (see :mod:`gymhub.trainer.distributed`). A local count would
  weigh a token by how many tokens happened to land on its rank.
* **Truncated importance sampling** (:func:`truncated_importance_weights`): the
  engine that sampled (vLLM, bf16) and the trainer do not compute identical
  log-probabilities; the ratio between them is capped and multiplies the policy term.

Masked positions (prompt, observation tokens, padding, masked rows) are neutralised
*before* any exponential, so an all-masked batch yields an exact zero loss with a
zero (not NaN) gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

__all__ = [
    "LOSS_TYPES",
    "LossType",
    "RatioLevel",
    "StepCounts",
    "k3_kl",
    "policy_loss",
    "truncated_importance_weights",
]

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
RatioLevel = Literal["token", "sequence"]
LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")


@dataclass(frozen=True)
class StepCounts:
    """What one optimizer step trains on, counted over every process.

    Attributes:
        tokens: loss tokens (mask 1) of the step's sequences.
        sequences: the step's sequences (trajectories).
    """

    tokens: float
    sequences: int


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_θ ‖ π_ref): ``exp(x) - x - 1``, ``x = ref - logp``.

    Masked positions are 0 (and so is their gradient).
    """
    import torch

    x = torch.where(mask, ref_logp - logp, torch.zeros_like(logp))
    return torch.exp(x) - x - 1.0


def truncated_importance_weights(
    trainer_logp: torch.Tensor,
    engine_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    cap: float,
    floor: float | None = None,
    level: RatioLevel = "token",
    mode: Literal["truncate", "mask"] = "truncate",
) -> torch.Tensor:
    """Correction weights for the engine/trainer log-probability mismatch.

    The tokens were sampled by the engine (``engine_logp``) but the surrogate assumes
    they came from the trainer's old policy (``trainer_logp``). The weight
    ``ρ = π_trainer / π_engine`` restores the right expectation; capping it at ``cap``
    bounds its variance (truncated IS). ``level="sequence"`` uses the product over the
    row's loss tokens (a sum of log differences, unlike GSPO's mean).

    Args:
        trainer_logp: ``[B, T]`` log-probs of the trainer's policy before the update.
        engine_logp: ``[B, T]`` log-probs the engine reported when sampling.
        mask: ``[B, T]`` loss mask.
        cap: upper bound ``C_max`` of the weight.
        floor: optional lower bound ``C_min``.
        level: per token or per sequence.
        mode: ``truncate`` clamps into ``[floor, cap]``; ``mask`` zeroes weights outside.

    Returns:
        ``[B, T]`` weights without gradient; masked positions are 0.
    """
    import torch

    m = mask.bool()
    with torch.no_grad():
        d = torch.where(m, trainer_logp - engine_logp, torch.zeros_like(trainer_logp))
        if level == "sequence":
            d = d.sum(dim=-1, keepdim=True).expand_as(d)
        # Clamp the log before exp so that a wild mismatch gives cap, not inf.
        rho = torch.exp(d.clamp(max=30.0))
        if mode == "truncate":
            rho = rho.clamp(min=floor, max=cap) if floor is not None else rho.clamp(max=cap)
        else:
            keep = rho <= cap
            if floor is not None:
                keep &= rho >= floor
            rho = torch.where(keep, rho, torch.zeros_like(rho))
        return torch.where(m, rho, torch.zeros_like(rho))


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: LossType,
    epsilon_low: float,
    epsilon_high: float,
    delta: float | None = None,
    level: RatioLevel = "token",
    ref_logp: torch.Tensor | None = None,
    beta: float = 0.0,
    max_completion_length: int | None = None,
    is_weights: torch.Tensor | None = None,
    num_items: float | None = None,
    accumulation_steps: int = 1,
    counts: StepCounts | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped GRPO surrogate for one micro-batch (see the module docstring).

    Args:
        logp: ``[B, T]`` log π_θ of the sampled tokens (with gradient).
        old_logp: ``[B, T]`` log π_old (no gradient needed; it is detached).
        advantages: ``[B]`` one advantage per row.
        mask: ``[B, T]`` 1 on tokens that are trained on, 0 elsewhere.
        loss_type: ``grpo``, ``bnpo``, ``dr_grpo`` or ``dapo`` (the aggregation).
        epsilon_low: lower clip ``1 - ε_low``.
        epsilon_high: upper clip ``1 + ε_high``.
        delta: two-sided bound on the unclipped ratio (INTELLECT-2), or ``None``.
        level: ``token`` ratios, or ``sequence`` (GSPO geometric mean).
        ref_logp: ``[B, T]`` reference log-probs, needed when ``beta > 0``.
        beta: weight of the k3 KL penalty.
        max_completion_length: the constant denominator of ``dr_grpo``.
        is_weights: ``[B, T]`` truncated importance weights (engine mismatch), or ``None``.
        num_items: ``dapo``'s denominator: loss tokens in the whole generation batch
            (divided by the number of processes); defaults to this micro-batch's count.
        accumulation_steps: ``GA``, the micro-batches summed into one optimizer step.
        counts: the whole optimizer step's sequences and loss tokens over every process;
            when given, every ``loss_type`` divides by them (``grpo``: the per-sequence
            means' sum by ``counts.sequences``; ``bnpo`` and ``dapo``: by
            ``counts.tokens``; ``dr_grpo``: by ``counts.sequences · max_completion_length``)
            and ``num_items`` and ``accumulation_steps`` are not used.

    Returns:
        The scalar loss and detached metrics (``clip_low``, ``clip_high``,
        ``clip_delta`` fractions of loss tokens, ``ratio_mean``, ``kl``, ``tokens``).

    Raises:
        ValueError: unknown ``loss_type``/``level``, shapes disagree, ``dr_grpo``
            without ``max_completion_length`` or ``beta > 0`` without ``ref_logp``.
    """
    import torch

    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}; expected one of {LOSS_TYPES}")
    if level not in ("token", "sequence"):
        raise ValueError(f"unknown ratio level {level!r}; expected 'token' or 'sequence'")
    if logp.shape != old_logp.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(
            f"logp, old_logp and mask must share one [batch, tokens] shape, got "
            f"{tuple(logp.shape)}, {tuple(old_logp.shape)}, {tuple(mask.shape)}"
        )
    if advantages.shape != logp.shape[:1]:
        raise ValueError(
            f"advantages must be [batch]={logp.shape[0]}, got {tuple(advantages.shape)}"
        )
    if beta > 0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp")
    if loss_type == "dr_grpo" and not max_completion_length:
        raise ValueError("loss_type 'dr_grpo' needs max_completion_length")
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps}")

    m = mask.bool()
    mf = m.to(logp.dtype)
    zeros = torch.zeros_like(logp)
    log_ratio = torch.where(m, logp - old_logp.detach(), zeros)
    if level == "sequence":
        seq = (log_ratio * mf).sum(-1, keepdim=True) / mf.sum(-1, keepdim=True).clamp(min=1.0)
        log_ratio = seq.expand_as(logp)
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logp.dtype).unsqueeze(-1)

    unclipped = ratio.clamp(max=delta) if delta is not None else ratio
    clipped = ratio.clamp(1.0 - epsilon_low, 1.0 + epsilon_high)
    per_token = -torch.min(unclipped * adv, clipped * adv)
    if is_weights is not None:
        per_token = per_token * is_weights.detach()
    kl: torch.Tensor | None = None
    if ref_logp is not None and beta > 0:
        kl = k3_kl(logp, ref_logp.detach(), m)
        per_token = per_token + beta * kl
    per_token = torch.where(m, per_token, zeros)

    batch = logp.shape[0]
    total = per_token.sum()
    if counts is not None:
        loss = _global_mean(loss_type, per_token, mf, counts, max_completion_length)
    elif loss_type == "grpo":
        per_row = per_token.sum(-1) / mf.sum(-1).clamp(min=1.0)
        loss = per_row.sum() / max(batch, 1) / accumulation_steps
    elif loss_type == "bnpo":
        loss = total / mf.sum().clamp(min=1.0) / accumulation_steps
    elif loss_type == "dr_grpo":
        assert max_completion_length is not None
        loss = total / (max(batch, 1) * max_completion_length) / accumulation_steps
    else:  # dapo
        denom = float(num_items) if num_items is not None else None
        if denom is None:
            loss = total / mf.sum().clamp(min=1.0) / accumulation_steps
        else:
            loss = total / max(denom, 1.0)

    metrics = _metrics(ratio, adv, m, epsilon_low, epsilon_high, delta, kl)
    return loss, metrics


def _global_mean(loss_type: str, per_token: torch.Tensor, mf: torch.Tensor, counts: StepCounts,
                 max_completion_length: int | None) -> torch.Tensor:
    """This micro-batch's share of the step's loss, divided by the step's global counts."""
    sequences = float(max(counts.sequences, 1))
    if loss_type == "grpo":
        return (per_token.sum(-1) / mf.sum(-1).clamp(min=1.0)).sum() / sequences
    if loss_type == "dr_grpo":
        assert max_completion_length is not None
        return per_token.sum() / (sequences * max_completion_length)
    return per_token.sum() / max(float(counts.tokens), 1.0)  # bnpo, dapo


def _metrics(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    m: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    delta: float | None,
    kl: torch.Tensor | None,
) -> dict[str, float]:
    """Fractions of loss tokens where each clip binds, and means, all detached."""
    import torch

    with torch.no_grad():
        n = max(int(m.sum().item()), 0)
        denom = float(max(n, 1))
        a = adv.expand_as(ratio)
        low = ((ratio < 1.0 - epsilon_low) & (a < 0) & m).sum().item() / denom
        high = ((ratio > 1.0 + epsilon_high) & (a > 0) & m).sum().item() / denom
        dlt = 0.0
        if delta is not None:
            dlt = ((ratio > delta) & (a < 0) & m).sum().item() / denom
        ratio_mean = (
            (torch.where(m, ratio, torch.zeros_like(ratio)).sum().item() / denom) if n else 1.0
        )
        kl_mean = (kl.sum().item() / denom) if kl is not None else 0.0
    return {
        "clip_low": float(low),
        "clip_high": float(high),
        "clip_delta": float(dlt),
        "ratio_mean": float(ratio_mean),
        "kl": float(kl_mean),
        "tokens": float(n),
    }
