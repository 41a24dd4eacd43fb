"""Learner speed: one GRPO update (gymhub vs TRL) and multi-turn vs single-turn rollouts.

1. One GRPO update of the same tiny Llama (built from a config) on the same batch
   (8 sequences, 64 prompt + 64 completion tokens, advantages ±1, LoRA-free, AdamW):
   gymhub's ``GRPOTrainer._update`` against TRL's ``GRPOTrainer.compute_loss`` +
   backward + optimizer step on identical tensors. Generation is excluded on both
   sides. TRL is a benchmark-only dependency (``pip install trl torch==2.13.0``); the
   TRL column is skipped with the reason when it cannot be imported.
2. Rollout throughput of the transformers engine: 8 multi-turn episodes of
   ``echo-v0`` (4 turns x 16 tokens, observations appended between turns), with the
   cross-turn KV cache off (every turn re-reads its whole context) and on (a turn
   prefills only its new tokens), against single-turn generation of 64 tokens from the
   same 8 first prompts (tool schemas included), all in the same run. The last line is
   ``multi-turn / single-turn tokens/s: R×`` with the cache on.

Run: ``python benchmarks/bench_trainer.py`` (CPU; about a minute).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import warnings

import torch

from gymhub.trainer.backends import InProcessBackend
from gymhub.trainer.chat import ChatRenderer
from gymhub.trainer.config import GRPOConfig
from gymhub.trainer.engines.base import GenerationRequest, SamplingConfig
from gymhub.trainer.engines.hf import TransformersEngine
from gymhub.trainer.loop import GRPOTrainer
from gymhub.trainer.parsers import make_parser
from gymhub.trainer.rollout import Budgets, Trajectory, run_group_batch
from gymhub.trainer.tiny import build_model, build_tokenizer

B, P, C, REPEATS, ROUNDS = 8, 64, 64, 5, 5


def _batch(vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (B, P), generator=g)
    completion = torch.randint(3, vocab, (B, C), generator=g)
    adv = torch.tensor([1.0, -1.0] * (B // 2))
    return prompt, completion, adv


def _time(fn: object, repeats: int = REPEATS) -> float:
    fn()  # type: ignore[operator]  # warm-up
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def bench_gymhub(tok: object, tmp: str) -> float:
    vocab = len(tok)  # type: ignore[arg-type]
    prompt, completion, adv = _batch(vocab)
    cfg = GRPOConfig(model="tiny", finetune="full", micro_batch_size=B, output_dir=tmp,
                     progress=False, max_tokens_per_episode=C, learning_rate=1e-5,
                     loss_type="dapo")
    trainer = GRPOTrainer(cfg, model=build_model(vocab), tokenizer=tok,
                          backend=InProcessBackend())
    rows = []
    for i in range(B):
        ids = prompt[i].tolist() + completion[i].tolist()
        t = Trajectory("echo-v0", "t", "g", i, ids=ids, loss_mask=[0] * P + [1] * C,
                       logprobs=[0.0] * (P + C))
        rows.append((t, float(adv[i])))
    return _time(lambda: trainer._update(rows))


def bench_trl(tok: object, tmp: str) -> tuple[float | None, str]:
    try:
        from datasets import Dataset
        from trl import GRPOConfig as TrlConfig
        from trl import GRPOTrainer as TrlTrainer
    except ImportError as exc:
        return None, f"trl not importable ({exc}); pip install trl torch==2.13.0"
    vocab = len(tok)  # type: ignore[arg-type]
    prompt, completion, adv = _batch(vocab)
    args = TrlConfig(output_dir=tmp, per_device_train_batch_size=B, num_generations=B,
                     max_completion_length=C, report_to="none", use_cpu=True, bf16=False,
                     learning_rate=1e-5, loss_type="dapo", beta=0.0, logging_steps=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = TrlTrainer(model=build_model(vocab), reward_funcs=lambda **_: [0.0] * B,
                             args=args, train_dataset=Dataset.from_dict({"prompt": ["x"] * B}),
                             processing_class=tok)
    model = trainer.model
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(); we skip it
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    inputs = {"prompt_ids": prompt, "prompt_mask": torch.ones_like(prompt),
              "completion_ids": completion, "completion_mask": torch.ones_like(completion),
              "advantages": adv, "num_items_in_batch": torch.tensor(B * C)}

    def step() -> None:
        model.train()
        loss = trainer.compute_loss(model, inputs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    import trl

    return _time(step), f"trl {trl.__version__}"


def bench_rollouts(tok: object) -> dict[str, float]:
    """Tokens/s of multi-turn (cross-turn cache off, then on) and single-turn generation.

    The three are timed in alternation, round after round, so that a machine whose load
    changes during the run slows all three alike; each figure is the median over rounds.
    A first multi-turn run with the cache on checks every episode against a full render
    (strict drift check) before anything is timed.
    """
    model = build_model(len(tok))  # type: ignore[arg-type]
    engines = {
        on: TransformersEngine(model, tok, pad_token_id=0, cross_turn_cache=on)
        for on in (False, True)
    }
    renderer = ChatRenderer(tok)
    tasks = [("echo-v0", f"echo-{i:04d}") for i in range(B)]

    def episodes(cache: bool, drift: str = "off") -> list[Trajectory]:
        return asyncio.run(run_group_batch(
            backend=InProcessBackend(), engine=engines[cache], renderer=renderer,
            parser=make_parser("hermes"), sampling=SamplingConfig(temperature=1.0),
            budgets=Budgets(4, 16, 64, 4096), tasks=tasks, group_size=1, seed=0,
            drift_check=drift))

    checked = episodes(True, "warn")
    drifted = sum(1 for t in checked if t.drift is None or not t.drift.ok)
    # The single-turn side starts from exactly the multi-turn side's first prompts
    # (system + user + the tool schemas the template renders), so the two differ only in
    # what multi-turn adds: three more turns, each with its observation appended.
    from gymhub.envs import make

    env = make("echo-v0")
    reqs = []
    for i in range(B):
        obs, info = env.reset(options={"task_id": f"echo-{i:04d}"})
        reqs.append(GenerationRequest(renderer.prompt_ids(obs, info["tools"]), 64, seed=i))

    def single() -> int:
        outs = engines[True].generate(reqs, SamplingConfig(temperature=1.0))
        return sum(len(o.token_ids) for o in outs)

    runs = {
        "multi_off": lambda: sum(t.generated_tokens for t in episodes(False)),
        "multi_on": lambda: sum(t.generated_tokens for t in episodes(True)),
        "single": single,
    }
    rates: dict[str, list[float]] = {k: [] for k in runs}
    for fn in runs.values():
        fn()  # warm-up
    for _ in range(ROUNDS):
        for key, fn in runs.items():
            t = time.perf_counter()
            n = fn()
            rates[key].append(n / (time.perf_counter() - t))
    out = {k: statistics.median(v) for k, v in rates.items()}
    out["drift"] = float(drifted)
    out["leaked"] = float(len(engines[True].caches))
    return out


def main() -> int:
    torch.manual_seed(0)
    tok = build_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        ours = bench_gymhub(tok, tmp)
        theirs, note = bench_trl(tok, tmp)
    print(f"one GRPO update, tiny Llama, {B}x({P}+{C}) tokens, full AdamW (median of {REPEATS})")
    print(f"  gymhub  {ours * 1000:8.1f} ms")
    if theirs is None:
        print(f"  TRL     skipped: {note}")
    else:
        print(f"  TRL     {theirs * 1000:8.1f} ms   ({note})")
        print(f"  ratio   TRL / gymhub = {theirs / ours:.2f}x  (>1: gymhub faster)")
    r = bench_rollouts(tok)
    print(f"rollout generation, {B} episodes, transformers engine (median of {ROUNDS} rounds)")
    print(f"  drift check (strict, cache on): {r['drift']:.0f} of {B} episodes drifted; "
          f"{r['leaked']:.0f} KV caches left after the episodes ended")
    print(f"  single-turn (1 x 64 tokens)                       {r['single']:8.0f} tokens/s")
    print(f"  multi-turn  (4 x 16 tokens, echo-v0), cache off   {r['multi_off']:8.0f} tokens/s"
          f"   {r['multi_off'] / r['single']:.2f}x single-turn")
    print(f"  multi-turn  (4 x 16 tokens, echo-v0), cache on    {r['multi_on']:8.0f} tokens/s"
          f"   {r['multi_on'] / r['single']:.2f}x single-turn")
    print(f"  cross-turn cache speed-up (on / off): {r['multi_on'] / r['multi_off']:.2f}x")
    print(f"multi-turn / single-turn tokens/s: {r['multi_on'] / r['single']:.2f}\u00d7")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
