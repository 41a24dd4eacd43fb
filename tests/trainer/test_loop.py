"""The loop end to end on a tiny model: updates, exact resume, and a no-op batch."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from gymhub.errors import ConfigError  # noqa: E402
from gymhub.trainer.backends import InProcessBackend  # noqa: E402
from gymhub.trainer.cli import main  # noqa: E402
from gymhub.trainer.config import GRPOConfig  # noqa: E402
from gymhub.trainer.loop import TIMING_KEYS, GRPOTrainer, apply_lora  # noqa: E402
from gymhub.types import Message, Score, StepResult  # noqa: E402

from .conftest import ParityEnv, build_model  # noqa: E402


def _policy(tokenizer):
    torch.manual_seed(0)
    model = build_model(len(tokenizer))
    return apply_lora(model, r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])


def _cfg(tmp_path, **kw):
    base = dict(
        model="tiny",
        env_ids=["parity-v0"],
        group_size=4,
        tasks_per_step=2,
        max_steps=3,
        max_turns=1,
        max_tokens_per_turn=6,
        max_tokens_per_episode=6,
        learning_rate=0.05,
        micro_batch_size=4,
        output_dir=str(tmp_path),
        progress=False,
        seed=1,
    )
    base.update(kw)
    return GRPOConfig(**base)


def _trainer(cfg, tokenizer, env_factory=None):
    backend = InProcessBackend(factory=env_factory or (lambda env_id, **_: ParityEnv()))
    return GRPOTrainer(cfg, model=_policy(tokenizer), tokenizer=tokenizer, backend=backend)


def test_three_steps_change_every_trainable_parameter(tmp_path, tokenizer):
    trainer = _trainer(_cfg(tmp_path), tokenizer)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    history = trainer.train()
    assert len(history) == 3
    assert all(math.isfinite(m["loss"]) for m in history)
    assert sum(m["updates"] for m in history) >= 1
    after = dict(trainer.model.named_parameters())
    unchanged = [n for n, p in before.items() if torch.equal(p, after[n].detach())]
    assert not unchanged, unchanged
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 3
    assert (tmp_path / "trajectories.jsonl").read_text().count("\n") == 24
    assert trainer.engine.policy_version == sum(1 for m in history if m["updates"])


def test_resume_reproduces_the_next_step(tmp_path, tokenizer):
    full = _trainer(_cfg(tmp_path / "a", checkpoint_interval=1), tokenizer).train()
    resumed_trainer = _trainer(
        _cfg(tmp_path / "b", resume=str(tmp_path / "a/checkpoints/step-2")), tokenizer
    )
    resumed = resumed_trainer.train()
    assert len(resumed) == 1 and resumed_trainer.step == 3
    expected = {k: v for k, v in full[2].items() if k not in TIMING_KEYS}
    got = {k: v for k, v in resumed[0].items() if k not in TIMING_KEYS}
    assert got == expected


def test_all_truncated_batch_is_a_no_op(tmp_path, tokenizer):
    cfg = _cfg(tmp_path, env_ids=["echo-v0"], mask_truncated=True, max_steps=1)
    from gymhub.envs import make

    trainer = _trainer(cfg, tokenizer, env_factory=make)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    (metrics,) = trainer.train()
    assert metrics["truncated"] == 8 and metrics["loss"] == 0.0 and metrics["updates"] == 0
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def test_cli_trains_from_a_config_file(tmp_path, model_dir, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'model = "{model_dir}"\nenv_ids = ["echo-v0"]\nmax_steps = 1\n'
        f'output_dir = "{tmp_path / "out"}"\nprogress = false\n'
    )
    rc = main(
        [
            "--config",
            str(cfg),
            "--group-size",
            "2",
            "--tasks-per-step",
            "1",
            "--max-turns",
            "2",
            "--max-tokens-per-turn",
            "4",
            "--lora-target-modules",
            "q_proj",
        ]
    )
    assert rc == 0 and "trained 1 steps" in capsys.readouterr().out
    assert (tmp_path / "out/checkpoints/step-1/state.json").is_file()
    assert main(["--config", str(cfg), "--grup-size", "2"]) == 2
    assert "did you mean" in capsys.readouterr().err
    assert main(["--help"]) == 0


def test_resume_pushes_the_restored_weights_and_steps_sleep_the_engine(tmp_path, tokenizer):
    from gymhub.trainer.engines import TransformersEngine

    class Recording(TransformersEngine):
        """The real engine, with a log of what the loop asks of it."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.log = []

        def generate(self, requests, sampling):
            self.log.append("generate")
            return super().generate(requests, sampling)

        def update_weights(self, model):
            super().update_weights(model)
            self.log.append(f"update v{self.policy_version}")

        def sleep(self):
            self.log.append("sleep")

    _trainer(_cfg(tmp_path / "a", max_steps=2, checkpoint_interval=1), tokenizer).train()
    cfg = _cfg(tmp_path / "b", resume=str(tmp_path / "a/checkpoints/step-2"))
    model = _policy(tokenizer)
    engine = Recording(model, tokenizer, pad_token_id=tokenizer.pad_token_id)
    backend = InProcessBackend(factory=lambda env_id, **_: ParityEnv())
    GRPOTrainer(cfg, model=model, tokenizer=tokenizer, backend=backend, engine=engine).train()
    # The restored weights reach the engine, under the checkpoint's version, before any
    # sample is drawn; each step then sleeps the engine between rollout and update.
    assert engine.log[0] == "update v2" and engine.log[1] == "generate"
    assert engine.log[-2:] == ["sleep", "update v3"]
    # A batch with nothing to train on pushes nothing, so it must not sleep the engine
    # (a vLLM engine would wake with its weights dropped).
    from gymhub.envs import make

    model = _policy(tokenizer)
    idle = Recording(model, tokenizer, pad_token_id=tokenizer.pad_token_id)
    cfg = _cfg(tmp_path / "c", env_ids=["echo-v0"], mask_truncated=True, max_steps=1)
    GRPOTrainer(cfg, model=model, tokenizer=tokenizer, backend=InProcessBackend(factory=make),
                engine=idle).train()
    assert "generate" in idle.log and "sleep" not in idle.log


class LongPromptEnv(ParityEnv):
    """Task t0's prompt is far longer than the others: only its episodes starve."""

    def _start(self, task):
        text = task.prompt * (400 if task.id == "t0" else 1)
        return [Message(role="user", content=text)], {}


def test_a_prompt_with_no_room_to_generate_is_reported_not_trained_on_silently(
        tmp_path, tokenizer, capsys):
    from gymhub.errors import ConfigError

    cfg = _cfg(tmp_path, max_context_tokens=300, max_steps=1, tasks_per_step=6)
    trainer = _trainer(cfg, tokenizer, env_factory=lambda env_id, **_: LongPromptEnv())
    (metrics,) = trainer.train()
    assert metrics["context_starved"] == 4 and metrics["episodes"] == 24
    assert "4 of 24 episodes had no room to generate" in capsys.readouterr().err

    tight = _cfg(tmp_path / "b", max_context_tokens=4, max_steps=1)
    with pytest.raises(ConfigError, match="max_context_tokens is 4"):
        _trainer(tight, tokenizer).train()


def test_update_logprobs_skip_prompt_columns_but_equal_a_full_forward(tmp_path, tokenizer):
    from gymhub.trainer.rollout import Trajectory

    trainer = _trainer(_cfg(tmp_path, temperature=0.7), tokenizer)
    g = torch.Generator().manual_seed(0)
    rows = []
    for i, (prompt, sampled) in enumerate([(30, 5), (12, 9), (20, 3)]):
        ids = torch.randint(3, len(tokenizer), (prompt + sampled,), generator=g).tolist()
        mask = [0] * prompt + [1] * sampled
        rows.append((Trajectory("e", "t", "g", i, ids=ids, loss_mask=mask,
                                logprobs=[-0.5 * m for m in mask]), 1.0))
    logp, mask, eng, adv = trainer._logps(rows)
    width = 35
    assert logp.shape == mask.shape == eng.shape == (3, width - 12)  # from the first sample on
    trainer.model.eval()
    with torch.no_grad():
        logp = logp.detach()
        for row, (t, _) in enumerate(rows):
            logits = trainer.model(torch.tensor([t.ids])).logits[0, :-1].float() / 0.7
            full = torch.log_softmax(logits, -1).gather(-1, torch.tensor(t.ids[1:])[:, None])[:, 0]
            cols = mask[row].nonzero()[:, 0]
            assert len(cols) == sum(t.loss_mask)
            assert logp[row, cols].tolist() == pytest.approx(full[cols + 11].tolist(), abs=1e-4)
            assert eng[row, cols].tolist() == [-0.5] * len(cols)


def test_shared_prompt_update_gives_the_padded_forwards_values_and_gradients(tmp_path, tokenizer):
    """Groups forward their prompt once, alike prompts their common start once; a
    singleton, prompts of other lengths and a stranger mix in one micro-batch, and
    nothing differs from the plain padded forward."""
    from gymhub.trainer.rollout import Trajectory

    g = torch.Generator().manual_seed(1)

    def draw(n):
        return torch.randint(3, len(tokenizer), (n,), generator=g).tolist()

    system, schema = draw(36), draw(40)
    rows = []
    for prompt, samples in [(system + draw(8), [4, 7, 2]), (draw(40), [5, 2]),
                            (system + draw(15), [3, 6]), (draw(12), [2, 3]),
                            (system + schema + draw(6), [3, 4, 2]),
                            (system + schema + draw(9), [5]), (system + draw(5), [6])]:
        for n in samples:
            ids = prompt + draw(n)
            mask = [0] * len(prompt) + [1] * n
            rows.append((Trajectory("e", "t", "g", len(rows), ids=ids, loss_mask=mask,
                                    logprobs=[0.0] * len(ids)), 1.0 - 0.3 * len(rows)))
    rows.insert(3, rows.pop())  # alike prompts need not be neighbours
    results = []
    for share in (True, False):
        trainer = _trainer(_cfg(tmp_path, temperature=0.9, shared_prompt_update=share),
                           tokenizer)
        trainer.model.train()
        shapes = []
        real = trainer.model.forward

        def counting(*args, real=real, shapes=shapes, **kwargs):
            shapes.append(tuple(kwargs["input_ids"].shape))
            return real(*args, **kwargs)

        trainer.model.forward = counting
        logp, mask, _, adv = trainer._logps(rows)
        del trainer.model.forward
        (-(logp * mask * adv[:, None]).sum()).backward()
        grads = [p.grad.clone() for p in trainer.params]
        results.append((logp.detach(), mask, grads, shapes))
    (a, mask_a, grads_a, shapes_a), (b, mask_b, grads_b, shapes_b) = results
    assert shapes_b == [(len(rows), max(len(t.ids) for t, _ in rows))]
    # a prefix tree: the system prompt once, below it the schema once (four rows of two
    # questions), a repeated 40-token prompt once; short prompts are leaves
    assert (1, 36) in shapes_a and (1, 40) in shapes_a and shapes_a.count((1, 40)) == 2
    assert sum(b * t for b, t in shapes_a) < 0.5 * sum(b * t for b, t in shapes_b)
    assert torch.equal(mask_a, mask_b)
    assert torch.allclose(a[mask_a], b[mask_b], atol=1e-5)
    for ga, gb in zip(grads_a, grads_b, strict=True):
        assert torch.allclose(ga, gb, atol=1e-5, rtol=1e-4)
    assert any(ga.abs().sum() > 0 for ga in grads_a)


def test_several_passes_over_a_batch_clip_against_the_sampling_policy(tmp_path, tokenizer):
    """updates_per_batch = 3: three optimizer steps on one rollout batch, the later ones
    with ratios away from 1 (against the first pass's log-probabilities), one weight push."""
    one = _trainer(_cfg(tmp_path / "one", max_steps=1), tokenizer)
    three = _trainer(_cfg(tmp_path / "three", max_steps=1, updates_per_batch=3), tokenizer)
    m1, m3 = one.train()[0], three.train()[0]
    assert m1["episodes"] == m3["episodes"] and m1["reward_mean"] == m3["reward_mean"]
    if m1["updates"] == 0:
        pytest.skip("this seed's batch had no advantage to learn from")
    assert m1["updates"] == 1 and m3["updates"] == 3
    assert m1["ratio_mean"] == pytest.approx(1.0) and m3["ratio_mean"] != pytest.approx(1.0)
    assert three.engine.policy_version == one.engine.policy_version == 1
    moved = [(p3 - p0).abs().sum().item() for p3, p0 in zip(three.params, one.params, strict=True)]
    assert sum(moved) > 0


def test_the_schedule_spans_every_pass_of_every_step(tmp_path, tokenizer):
    trainer = _trainer(_cfg(tmp_path, max_steps=4, updates_per_batch=3, lr_schedule="linear"),
                       tokenizer)
    f = trainer.scheduler.lr_lambdas[0]
    assert f(0) == 1.0 and f(6) == pytest.approx(0.5) and f(11) > 0.0


class NearMissEnv(ParityEnv):
    """Never right (score 0), but reports how long the answer was as a component."""

    def _step(self, action):
        score = Score(value=0.0, components={"length": len(action.content) / 10})
        return StepResult([Message(role="user", content="ok")], 0.0, True, False, {"score": score})


def test_partial_credit_shapes_the_return_not_the_score(tmp_path, tokenizer):
    def step(**kw):
        cfg = _cfg(tmp_path, max_steps=1, dynamic_sampling=True, **kw)
        trainer = _trainer(cfg, tokenizer, lambda env_id, **_: NearMissEnv())
        return trainer.train()[0]

    plain = step()
    # every group scored alike: nothing to learn from, nothing updated
    assert plain["reward_mean"] == 0.0 and plain["return_mean"] == 0.0
    assert plain["adv/kept"] == 0 and plain["updates"] == 0
    shaped = step(partial_credit={"length": 2.0})
    # the verdict is unchanged; the return carries the component, so groups differ
    assert shaped["reward_mean"] == 0.0 and shaped["return_mean"] > 0.0
    assert shaped["adv/kept"] > 0 and shaped["updates"] >= 1


def test_partial_credit_names_a_component_the_score_lacks(tmp_path, tokenizer):
    cfg = _cfg(tmp_path, max_steps=1, partial_credit={"rows": 0.5})
    trainer = _trainer(cfg, tokenizer, lambda env_id, **_: NearMissEnv())
    with pytest.raises(ConfigError, match=r"'rows'.*parity-v0's score.*it has: length"):
        trainer.train_step()
