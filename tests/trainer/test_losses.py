"""The loss against trl_grpo_spec.md §10 (six cases) and §4 (aggregation rules)."""

import math

import pytest

torch = pytest.importorskip("torch")

from gymhub.trainer.losses import k3_kl, policy_loss, truncated_importance_weights  # noqa: E402

CASES = [  # (A, p_old, p_new, expected loss) — spec §10
    (2.0, 0.50, 0.55, -2.2),
    (2.0, 0.40, 0.60, -2.4),
    (-2.0, 0.50, 0.45, 1.8),
    (-2.0, 0.50, 0.35, 1.6),
    (-2.0, 0.20, 0.50, 4.0),
    (-2.0, 0.40, 0.60, 3.0),
]


@pytest.mark.parametrize(("adv", "p_old", "p_new", "expected"), CASES)
def test_two_sided_clipping_table(adv, p_old, p_new, expected):
    logp = torch.full((1, 2), math.log(p_new), dtype=torch.float64, requires_grad=True)
    old = torch.full((1, 2), math.log(p_old), dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    loss, _ = policy_loss(
        logp,
        old,
        torch.tensor([adv], dtype=torch.float64),
        mask,
        loss_type="bnpo",
        epsilon_low=0.2,
        epsilon_high=0.2,
        delta=2.0,
        max_completion_length=2,
    )
    assert loss.item() == pytest.approx(expected, abs=1e-5)


def test_without_delta_neg_above_is_unbounded():
    logp = torch.full((1, 2), math.log(0.5), dtype=torch.float64)
    old = torch.full((1, 2), math.log(0.2), dtype=torch.float64)
    loss, m = policy_loss(
        logp,
        old,
        torch.tensor([-2.0], dtype=torch.float64),
        torch.ones(1, 2, dtype=torch.bool),
        loss_type="bnpo",
        epsilon_low=0.2,
        epsilon_high=0.2,
    )
    assert loss.item() == pytest.approx(5.0, abs=1e-5)
    assert m["clip_delta"] == 0.0


def _batch(seed=0, b=3, t=5):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(b, t, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    old = logp.detach() + 0.3 * (torch.rand(b, t, generator=g, dtype=torch.float64) - 0.5)
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]], dtype=torch.bool)
    return logp, old, adv, mask


def _per_token(logp, old, adv, eps_lo=0.2, eps_hi=0.28, delta=None):
    r = torch.exp(logp - old)
    c1 = r.clamp(max=delta) if delta is not None else r
    c2 = r.clamp(1 - eps_lo, 1 + eps_hi)
    a = adv[:, None]
    return -torch.min(c1 * a, c2 * a)


def test_grpo_aggregation():
    logp, old, adv, mask = _batch()
    ell = _per_token(logp, old, adv)
    m = mask.double()
    expected = ((ell * m).sum(-1) / m.sum(-1).clamp(min=1)).mean() / 2
    loss, _ = policy_loss(
        logp,
        old,
        adv,
        mask,
        loss_type="grpo",
        epsilon_low=0.2,
        epsilon_high=0.28,
        accumulation_steps=2,
    )
    assert loss.item() == pytest.approx(expected.item(), abs=1e-9)


def test_bnpo_aggregation():
    logp, old, adv, mask = _batch(1)
    ell = _per_token(logp, old, adv)
    m = mask.double()
    expected = (ell * m).sum() / m.sum() / 3
    loss, _ = policy_loss(
        logp,
        old,
        adv,
        mask,
        loss_type="bnpo",
        epsilon_low=0.2,
        epsilon_high=0.28,
        accumulation_steps=3,
    )
    assert loss.item() == pytest.approx(expected.item(), abs=1e-9)


def test_dr_grpo_aggregation():
    logp, old, adv, mask = _batch(2)
    ell = _per_token(logp, old, adv)
    expected = (ell * mask.double()).sum() / (3 * 16) / 2
    loss, _ = policy_loss(
        logp,
        old,
        adv,
        mask,
        loss_type="dr_grpo",
        epsilon_low=0.2,
        epsilon_high=0.28,
        max_completion_length=16,
        accumulation_steps=2,
    )
    assert loss.item() == pytest.approx(expected.item(), abs=1e-9)
    with pytest.raises(ValueError, match="max_completion_length"):
        policy_loss(logp, old, adv, mask, loss_type="dr_grpo", epsilon_low=0.2, epsilon_high=0.2)


def test_dapo_aggregation_uses_global_token_count():
    logp, old, adv, mask = _batch(3)
    ell = _per_token(logp, old, adv)
    expected = (ell * mask.double()).sum() / 40.0
    loss, _ = policy_loss(
        logp,
        old,
        adv,
        mask,
        loss_type="dapo",
        epsilon_low=0.2,
        epsilon_high=0.28,
        num_items=40,
        accumulation_steps=4,
    )
    assert loss.item() == pytest.approx(expected.item(), abs=1e-9)


def test_dapo_accumulation_is_an_exact_token_mean():
    logp, old, adv, mask = _batch(4)
    n = float(mask.sum())
    whole, _ = policy_loss(
        logp, old, adv, mask, loss_type="dapo", epsilon_low=0.2, epsilon_high=0.28, num_items=n
    )
    parts = sum(
        policy_loss(
            logp[i : i + 1],
            old[i : i + 1],
            adv[i : i + 1],
            mask[i : i + 1],
            loss_type="dapo",
            epsilon_low=0.2,
            epsilon_high=0.28,
            num_items=n,
        )[0]
        for i in range(3)
    )
    assert whole.item() == pytest.approx(parts.item(), abs=1e-12)


def test_sequence_level_ratio_is_geometric_mean():
    logp, old, adv, mask = _batch(5)
    m = mask.double()
    s = torch.exp(((logp - old) * m).sum(-1) / m.sum(-1))
    a = adv
    ell = -torch.min(s * a, s.clamp(1 - 3e-4, 1 + 4e-4) * a)
    expected = ell.mean()  # grpo: per-row mean of a constant row loss
    loss, _ = policy_loss(
        logp,
        old,
        adv,
        mask,
        loss_type="grpo",
        epsilon_low=3e-4,
        epsilon_high=4e-4,
        level="sequence",
    )
    assert loss.item() == pytest.approx(expected.item(), abs=1e-9)
    loss.backward()
    assert logp.grad is not None
    assert torch.all(logp.grad[~mask] == 0)


def test_k3_kl_term():
    logp, old, adv, mask = _batch(6)
    ref = logp.detach() - 0.1
    ell = _per_token(logp, old, adv)
    x = ref - logp
    ell = ell + 0.05 * (torch.exp(x) - x - 1)
    m = mask.double()
    expected = (ell * m).sum() / m.sum()
    loss, metrics = policy_loss(
        logp,
        old,
        adv,
        mask,
        loss_type="bnpo",
        epsilon_low=0.2,
        epsilon_high=0.28,
        ref_logp=ref,
        beta=0.05,
    )
    assert loss.item() == pytest.approx(expected.item(), abs=1e-9)
    assert metrics["kl"] > 0
    assert torch.all(k3_kl(logp, ref, mask) >= 0)
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(
            logp, old, adv, mask, loss_type="bnpo", epsilon_low=0.2, epsilon_high=0.2, beta=0.1
        )


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_all_masked_gives_zero_loss_and_zero_grad(loss_type, level):
    logp = torch.full((2, 4), -1.0, requires_grad=True)
    old = torch.full((2, 4), float("-inf"))  # garbage where masked must not leak NaN
    mask = torch.zeros(2, 4, dtype=torch.bool)
    loss, metrics = policy_loss(
        logp,
        old,
        torch.tensor([1.0, -1.0]),
        mask,
        loss_type=loss_type,
        epsilon_low=0.2,
        epsilon_high=0.2,
        delta=4.0,
        level=level,
        ref_logp=torch.zeros(2, 4),
        beta=0.1,
        max_completion_length=4,
        num_items=0,
    )
    loss.backward()
    assert loss.item() == 0.0
    assert logp.grad is not None and torch.all(logp.grad == 0)
    assert not math.isnan(sum(metrics.values()))


def test_truncated_importance_weights():
    mask = torch.tensor([[1, 1, 0]], dtype=torch.bool)
    trainer = torch.tensor([[-1.0, -1.0, -1.0]])
    engine = torch.tensor([[-2.5, -0.9, 0.0]])
    rho = truncated_importance_weights(trainer, engine, mask, cap=3.0)
    assert rho[0, 0].item() == pytest.approx(3.0)
    assert rho[0, 1].item() == pytest.approx(math.exp(-0.1))
    assert rho[0, 2].item() == 0.0
    masked = truncated_importance_weights(trainer, engine, mask, cap=3.0, mode="mask")
    assert masked[0, 0].item() == 0.0
    seq = truncated_importance_weights(trainer, engine, mask, cap=10.0, level="sequence")
    assert seq[0, 0].item() == pytest.approx(math.exp(1.5 - 0.1))


def test_is_weights_scale_policy_term_only():
    logp, old, adv, mask = _batch(7)
    w = torch.full_like(logp, 0.5)
    a, _ = policy_loss(logp, old, adv, mask, loss_type="bnpo", epsilon_low=0.2, epsilon_high=0.2)
    b, _ = policy_loss(
        logp, old, adv, mask, loss_type="bnpo", epsilon_low=0.2, epsilon_high=0.2, is_weights=w
    )
    assert b.item() == pytest.approx(a.item() / 2, abs=1e-9)


def test_bad_arguments():
    logp, old, adv, mask = _batch()
    with pytest.raises(ValueError, match="loss_type"):
        policy_loss(logp, old, adv, mask, loss_type="ppo", epsilon_low=0.2, epsilon_high=0.2)
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(logp, old, adv[:2], mask, loss_type="grpo", epsilon_low=0.2, epsilon_high=0.2)
