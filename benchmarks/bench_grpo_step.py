"""A whole GRPO step, generation included: gymhub against TRL's ``GRPOTrainer``.

``bench_trainer.py`` times the update alone; on a CPU, generation is most of a step, so
this times everything a step does, side by side in one process, the two sides' steps
alternated: sample the completions of a group, score them, compute advantages, one
optimizer step. Both sides get the same tiny
Llama (same seed, full fine-tuning, AdamW, lr 1e-5, DAPO loss, no KL), the same prompts
(``echo-v0``'s first prompts as gymhub renders them, tool schemas included, decoded to text
for TRL), the same group size and completion length, temperature 1, transformers
generation, one micro-batch. gymhub's step also plays the environment (parse the tool
call, step echo-v0, verify); TRL's reward function is a constant, so any difference in
scoring cost counts against gymhub.

TRL is a benchmark-only dependency (``pip install trl torch==2.13.0``); without it the
TRL side is skipped with the reason.

It also times one step's generation alone, gymhub's engine against transformers'
``generate`` on the same batch, so the gap can be split into engine and rollout.

Run: ``python benchmarks/bench_grpo_step.py [--steps 4] [--group-size 4] [--tasks 2]
[--completion 64]`` (CPU; a few minutes). Its last line is ``gymhub / TRL time per step:
R×`` (below 1: gymhub faster).

``--compare-threads R`` instead times gymhub's step with the engine's calls on the
trainer's own thread (the default) against the loop's thread pool (the previous
releases'), R rounds of one process each, alternated: two threads that each run torch
operators with OpenMP slow every operator of the process for good (see
``gymhub.trainer.compute_thread``), so the two cannot share a process. Its last line is
``engine on the trainer's thread / on the pool, time per step: R×``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

import torch

from gymhub.envs import make
from gymhub.trainer.backends import InProcessBackend
from gymhub.trainer.chat import ChatRenderer
from gymhub.trainer.config import GRPOConfig
from gymhub.trainer.loop import GRPOTrainer
from gymhub.trainer.tiny import build_model, build_tokenizer


def _prompts(tok: Any, n: int) -> list[str]:
    renderer, env = ChatRenderer(tok), make("echo-v0")
    out = []
    for i in range(n):
        obs, info = env.reset(options={"task_id": f"echo-{i:04d}"})
        out.append(tok.decode(renderer.prompt_ids(obs, info["tools"])))
    return out


class GymhubSide:
    """gymhub's trainer on the same model, batch and lengths, stepped on demand."""

    def __init__(self, tok: Any, args: argparse.Namespace, tmp: str, pool: bool = False) -> None:
        torch.manual_seed(0)
        batch = args.group_size * args.tasks
        cfg = GRPOConfig(model="tiny", finetune="full", env_ids=["echo-v0"],
                         group_size=args.group_size, tasks_per_step=args.tasks, max_turns=1,
                         max_tokens_per_turn=args.completion,
                         max_tokens_per_episode=args.completion, micro_batch_size=batch,
                         learning_rate=1e-5, loss_type="dapo", beta=0.0, temperature=1.0,
                         output_dir=tmp, progress=False, drift_check="off")
        self.trainer = GRPOTrainer(cfg, model=build_model(len(tok)), tokenizer=tok,
                                   backend=InProcessBackend())
        if pool:  # the previous releases' way: the engine on the loop's thread pool
            self.trainer.compute = None
        self.trainer.train_step()  # warm-up
        self.times: list[float] = []
        self.parts = {"time_rollout": 0.0, "time_update": 0.0, "generated_tokens": 0.0}

    def step(self) -> None:
        t = time.perf_counter()
        m = self.trainer.train_step()
        self.times.append(time.perf_counter() - t)
        for k in self.parts:
            self.parts[k] += m[k]

    def mean_parts(self) -> dict[str, float]:
        return {k: v / max(len(self.times), 1) for k, v in self.parts.items()}


def bench_trl(tok: Any, args: argparse.Namespace, tmp: str,
              ours: GymhubSide) -> tuple[list[float] | None, str]:
    """TRL's steps, with one gymhub step run after each (alternated, so that load that
    comes and goes on the machine hits both sides alike)."""
    try:
        from datasets import Dataset
        from transformers import PrinterCallback, TrainerCallback
        from trl import GRPOConfig as TrlConfig
        from trl import GRPOTrainer as TrlTrainer
    except ImportError as exc:
        return None, f"trl not importable ({exc}); pip install trl torch==2.13.0"
    import trl

    torch.manual_seed(0)
    batch = args.group_size * args.tasks
    prompts = _prompts(tok, args.tasks)
    times: list[float] = []
    lengths: list[float] = []

    class Clock(TrainerCallback):  # type: ignore[misc]
        """Wall time of each optimizer step (generation happens inside it)."""

        start = 0.0

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            Clock.start = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            times.append(time.perf_counter() - Clock.start)
            if len(times) > 1:  # TRL's first step warms it up
                ours.step()

        def on_log(self, *a: Any, logs: dict[str, Any] | None = None, **k: Any) -> None:
            if logs and "completions/mean_length" in logs:
                lengths.append(float(logs["completions/mean_length"]))

    targs = TrlConfig(output_dir=tmp, per_device_train_batch_size=batch,
                      num_generations=args.group_size, max_completion_length=args.completion,
                      max_steps=args.steps + 1, report_to="none", use_cpu=True, bf16=False,
                      learning_rate=1e-5, loss_type="dapo", beta=0.0, temperature=1.0,
                      top_p=1.0, logging_steps=1, save_strategy="no",
                      gradient_checkpointing=False,  # TRL's default is on; gymhub's off
                      disable_tqdm=True, dataloader_num_workers=0, seed=0,
                      # gymhub's engine stops at the end-of-turn token only, which the
                      # untrained model never samples; TRL also stops at the tokenizer's
                      # EOS. Same lengths on both sides, so the step times compare.
                      generation_kwargs={"min_new_tokens": args.completion})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = TrlTrainer(model=build_model(len(tok)),
                             reward_funcs=lambda completions, **_: [0.0] * len(completions),
                             args=targs,
                             train_dataset=Dataset.from_dict({"prompt": prompts * 64}),
                             processing_class=tok, callbacks=[Clock()])
        trainer.remove_callback(PrinterCallback)  # the per-step log dicts
        trainer.train()
    mean = statistics.mean(lengths) if lengths else float("nan")
    return times[1:], f"trl {trl.__version__}, {mean:.0f} tokens per completion"


def bench_generation(tok: Any, args: argparse.Namespace) -> tuple[float, float]:
    """Median seconds for one step's generation: gymhub's engine vs transformers' generate.

    Same model, the same prompts and lengths, sampled at temperature 1: the part of the
    step gap that is the engine itself, apart from the rollout around it.
    """
    from gymhub.trainer.engines.base import GenerationRequest, SamplingConfig
    from gymhub.trainer.engines.hf import TransformersEngine

    torch.manual_seed(0)
    model = build_model(len(tok)).eval()
    texts = [p for p in _prompts(tok, args.tasks) for _ in range(args.group_size)]
    ids = [tok(t)["input_ids"] for t in texts]
    engine = TransformersEngine(model, tok, pad_token_id=tok.pad_token_id or 0)
    reqs = [GenerationRequest(x, args.completion, seed=i) for i, x in enumerate(ids)]
    batch = tok(texts, return_tensors="pt", padding=True, padding_side="left")

    def ours() -> None:
        engine.generate(reqs, SamplingConfig(temperature=1.0))

    def theirs() -> None:
        with torch.no_grad():
            model.generate(**batch, do_sample=True, max_new_tokens=args.completion,
                           min_new_tokens=args.completion, temperature=1.0, top_p=1.0,
                           top_k=0, pad_token_id=tok.pad_token_id or 0)

    times: dict[str, list[float]] = {"ours": [], "theirs": []}
    for fn in (ours, theirs):
        fn()  # warm-up
    for _ in range(max(3, args.steps)):  # alternated, so drift hits both alike
        for name, fn in (("ours", ours), ("theirs", theirs)):
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return statistics.median(times["ours"]), statistics.median(times["theirs"])


def compare_threads(args: argparse.Namespace) -> int:
    """gymhub's step, engine on the trainer's thread vs the pool: a process each, alternated."""
    times: dict[str, list[float]] = {"caller": [], "pool": []}
    for _ in range(args.compare_threads):
        for where in times:
            cmd = [sys.executable, __file__, "--engine-thread", where, "--steps", str(args.steps),
                   "--group-size", str(args.group_size), "--tasks", str(args.tasks),
                   "--completion", str(args.completion)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            times[where].append(float(out.split("gymhub_step_s=")[1].split()[0]))
    caller, pool = (statistics.median(times[k]) for k in ("caller", "pool"))
    print(f"gymhub's whole step, {args.tasks} prompts x {args.group_size} completions of up to "
          f"{args.completion} tokens, tiny Llama; median over {args.compare_threads} processes "
          f"per side (each the median of {args.steps} steps), alternated")
    for k, v in times.items():
        print(f"  engine on the {'trainer' if k == 'caller' else 'pool'}'s thread  "
              f"{statistics.median(v):6.3f} s/step  ({', '.join(f'{x:.3f}' for x in v)})")
    print(f"engine on the trainer's thread / on the pool, time per step: {caller / pool:.2f}x")
    return 0


def gymhub_only(args: argparse.Namespace) -> int:
    """One side of --compare-threads: gymhub's steps alone, in this process."""
    tok = build_tokenizer()
    with tempfile.TemporaryDirectory() as tmp:
        side = GymhubSide(tok, args, tmp, pool=args.engine_thread == "pool")
        for _ in range(args.steps):
            side.step()
    print(f"gymhub_step_s={statistics.median(side.times):.4f}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=4, help="timed steps per side (after one warm-up)")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--tasks", type=int, default=2, help="prompts per step")
    p.add_argument("--completion", type=int, default=64, help="tokens generated per completion")
    p.add_argument("--compare-threads", type=int, default=0, metavar="R",
                   help="rounds of gymhub's step with the engine on the trainer's thread vs "
                        "the loop's thread pool, a process each (no TRL)")
    p.add_argument("--engine-thread", choices=("caller", "pool"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.compare_threads:
        return compare_threads(args)
    if args.engine_thread:
        return gymhub_only(args)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    tok = build_tokenizer()
    prompt_len = len(tok(_prompts(tok, 1)[0])["input_ids"])
    with tempfile.TemporaryDirectory() as tmp:
        side = GymhubSide(tok, args, tmp)
        theirs, note = bench_trl(tok, args, tmp, side)
        if theirs is None:  # no TRL: gymhub's steps alone
            for _ in range(args.steps):
                side.step()
    ours, parts = side.times, side.mean_parts()
    batch = args.group_size * args.tasks
    print(f"one whole GRPO step: {args.tasks} prompts x {args.group_size} completions of up to "
          f"{args.completion} tokens, prompt ~{prompt_len} tokens, tiny Llama, full AdamW; "
          f"median of {args.steps} steps after a warm-up, the two sides alternated")
    ours_m = statistics.median(ours)
    print(f"  gymhub  {ours_m:7.2f} s/step  (rollout {parts['time_rollout']:.2f} s, update "
          f"{parts['time_update']:.2f} s, {parts['generated_tokens'] / batch:.0f} tokens "
          "per completion)")
    if theirs is None:
        print(f"  TRL     skipped: {note}")
        return 0
    theirs_m = statistics.median(theirs)
    print(f"  TRL     {theirs_m:7.2f} s/step  ({note}, transformers generation)")
    engine_s, generate_s = bench_generation(tok, args)
    print(f"generation alone, same batch: gymhub engine {engine_s * 1000:.0f} ms, "
          f"transformers generate {generate_s * 1000:.0f} ms "
          f"({engine_s / generate_s:.2f}x)")
    print(f"gymhub / TRL time per step: {ours_m / theirs_m:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
