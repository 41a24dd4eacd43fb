"""Credit assignment: one return per trajectory, normalised within its GRPO group.

GRPO has no critic: the baseline of a trajectory is the mean return of the other
samples of the same task (its *group*). The advantage is then broadcast to every
action token of the trajectory. Choices made here, and why:

* **Return** = the verifier's final score, plus (only when enabled) the per-turn
  rewards with a discount ``γ`` counted from the start of the episode:
  ``R = score + Σ_t γ^t r_t``. Per-turn normalisation by turn index is biased when the
  policy chooses when to stop, so per-turn signal enters only through the return.
* **Partial credit** (off unless configured): ``+ Σ w_k · component_k`` of the
  verifier's score, for verdicts that are all-or-nothing (see :func:`partial_credit`).
  Only the learner's return changes; scores, evaluation and reports keep the verdict.
* **Errored trajectories** (``Score.error`` set, no score, or a rollout failure) are not
  zeros. They are left out of the group statistics, get advantage 0 and a ``keep``
  flag of ``False`` (masked), and are counted.
* **Zero-variance groups** (every valid member has the same return, or fewer than two
  valid members) get advantage exactly 0 — never a 0/0 — and are counted; with
  dynamic sampling on they are dropped (``keep=False``), since they carry no gradient
  and only dilute the token mean.
* **Scaling** (TRL's ``scale_rewards``): ``group`` divides by the group's standard
  deviation, ``batch`` by the batch's (the mean stays the group's), ``none`` does not
  divide (Dr. GRPO). Deviations use Bessel's correction and ``+1e-4`` as TRL does.
* **Truncated episodes** stay in the statistics but may be masked from the loss
  (``mask_truncated``), as DAPO recommends.

Pure Python: no torch, so it is cheap to test and to reuse for offline rescoring.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gymhub.errors import ConfigError

__all__ = [
    "STD_EPS",
    "AdvantageResult",
    "Outcome",
    "RewardScaling",
    "broadcast_to_tokens",
    "compute_advantages",
    "partial_credit",
    "trajectory_return",
]

RewardScaling = Literal["group", "batch", "none"]
#: Added to the standard deviation before dividing (TRL's constant).
STD_EPS = 1e-4


def trajectory_return(
    score: float,
    turn_rewards: Sequence[float] = (),
    *,
    use_turn_rewards: bool = False,
    discount: float = 1.0,
) -> float:
    """The scalar return of one trajectory.

    Args:
        score: the verifier's final score.
        turn_rewards: shaping rewards of each turn (the final score not included).
        use_turn_rewards: add the discounted per-turn rewards.
        discount: ``γ`` in ``[0, 1]``, applied from the first turn.
    """
    if not use_turn_rewards:
        return float(score)
    return float(score) + sum(r * discount**t for t, r in enumerate(turn_rewards))


def partial_credit(components: Mapping[str, float], weights: Mapping[str, float],
                   where: str = "the score") -> float:
    """Reward shaping from a score's components: ``Σ w_k · components[k]``.

    A binary verdict gives a GRPO group no signal when all its samples fail alike;
    a verifier's measures of how close a wrong answer came (``sql_match``'s ``runs``
    and ``rows``) do. A score without components (an episode truncated before it
    submitted anything: nothing was judged) earns none. The weights come from the
    config, so a name that a judged score lacks is a configuration mistake, raised
    rather than read as 0.

    Raises:
        ConfigError: a weighted component is missing from non-empty ``components``.
    """
    if not components:
        return 0.0
    total = 0.0
    for name, weight in weights.items():
        if name not in components:
            raise ConfigError(
                f"partial_credit weights component {name!r}, which {where} does not report "
                f"(it has: {', '.join(sorted(components))})"
            )
        total += weight * float(components[name])
    return total


@dataclass(frozen=True)
class Outcome:
    """What credit assignment needs to know about one trajectory.

    Attributes:
        group: the group key (task id and step); members share a baseline.
        value: the trajectory's return, or ``None`` when it errored.
        truncated: ended by a turn, token or context budget rather than by the agent.
    """

    group: str
    value: float | None
    truncated: bool = False


@dataclass
class AdvantageResult:
    """Advantages with the flags and counts that explain them.

    Attributes:
        advantages: one per trajectory, 0.0 for masked ones.
        keep: ``False`` for trajectories that must not enter the loss.
        errored: trajectories without a valid return.
        zero_variance_groups: groups whose valid returns are all equal.
        dropped_groups: zero-variance groups dropped by dynamic sampling.
        masked_truncated: truncated trajectories masked from the loss.
        groups: number of groups.
    """

    advantages: list[float]
    keep: list[bool]
    errored: int = 0
    zero_variance_groups: int = 0
    dropped_groups: int = 0
    masked_truncated: int = 0
    groups: int = 0
    stats: dict[str, float] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """Flat metrics for the step log."""
        n = max(len(self.advantages), 1)
        out = {
            "errored": float(self.errored),
            "zero_variance_groups": float(self.zero_variance_groups),
            "frac_zero_variance_groups": self.zero_variance_groups / max(self.groups, 1),
            "dropped_groups": float(self.dropped_groups),
            "masked_truncated": float(self.masked_truncated),
            "kept": float(sum(self.keep)),
            "frac_kept": sum(self.keep) / n,
        }
        out.update(self.stats)
        return out


def _std(values: Sequence[float]) -> float:
    """Bessel-corrected standard deviation; 0.0 below two values."""
    if len(values) < 2:
        return 0.0
    mu = sum(values) / len(values)
    return math.sqrt(sum((v - mu) ** 2 for v in values) / (len(values) - 1))


def compute_advantages(
    outcomes: Sequence[Outcome],
    *,
    scaling: RewardScaling = "group",
    dynamic_sampling: bool = False,
    mask_truncated: bool = False,
) -> AdvantageResult:
    """Group-normalised advantages (see the module docstring for every rule).

    Raises:
        ValueError: an unknown ``scaling`` or a non-finite return.
    """
    if scaling not in ("group", "batch", "none"):
        raise ValueError(f"unknown reward scaling {scaling!r}; expected group, batch or none")
    groups: dict[str, list[int]] = {}
    for i, o in enumerate(outcomes):
        if o.value is not None and not math.isfinite(o.value):
            raise ValueError(f"trajectory {i} has a non-finite return {o.value!r}")
        groups.setdefault(o.group, []).append(i)
    valid_values = [o.value for o in outcomes if o.value is not None]
    batch_std = _std(valid_values)

    adv = [0.0] * len(outcomes)
    keep = [o.value is not None for o in outcomes]
    res = AdvantageResult(advantages=adv, keep=keep, groups=len(groups))
    res.errored = sum(1 for o in outcomes if o.value is None)
    for members in groups.values():
        valid = [i for i in members if outcomes[i].value is not None]
        vals = [float(outcomes[i].value) for i in valid]  # type: ignore[arg-type]
        if len(vals) < 2 or max(vals) == min(vals):
            res.zero_variance_groups += 1
            if dynamic_sampling:
                res.dropped_groups += 1
                for i in members:
                    keep[i] = False
            continue
        mu = sum(vals) / len(vals)
        sigma = _std(vals) if scaling == "group" else batch_std if scaling == "batch" else None
        for i, v in zip(valid, vals, strict=True):
            adv[i] = (v - mu) / (sigma + STD_EPS) if sigma is not None else v - mu
    if mask_truncated:
        for i, o in enumerate(outcomes):
            if o.truncated and keep[i]:
                keep[i] = False
                adv[i] = 0.0
                res.masked_truncated += 1
    for i, k in enumerate(keep):
        if not k:
            adv[i] = 0.0
    if valid_values:
        mean = sum(valid_values) / len(valid_values)
        res.stats = {
            "return_mean": mean,
            "return_std": batch_std,
            "return_max": max(valid_values),
            "return_min": min(valid_values),
        }
    return res


def broadcast_to_tokens(advantage: float, loss_mask: Sequence[int]) -> list[float]:
    """The trajectory's advantage on each action token (mask 1), 0.0 elsewhere."""
    return [advantage if m else 0.0 for m in loss_mask]
