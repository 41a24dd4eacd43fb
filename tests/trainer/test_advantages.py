"""Credit assignment: group/batch/none scaling, zero-variance groups, errors, truncation."""

import math

import pytest

from gymhub.errors import ConfigError
from gymhub.trainer.advantages import (
    Outcome,
    broadcast_to_tokens,
    compute_advantages,
    partial_credit,
    trajectory_return,
)


def _std(xs):
    mu = sum(xs) / len(xs)
    return math.sqrt(sum((x - mu) ** 2 for x in xs) / (len(xs) - 1))


def test_group_scaling_matches_formula():
    vals = [1.0, 0.0, 0.0, 1.0, 0.5, 0.25]
    outs = [Outcome("a", v) for v in vals[:4]] + [Outcome("b", v) for v in vals[4:]]
    res = compute_advantages(outs, scaling="group")
    mu_a, sd_a = 0.5, _std(vals[:4])
    assert res.advantages[0] == pytest.approx((1 - mu_a) / (sd_a + 1e-4))
    mu_b, sd_b = 0.375, _std(vals[4:])
    assert res.advantages[5] == pytest.approx((0.25 - mu_b) / (sd_b + 1e-4))
    assert all(res.keep) and res.zero_variance_groups == 0


def test_batch_scaling_keeps_group_mean():
    vals = [1.0, 0.0, 0.75, 0.25]
    outs = [
        Outcome("a", vals[0]),
        Outcome("a", vals[1]),
        Outcome("b", vals[2]),
        Outcome("b", vals[3]),
    ]
    res = compute_advantages(outs, scaling="batch")
    sd = _std(vals)
    assert res.advantages[0] == pytest.approx(0.5 / (sd + 1e-4))
    assert res.advantages[2] == pytest.approx(0.25 / (sd + 1e-4))


def test_no_scaling_is_mean_centred():
    res = compute_advantages(
        [Outcome("a", 1.0), Outcome("a", 0.0), Outcome("a", 0.5)], scaling="none"
    )
    assert res.advantages == pytest.approx([0.5, -0.5, 0.0])


def test_zero_variance_group_gives_zero_not_nan():
    outs = [Outcome("a", 1.0)] * 4 + [Outcome("b", 1.0), Outcome("b", 0.0)]
    for scaling in ("group", "batch", "none"):
        res = compute_advantages(outs, scaling=scaling)
        assert res.advantages[:4] == [0.0] * 4
        assert not any(math.isnan(a) for a in res.advantages)
        assert res.zero_variance_groups == 1 and res.keep[:4] == [True] * 4
        assert res.metrics()["frac_zero_variance_groups"] == 0.5


def test_dynamic_sampling_drops_zero_variance_groups():
    outs = [Outcome("a", 0.0)] * 3 + [Outcome("b", 1.0), Outcome("b", 0.0)]
    res = compute_advantages(outs, dynamic_sampling=True)
    assert res.keep == [False, False, False, True, True]
    assert res.dropped_groups == 1


def test_errored_trajectories_are_masked_not_zeroed():
    outs = [Outcome("a", 1.0), Outcome("a", None), Outcome("a", 0.0), Outcome("a", 0.0)]
    res = compute_advantages(outs)
    assert res.errored == 1 and res.keep == [True, False, True, True]
    assert res.advantages[1] == 0.0
    # the error does not count as a 0: the mean is over the three valid returns
    assert res.advantages[0] == pytest.approx((1 - 1 / 3) / (_std([1.0, 0.0, 0.0]) + 1e-4))


def test_group_with_one_valid_member_is_zero_variance():
    res = compute_advantages([Outcome("a", 1.0), Outcome("a", None)])
    assert res.advantages == [0.0, 0.0] and res.zero_variance_groups == 1


def test_mask_truncated_keeps_statistics():
    outs = [Outcome("a", 1.0), Outcome("a", 0.0, truncated=True), Outcome("a", 0.0)]
    plain = compute_advantages(outs)
    masked = compute_advantages(outs, mask_truncated=True)
    assert masked.keep == [True, False, True] and masked.masked_truncated == 1
    assert masked.advantages[0] == pytest.approx(plain.advantages[0])
    assert masked.advantages[1] == 0.0


def test_all_errored_batch():
    res = compute_advantages([Outcome("a", None), Outcome("a", None)])
    assert res.keep == [False, False] and res.errored == 2 and res.advantages == [0.0, 0.0]


def test_bad_input():
    with pytest.raises(ValueError, match="scaling"):
        compute_advantages([], scaling="rank")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-finite"):
        compute_advantages([Outcome("a", float("inf"))])


def test_trajectory_return_and_broadcast():
    assert trajectory_return(1.0, [0.5, 0.5]) == 1.0
    assert trajectory_return(1.0, [0.5, 0.5], use_turn_rewards=True, discount=0.5) == 1.75
    assert broadcast_to_tokens(0.7, [0, 1, 1, 0]) == [0.0, 0.7, 0.7, 0.0]


def test_partial_credit_weights_components_and_refuses_missing_ones():
    comps = {"fixture": 0.0, "runs": 1.0, "rows": 0.5}
    assert partial_credit(comps, {}) == 0.0
    assert partial_credit({}, {"runs": 0.1}) == 0.0  # nothing judged (truncated): no credit
    assert partial_credit(comps, {"runs": 0.1, "rows": 0.4}) == pytest.approx(0.3)
    with pytest.raises(ConfigError, match=r"'colums'.*it has: fixture, rows, runs"):
        partial_credit(comps, {"colums": 1.0})
