"""The learner on 2 processes (torchrun, gloo, FSDP2) trains as it does on 1.

Same episodes (token ids), same metrics and same update, to float tolerance.

The module's fixture trains a tiny model against ``coin-v0`` (two turns, then a coin flip,
so every step has reward variance and a real update) in this process, then for real on 2
processes: ``gymhub train --nproc 2`` (LoRA, 2 steps) and, beside it, torchrun resuming the
1-process full fine-tuning run's first checkpoint for its second step. The tests compare
what they wrote.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from gymhub.trainer.cli import main  # noqa: E402
from gymhub.trainer.config import GRPOConfig  # noqa: E402
from gymhub.trainer.distributed import (  # noqa: E402
    Padding,
    Processes,
    launch_command,
    should_launch,
)
from gymhub.trainer.loop import TIMING_KEYS  # noqa: E402
from gymhub.trainer.losses import StepCounts, policy_loss  # noqa: E402


def _args(model_dir: Path, out: Path, *extra: str, micro_batch: int = 4) -> list[str]:
    """The run's arguments.

    3 tasks of 3 samples: rank 0 plays tasks 0 and 2, rank 1 task 1; the update deals the
    9 rows 5 and 4, in micro-batches of 4: rank 1 pads its second one. One process takes
    the step in one micro-batch (``micro_batch=9``): its update statistics (clip
    fractions, ratio, KL) are then means over the step's tokens, as the ranks' sums are;
    over several micro-batches one process averages the micro-batches' means instead.
    """
    return [
        "--model", str(model_dir), "--env-ids", "coin-v0", "--output-dir", str(out),
        "--group-size", "3", "--tasks-per-step", "3", "--max-turns", "2",
        "--max-tokens-per-turn", "5", "--max-tokens-per-episode", "10",
        "--micro-batch-size", str(micro_batch), "--learning-rate", "0.05", "--seed", "3",
        "--lora-r", "4", "--lora-target-modules", "q_proj,v_proj",
        "--checkpoint-interval", "1", "--progress", "false", "--report", "false",
        "--tensorboard", "false", "--dist-timeout-s", "120", *extra,
    ]


# a second pass over each batch (old log-probabilities computed, padding included) and an
# evaluation that rank 0 plays on the gathered weights
LORA = ("--max-steps", "2", "--updates-per-batch", "2", "--eval-tasks", "2",
        "--eval-interval", "2")
FULL = ("--max-steps", "2", "--finetune", "full")


@contextlib.contextmanager
def _one_thread():
    """The ranks run with OMP_NUM_THREADS=1 (torchrun's default): the reference does too."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, model_dir):
    """Output directories: ``one``/``two`` (LoRA), ``one_full``/``two_full``."""
    from gymhub.envs import registry

    root = tmp_path_factory.mktemp("dist")
    site = root / "site"  # coin-v0 as an installed package: a module and its dist-info
    (site / "gymhub_test_coin-0.1.dist-info").mkdir(parents=True)
    shutil.copy(Path(__file__).with_name("coin_env.py"), site / "gymhub_test_coin.py")
    (site / "gymhub_test_coin-0.1.dist-info/METADATA").write_text(
        "Metadata-Version: 2.1\nName: gymhub-test-coin\nVersion: 0.1\n")
    (site / "gymhub_test_coin-0.1.dist-info/entry_points.txt").write_text(
        "[gymhub.envs]\ncoin-v0 = gymhub_test_coin:CoinEnv\n")
    sys.path.insert(0, str(site))
    registry.add_entry_point("coin-v0", "gymhub_test_coin:CoinEnv", override=True)
    out = {k: root / k for k in ("one", "two", "one_full", "two_full")}
    try:
        with _one_thread():
            assert main(_args(model_dir, out["one"], *LORA, micro_batch=9)) == 0
            assert main(_args(model_dir, out["one_full"], *FULL, micro_batch=9)) == 0
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PYTHONPATH", os.pathsep.join(
                p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
            # full fine-tuning (torchrun, as --nproc launches it) resumes beside the LoRA run
            resume = ("--resume", str(out["one_full"] / "checkpoints/step-1"))
            full = subprocess.Popen(
                launch_command(2, _args(model_dir, out["two_full"], *FULL, *resume)))
            try:
                assert main(["--nproc", "2", *_args(model_dir, out["two"], *LORA)]) == 0
                assert full.wait(timeout=300) == 0
            finally:
                if full.poll() is None:  # torchrun stops its ranks on SIGTERM
                    full.terminate()
                    full.wait(timeout=60)
        yield out
    finally:
        sys.path.remove(str(site))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _same_metrics(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert set(x) == set(y)
        for key in set(x) - TIMING_KEYS:
            assert y[key] == pytest.approx(x[key], rel=1e-5, abs=1e-6), (x["step"], key)


def _weights(out: Path, step: int) -> dict:
    from safetensors.torch import load_file

    return load_file(str(out / f"checkpoints/step-{step}/trainable.safetensors"))


def _same_checkpoint(a: Path, b: Path, step: int, atol: float = 5e-5) -> None:
    """Optimizer state (Adam's moments: the gradients) and weights equal to float tolerance.

    The ranks sum the gradient in another order than one process does, and forward other
    micro-batches: the moments differ by float noise (measured: 7e-9 at most). Adam's
    update ``m / (sqrt(v) + eps)`` is a ratio that such noise moves a lot where a gradient
    element is itself near 0: after the first Adam step weights agree to 1e-7, after two
    or more a few of them differ by up to ~1.2e-5 (measured, learning rate 0.05, weights
    ~0.2). Full fine-tuning's very first step, where ``v`` is the squared gradient itself
    and ``g / (|g| + eps)`` flips for gradients near ``eps``, reached 1.3e-4 on 4 weights
    of 125k; the test resumes it from a checkpoint instead.
    """
    wa, wb = _weights(a, step), _weights(b, step)
    assert wa.keys() == wb.keys()
    for name in wa:
        torch.testing.assert_close(wb[name], wa[name], rtol=0, atol=atol, msg=name)
    oa = torch.load(a / f"checkpoints/step-{step}/optim.pt", weights_only=False)
    ob = torch.load(b / f"checkpoints/step-{step}/optim.pt", weights_only=False)
    assert oa["optimizer"]["param_groups"] == ob["optimizer"]["param_groups"]
    assert oa["scheduler"] == ob["scheduler"]
    sa, sb = oa["optimizer"]["state"], ob["optimizer"]["state"]
    assert sa.keys() == sb.keys()
    for i in sa:
        for key in sa[i]:
            torch.testing.assert_close(sb[i][key], sa[i][key], rtol=1e-4, atol=1e-8)


def test_two_processes_play_the_same_episodes_and_make_the_same_update(runs, model_dir):
    one, two = runs["one"], runs["two"]
    ta, tb = _lines(one / "trajectories.jsonl"), _lines(two / "trajectories.jsonl")
    assert len(ta) == len(tb) == 2 * 9 and len({t["task_id"] for t in ta}) > 1
    for x, y in zip(ta, tb, strict=True):
        assert (y["step"], y["group"], y["index"]) == (x["step"], x["group"], x["index"])
        assert y["ids"] == x["ids"] and y["loss_mask"] == x["loss_mask"]
        assert y["logprobs"] == pytest.approx(x["logprobs"], abs=1e-5)
        assert y["score"] == x["score"] and y["turn_versions"] == x["turn_versions"]
    ma, mb = _lines(one / "metrics.jsonl"), _lines(two / "metrics.jsonl")
    _same_metrics(ma, mb)
    assert all(m["grad_norm"] > 0 and m["updates"] == 2 for m in mb)  # real updates
    assert "eval_score" in mb[1]
    _same_checkpoint(one, two, 1)
    _same_checkpoint(one, two, 2)
    # only rank 0 wrote, once
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    # and the update moved the weights away from the initial LoRA adapters
    assert any(float(w.abs().max()) > 0 for n, w in _weights(two, 1).items() if "lora_B" in n)


def test_full_fine_tuning_resumed_on_two_processes_makes_the_one_process_update(runs):
    # the 1-process checkpoint loaded into FSDP shards (weights and Adam's moments), then
    # one FSDP2 step: the step the single process made from the same checkpoint
    _same_metrics(_lines(runs["one_full"] / "metrics.jsonl")[1:],
                  _lines(runs["two_full"] / "metrics.jsonl"))
    _same_checkpoint(runs["one_full"], runs["two_full"], 2)
    assert len(_weights(runs["two_full"], 2)) == 21  # every weight of the 2-layer Llama


def test_a_two_process_checkpoint_resumes_in_one_process(runs, model_dir, tmp_path):
    out = tmp_path / "resumed"
    with _one_thread():
        assert main(_args(model_dir, out, *LORA, "--resume",
                          str(runs["two"] / "checkpoints/step-1"), micro_batch=9)) == 0
    (resumed,) = _lines(out / "metrics.jsonl")
    _same_metrics([_lines(runs["one"] / "metrics.jsonl")[1]], [resumed])
    _same_checkpoint(runs["one"], out, 2)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_global_counts_split_the_whole_batch_loss_exactly(loss_type):
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(5, 7, generator=g, dtype=torch.float64)
    old = logp + 0.1 * torch.randn(5, 7, generator=g, dtype=torch.float64)
    adv = torch.randn(5, generator=g, dtype=torch.float64)
    mask = torch.rand(5, 7, generator=g) > 0.3
    kw = dict(loss_type=loss_type, epsilon_low=0.2, epsilon_high=0.28, max_completion_length=7)
    whole, _ = policy_loss(logp, old, adv, mask, num_items=float(mask.sum()), **kw)
    counts = StepCounts(float(mask.sum()), 5)
    parts = [policy_loss(logp[r], old[r], adv[r], mask[r], counts=counts, **kw)[0]
             for r in ([0, 2, 4], [1, 3])]  # the rows two ranks hold
    assert float(sum(parts)) == pytest.approx(float(whole), abs=1e-12)


def test_share_deals_rows_round_robin_and_pads_every_rank_to_one_count():
    steps = [[[0, 1, 2, 3], [4, 5, 6, 7], [8]], [[9]]]
    r0 = Processes(rank=0, world=2).share(steps, 4)
    r1 = Processes(rank=1, world=2).share(steps, 4)
    assert r0 == [[[0, 2, 4, 6], [8]], [[9]]]
    assert r1[0] == [[1, 3, 5, 7], [0]] and isinstance(r1[0][1], Padding)
    assert r1[1] == [[9]] and isinstance(r1[1][0], Padding)
    assert [len(s) for s in r0] == [len(s) for s in r1]
    assert Processes().share(steps, 4) == steps  # one process: as given


def test_nproc_relaunches_through_torchrun_once():
    cfg = GRPOConfig(nproc=2)
    assert should_launch(cfg, {}) and not should_launch(cfg, {"WORLD_SIZE": "2"})
    assert not should_launch(GRPOConfig(), {})
    cmd = launch_command(2, ["--nproc", "2", "--seed", "1", "--nproc=2", "--model", "m"])
    assert cmd[1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                       "-m", "gymhub.trainer", "--seed", "1", "--model", "m"]
    # torchrun reads abbreviated options: no other key may be taken for one of its own
    from torch.distributed.run import get_args_parser

    theirs = [o for a in get_args_parser()._actions for o in a.option_strings]
    for name in GRPOConfig.model_fields:
        if name != "nproc":
            for flag in {f"--{name}", f"--{name.replace('_', '-')}"}:
                assert not [o for o in theirs if o.startswith(flag)], flag


def test_one_process_is_inert(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    p = Processes.from_env(GRPOConfig())
    assert (p.rank, p.world, p.active, p.is_main) == (0, 1, False, True)
    assert p.my_tasks(3) == [0, 1, 2] and p.gather([3, 1]) == [3, 1] and p.sum([2.0]) == [2.0]
    model = torch.nn.Linear(2, 2)
    assert p.shard(model) is model and p.restorer(model, None) is None
    with p.gathered():
        pass


def test_python_m_gymhub_trainer_is_gymhub_train(tmp_path):
    out = subprocess.run([sys.executable, "-m", "gymhub.trainer", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "--nproc" in out and "--dist-timeout-s" in out
