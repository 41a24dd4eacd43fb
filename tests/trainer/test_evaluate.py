"""Scoring a model: greedy by default, avg@k over sampled episodes on request."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from gymhub.trainer.backends import InProcessBackend  # noqa: E402
from gymhub.trainer.config import GRPOConfig  # noqa: E402
from gymhub.trainer.evaluate import EvalResult  # noqa: E402
from gymhub.trainer.loop import GRPOTrainer  # noqa: E402

from .conftest import ParityEnv, build_model  # noqa: E402


@pytest.fixture
def trainer(tmp_path, tokenizer):
    torch.manual_seed(0)
    cfg = GRPOConfig(model="tiny", env_ids=["parity-v0"], finetune="full", max_turns=1,
                     max_tokens_per_turn=6, max_tokens_per_episode=6, eval_tasks=0,
                     output_dir=str(tmp_path), progress=False, seed=1)
    backend = InProcessBackend(factory=lambda env_id, **_: ParityEnv())
    return GRPOTrainer(cfg, model=build_model(len(tokenizer)), tokenizer=tokenizer,
                       backend=backend)


def test_avg_at_k_scores_each_task_by_the_mean_of_its_samples(trainer):
    tasks = [("parity-v0", f"t{i}") for i in range(6)]
    result = trainer.evaluate_tasks(tasks, samples=4, temperature=1.0)
    assert result.episodes == 24 and result.samples == 4 and result.temperature == 1.0
    assert result.scored == 6 and set(result.scores) == {f"parity-v0/t{i}" for i in range(6)}
    values = list(result.scores.values())
    assert all(v is not None and v * 4 == int(v * 4) for v in values)  # quarters
    assert any(v not in (0.0, 1.0) for v in values)  # a sampled coin is not a verdict
    assert result.mean == pytest.approx(sum(values) / 6)
    # the same tasks draw the same numbers again: a paired comparison shares its luck
    again = trainer.evaluate_tasks(tasks, samples=4, temperature=1.0)
    assert again.scores == result.scores
    greedy = trainer.evaluate_tasks(tasks)
    assert greedy.episodes == 6 and greedy.samples == 1 and greedy.temperature == 0.0
    assert set(greedy.scores.values()) <= {0.0, 1.0}


def test_several_samples_need_a_temperature(trainer):
    tasks = [("parity-v0", "t0")]
    with pytest.raises(ValueError, match="temperature"):
        trainer.evaluate_tasks(tasks, samples=2)
    with pytest.raises(ValueError, match="at least 1"):
        trainer.evaluate_tasks(tasks, samples=0, temperature=1.0)


def _traj(task, value, errored=False):
    return SimpleNamespace(env_id="e", task_id=task, value=None if errored else value,
                           errored=errored, truncated=False, parse_errors=0)


def test_the_mean_and_its_error_are_over_tasks_not_episodes():
    trajs = [_traj("a", 1.0), _traj("a", 0.0), _traj("a", 1.0), _traj("a", 1.0),
             _traj("b", 0.0), _traj("b", 0.0, errored=True),
             _traj("c", 0.0, errored=True), _traj("c", 0.0, errored=True)]
    result = EvalResult.from_trajectories(trajs, 1.0, temperature=0.7)
    # a's errored-free mean, b's one unerrored sample, c unjudged
    assert result.scores == {"e/a": 0.75, "e/b": 0.0, "e/c": None}
    assert result.scored == 2 and result.errors == 3 and result.episodes == 8
    assert result.mean == pytest.approx(0.375)
    assert result.stderr == pytest.approx((2 * 0.375**2) ** 0.5 / 2**0.5)  # s.d. / sqrt(2)
    assert result.to_dict()["samples"] == 4 and result.to_dict()["temperature"] == 0.7
