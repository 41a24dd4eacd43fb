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
   same 8 first prompts (tool schemas included), all in the same run; also single-turn
   *rollouts* of 64 tokens (the same episode pipeline for one turn), which separate what
   multi-turn costs from an episode's fixed costs. In the same rounds: the multi-turn
   rollouts with the in-process environment's calls always in worker threads, and both
   kinds with the engine's prebuilt attention masks off, then with its grouped-query
   attention off. ``--rollout-model smollm2`` runs the same comparison (without the
   single switches) on the demo's SmolLM2-135M, whose template renders no tool schemas,
   so both sides' prompts are the bare system and user messages. After the rounds, the
   ratio's ceiling on this machine: what multi-turn must add to single-turn's time (its
   observations' prefills, its decode steps over longer contexts), timed as plain
   forwards without the engine; what the engine and the work around it add on top. The
   last line is ``multi-turn / single-turn tokens/s: R×`` with the cache on, against
   generation.
3. Time per demo step split into its parts: a GRPO step of ``examples/sql_demo.toml``
   (sql-v0 in-process, the demo's model, sampling, budgets and LoRA update): generation,
   environments and rendering, the old-logprob pass, the update, the weight sync.

Run: ``python benchmarks/bench_trainer.py [--threads 1] [--demo-model auto|smollm2|tiny|DIR]
[--engine-thread caller|pool] [--compare-sharing] [--compare-room] [--compare-masks]
[--compare-gqa] [--rollout-model tiny|smollm2] [--rollout-rounds N]`` (CPU; about a
minute, plus ~4 minutes for the demo-step split with SmolLM2, which runs only when that
model is prepared or ``--demo-model smollm2`` asks for it, and ~1 minute a round for
SmolLM2's rollouts).
"""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
import warnings

import torch

from gymhub.client import LoopThread
from gymhub.trainer.backends import InProcessBackend
from gymhub.trainer.chat import ChatRenderer
from gymhub.trainer.compute_thread import CallerExecutor
from gymhub.trainer.config import GRPOConfig
from gymhub.trainer.engines.base import GenerationRequest, SamplingConfig
from gymhub.trainer.engines.hf import TransformersEngine
from gymhub.trainer.loop import GRPOTrainer
from gymhub.trainer.parsers import make_parser
from gymhub.trainer.rollout import Budgets, Trajectory, run_group_batch
from gymhub.trainer.tiny import build_model, build_tokenizer, echo_lessons, teach

B, P, C, REPEATS, ROUNDS = 8, 64, 64, 5, 15
CEILING_ROUNDS = 7  # rounds of the ceiling's plain forwards (after one to warm up)
EVAL_TASKS = 40  # held-out tasks the demo-step split also scores (greedy), for its time


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


def drift_check(
    tok: object, renderer: ChatRenderer, tasks: list[tuple[str, str]], model: object = None,
    render_tools: bool = True,
) -> tuple[int, int]:
    """Episodes that drift from a full render, cache on, of a model that answers canonically.

    The random model of the timing runs samples byte-level tokens that no re-encoding
    reproduces, so its episodes drift whatever the engine does; this check uses the same
    tiny model taught (a second of CPU) to answer echo-v0 with a canonical tool call, and
    greedy decoding, so that any drift would be the rollout's or the cache's doing. A real
    model (``model``) is used as it is, greedily.
    """
    if model is None:
        model = teach(build_model(len(tok)), echo_lessons(tok))  # type: ignore[arg-type]
    engine = TransformersEngine(model, tok, pad_token_id=_pad(tok), cross_turn_cache=True)
    compute = CallerExecutor()
    with LoopThread("bench-drift") as loop:
        trajs = loop.run(run_group_batch(
            backend=InProcessBackend(), engine=engine, renderer=renderer,
            parser=make_parser("hermes"),
            sampling=SamplingConfig(temperature=0.0, stop_token_ids=(renderer.end_of_turn_id,)),
            budgets=Budgets(4, 32, 128, 4096), tasks=tasks, group_size=1, seed=0,
            drift_check="warn", executor=compute, render_tools=render_tools),
            wait=compute.run_until)
    return (sum(1 for t in trajs if t.drift is None or not t.drift.ok),
            sum(len(t.turn_versions) for t in trajs))


def _pad(tok: object) -> int:
    return int(getattr(tok, "pad_token_id", None) or 0)


def bench_rollouts(tok: object, model: object = None, rounds: int = ROUNDS,
                   compare: bool = True) -> dict[str, float]:
    """Tokens/s of multi-turn (cross-turn cache off, then on) and single-turn generation.

    The kinds are timed in alternation, round after round, so that a machine whose load
    changes during the run slows all of them alike; each rate is the median over rounds,
    each ratio the median of the rounds' own ratios. ``model`` (with its tokenizer
    ``tok``) replaces the random tiny Llama; a template that renders no tool schemas
    (SmolLM2's) gets prompts without them on both sides. ``compare=False`` leaves out the
    comparisons of single engine switches (threads, masks, grouped attention).
    """
    tiny = model is None
    if model is None:
        model = build_model(len(tok))  # type: ignore[arg-type]
    pad = _pad(tok)
    engines: dict[object, TransformersEngine] = {
        on: TransformersEngine(model, tok, pad_token_id=pad, cross_turn_cache=on)
        for on in (False, True)
    }
    # the same with the model building its own attention masks (prebuilt_masks off), and
    # with transformers repeating the key/value heads in prefills (grouped_attention off)
    engines["no masks"] = TransformersEngine(model, tok, pad_token_id=pad, prebuilt_masks=False)
    engines["no gqa"] = TransformersEngine(model, tok, pad_token_id=pad, grouped_attention=False)
    # one backend for every rollout, as the learner keeps one for its run (its cheap calls
    # move onto the loop after 16 in a row: by the end of the warm-up); and one that
    # always uses worker threads, the previous releases' way
    backends = {"loop": InProcessBackend(), "threads": InProcessBackend(inline_below_ms=None)}
    renderer = ChatRenderer(tok)
    tools = tiny or "tools" in str(getattr(tok, "chat_template", "") or "")
    tasks = [("echo-v0", f"echo-{i:04d}") for i in range(B)]
    # One event loop for every rollout, as the learner keeps one for its whole run (a
    # fresh loop per rollout would also time the creation of its worker threads), and
    # the engine's calls on this thread, as the learner runs them (two threads running
    # torch would slow every operator of the process: gymhub.trainer.compute_thread).
    runner, compute = LoopThread("bench-rollouts"), CallerExecutor()

    inside: dict[str, list[float]] = {}  # per run: seconds inside the engine, and in all
    appended: dict[str, list[int]] = {}  # per episode: tokens appended after its turns

    def episodes(cache: object, turns: int = 4, key: str = "", backend: str = "loop") -> int:
        stats: dict[str, float] = {}
        start = time.perf_counter()
        trajs = runner.run(run_group_batch(
            backend=backends[backend], engine=engines[cache], renderer=renderer,
            parser=make_parser("hermes"), sampling=SamplingConfig(temperature=1.0),
            budgets=Budgets(turns, 64 // turns, 64, 4096), tasks=tasks, group_size=1,
            seed=0, drift_check="off", executor=compute, stats=stats, render_tools=tools),
            wait=compute.run_until)
        if key:
            inside.setdefault(key, []).append(stats["time_generate"])
            inside.setdefault(key + "_all", []).append(time.perf_counter() - start)
            appended[key] = [len(t.ids) - t.loss_mask.index(1) - t.generated_tokens
                             for t in trajs if 1 in t.loss_mask]
        return sum(t.generated_tokens for t in trajs)

    drifted, turns = drift_check(tok, renderer, tasks, None if tiny else model, tools)
    # The single-turn side starts from exactly the multi-turn side's first prompts
    # (system + user + the tool schemas the template renders), so the two differ only in
    # what multi-turn adds: three more turns, each with its observation appended.
    from gymhub.envs import make

    env = make("echo-v0")
    reqs = []
    for i in range(B):
        obs, info = env.reset(options={"task_id": f"echo-{i:04d}"})
        reqs.append(GenerationRequest(renderer.prompt_ids(obs, info["tools"] if tools else None),
                                      64, seed=i))

    def single(engine: object = True) -> int:
        outs = engines[engine].generate(reqs, SamplingConfig(temperature=1.0))
        return sum(len(o.token_ids) for o in outs)

    runs = {
        "multi_off": lambda: episodes(False),
        "multi_on": lambda: episodes(True, key="multi_on"),
        "single": single,
        # the same pipeline as multi-turn (environment, rendering, parsing) for one turn
        # of 64 tokens: what multi-turn costs beyond the episode's fixed costs
        "single_rollout": lambda: episodes(True, turns=1, key="single_rollout"),
    }
    if compare:  # single switches, in the same rounds
        runs.update({
            "multi_threads": lambda: episodes(True, key="multi_threads", backend="threads"),
            "multi_no_masks": lambda: episodes("no masks"),
            "single_no_masks": lambda: single("no masks"),
            "multi_no_gqa": lambda: episodes("no gqa"),
            "single_no_gqa": lambda: single("no gqa"),
        })
    rates: dict[str, list[float]] = {k: [] for k in runs}
    secs: dict[str, list[float]] = {k: [] for k in runs}
    for fn in runs.values():
        fn()  # warm-up
    for _ in range(rounds):
        for key, fn in runs.items():
            t = time.perf_counter()
            n = fn()
            secs[key].append(time.perf_counter() - t)
            rates[key].append(n / secs[key][-1])
    runner.close()
    out = {k: statistics.median(v) for k, v in rates.items()}
    # Ratios of the same round (runs a second apart), then their median: steadier than a
    # ratio of medians when other work on the machine comes and goes.
    for key in ("multi_off", "multi_on", "single_rollout"):
        out[f"{key}_ratio"] = statistics.median(
            m / s for m, s in zip(rates[key], rates["single"], strict=True))
    out["multi_rollout_ratio"] = statistics.median(
        m / s for m, s in zip(rates["multi_on"], rates["single_rollout"], strict=True))
    out["on_off_ratio"] = statistics.median(
        a / b for a, b in zip(rates["multi_on"], rates["multi_off"], strict=True))
    for kind in ("multi", "single"):  # time with the switch on / time with it off
        with_it = rates["multi_on" if kind == "multi" else "single"]
        for switch in ("masks", "gqa") if compare else ():
            out[f"{kind}_{switch}_time"] = statistics.median(
                b / a for a, b in zip(with_it, rates[f"{kind}_no_{switch}"], strict=True))
    for key in ("multi_on", "single_rollout", "multi_threads"):  # after the warm-up's
        if key not in inside:
            continue
        out[f"{key}_engine_ms"] = 1000 * statistics.median(inside[key][1:])
        out[f"{key}_outside_ms"] = 1000 * statistics.median(
            a - e for a, e in zip(inside[key + "_all"][1:], inside[key][1:], strict=True))
    # the engine's part alone: single-turn generation's time over a multi-turn run's time
    # inside the engine (the environments, rendering and parsing outside it are the rest
    # of the gap); both runs generate the same tokens
    out["engine_only_ratio"] = statistics.median(secs["single"]) / statistics.median(
        inside["multi_on"][1:])
    out.update(_ceiling(
        model, round(statistics.mean(len(r.prompt_ids) for r in reqs)), secs["single"],
        appended["multi_on"], pad))
    out["drift"], out["drift_turns"] = float(drifted), float(turns)
    out["leaked"] = float(len(engines[True].caches))
    out["inline"] = float(len(backends["loop"].inline_envs))
    out["prompt_tokens"] = statistics.mean(len(r.prompt_ids) for r in reqs)
    out["rounds"] = float(rounds)
    return out


def _ceiling(model: object, prompt: int, single_secs: list[float], appended: list[int],
             pad: int) -> dict[str, float]:
    """What multi-turn must add to single-turn's time, as plain forwards: its ceiling.

    Single-turn generation is one prefill of the prompt, 63 decode steps (the last token
    is sampled, not fed) and 64 draws. A multi-turn run of the benchmark has the same
    prefill and draws, four calls of 15 decode steps over longer contexts, and per
    episode three observation prefills (each turn's last sampled token, the closing token
    and the observation) after the episode's cache. Those forwards are timed here for
    the batch as the engine runs them (a cache with room for the call's columns, its
    additive masks and grouped-query attention) but without the engine, the two sides
    alternated round after round. Single-turn's measured time plus the median of the
    rounds' differences (multi-turn's steps and prefills less single-turn's 63 steps) is
    the least time a multi-turn run could take on this machine with no engine,
    environment or rendering work at all; single-turn's time over that is the ceiling of
    the ratio.
    """
    from gymhub.trainer.engines.kv_room import reserve_room
    from gymhub.trainer.engines.masks import additive_mask, prebuilt_masks_apply
    from gymhub.trainer.hf_compat import cache_keyword, cache_of, last_logits_keyword

    # a turn's prefill feeds its last sampled token, the closing token and the observation
    width = round(statistics.mean(appended) / 3) + 1 if appended else 1
    kwargs = {**last_logits_keyword(model), "use_cache": True}
    cache_kw = cache_keyword(model)
    dtype = model.get_input_embeddings().weight.dtype  # type: ignore[attr-defined]
    prebuilt = prebuilt_masks_apply(model)
    token = torch.full((B, 1), pad + 1, dtype=torch.long)

    def call(cache: object, keys: int, feed: int, steps: int) -> tuple[float, float]:
        """Seconds of a prefill of ``feed`` tokens after ``cache``, then of ``steps`` steps."""
        attn = torch.ones((B, keys + feed + steps), dtype=torch.long)
        # the steps' masks as the engine's StepMasks hands them: views of one buffer
        steps_mask = torch.zeros((B, 1, 1, keys + feed + steps), dtype=dtype)
        fresh = copy.deepcopy(cache)  # the forwards append to the cache they are given,
        reserve_room(fresh, feed + steps)  # in place, as in the engine
        run = {**kwargs, cache_kw: fresh}
        t = time.perf_counter()
        if feed:
            model(input_ids=torch.full((B, feed), pad + 1, dtype=torch.long),  # type: ignore[operator]
                  attention_mask=(additive_mask(attn[:, : keys + feed], feed, dtype) if prebuilt
                                  else attn[:, : keys + feed]), **run)
        t1 = time.perf_counter()
        for s in range(keys + feed + 1, keys + feed + steps + 1):
            model(input_ids=token, attention_mask=(steps_mask[..., :s] if prebuilt  # type: ignore[operator]
                                                   else attn[:, :s]), **run)
        return t1 - t, time.perf_counter() - t1

    per_turn = 15 + width  # columns a turn adds to the cache: 15 decode steps, one prefill
    rounds: list[tuple[float, float, float]] = []  # single's steps, multi's steps, prefills
    with torch.no_grad(), _engine_attention(model):
        caches = []  # the cache before each engine call of a multi-turn run
        for turn in (0, 1, 2, 3):
            ctx = prompt if turn == 0 else prompt + (turn - 1) * per_turn + 15
            caches.append((cache_of(model(  # type: ignore[operator]
                input_ids=torch.full((B, ctx), pad + 2, dtype=torch.long), **kwargs)), ctx))
        # the two sides alternated, round after round, as in the rounds above
        for _ in range(CEILING_ROUNDS + 1):
            single_steps = call(*caches[0], 0, 63)[1]
            multi = [call(cache, ctx, width if turn else 0, 15)
                     for turn, (cache, ctx) in enumerate(caches)]
            rounds.append((single_steps, sum(s for _, s in multi), sum(p for p, _ in multi)))
    rounds = rounds[1:]  # the first warms up
    single = statistics.median(single_secs)
    extra = statistics.median(m + p - s for s, m, p in rounds)
    prefills = statistics.median(p for _, _, p in rounds)
    single_steps = statistics.median(s for s, _, _ in rounds)
    floor = single + extra
    return {"obs_tokens": float(width), "obs_prefill_ms": 1000 * prefills / 3,
            "step_ms": 1000 * single_steps / 63, "decode_extra_ms": 1000 * (extra - prefills),
            "floor_ms": 1000 * floor, "single_ms": 1000 * single, "ceiling": single / floor}


def _engine_attention(model: object) -> object:
    """The attention the engine runs the model with (see ``trainer/engines/gqa.py``)."""
    return TransformersEngine(model)._attention()


def demo_model(choice: str, tmp: str) -> tuple[str | None, str]:
    """The model directory for the demo-step split, or ``None`` and why not."""
    from pathlib import Path

    from gymhub.trainer.models import prepare_smollm2
    from gymhub.trainer.tiny import save_tiny

    if choice == "none":
        return None, "--demo-model none"
    if choice == "tiny":
        save_tiny(tmp)
        return tmp, "tiny Llama"
    if choice in ("auto", "smollm2"):
        def refuse(_: Path) -> Path:
            raise FileNotFoundError("not prepared")

        try:
            path = prepare_smollm2(download=None if choice == "smollm2" else refuse,
                                   log=lambda _: None)
        except FileNotFoundError:
            return None, ("SmolLM2-135M is not prepared yet (`make demo` prepares it, or "
                          "--demo-model smollm2 downloads it once); --demo-model tiny runs "
                          "the split on the tiny model")
        return str(path), "SmolLM2-135M-Instruct"
    return choice, choice


def _demo_cfg(model_dir: str, tmp: str, tiny: bool, **update: object) -> GRPOConfig:
    """``examples/sql_demo.toml`` in-process, quiet, with ``update`` applied.

    The tiny model's 400-token vocabulary spells the schema out in ~1,000 tokens, more
    than the demo's context budget, so for it the budget is raised (a check of the
    table, not a figure).
    """
    from pathlib import Path

    from gymhub.trainer.config import load_config

    cfg = load_config(Path(__file__).resolve().parent.parent / "examples" / "sql_demo.toml")
    return cfg.model_copy(update={
        "model": model_dir, "env_urls": [], "output_dir": tmp, "progress": False,
        "report": False, "tensorboard": False, "save_trajectories": False,
        **({"max_context_tokens": 4096} if tiny else {}), **update,
    })


def bench_demo_step(model_dir: str, tmp: str, steps: int, tiny: bool = False,
                    share: bool = True, pool: bool = False) -> dict[str, float]:
    """The last of ``steps`` GRPO steps of the demo's config, sql-v0 in-process.

    ``share=False`` turns off both shared starts (the engine's prefill of alike prompts'
    common start, the update's forward of a group's prompt once). ``pool=True`` runs the
    engine's calls on the loop's thread pool, as releases before the trainer's own
    thread did (``gymhub.trainer.compute_thread``; a process of its own, since it slows
    every later torch operator of the process).
    """
    # every episode trains, so that the update is timed even when the untrained model
    # scores alike across a group (dynamic sampling would then skip the update)
    cfg = _demo_cfg(model_dir, tmp, tiny, max_steps=steps, shared_prompt_update=share,
                    dynamic_sampling=False)
    with GRPOTrainer(cfg) as trainer:
        if hasattr(trainer.engine, "share_prefixes"):
            trainer.engine.share_prefixes = share
        if pool:
            trainer.compute = None
        metrics = [trainer.train_step() for _ in range(steps)]
        result = trainer.evaluate_tasks(trainer.eval_tasks[:EVAL_TASKS])
    return {**metrics[-1], "time_eval": result.seconds}


def bench_sharing(model_dir: str, tmp: str, tiny: bool = False, rounds: int = 2,
                  eval_rounds: int = 1) -> None:
    """Shared starts on against off, alternated round by round on the same work.

    The demo's first step (8 tasks x 4 samples): its rollouts generated with the engine's
    prefix sharing on and off, then the update's forward and backward of those same
    trajectories with the prefix-tree forward on (the demo's micro-batch) and off (one
    group per micro-batch: the same work in less memory); no optimizer step, so every
    round computes the same thing; then a greedy evaluation of held-out tasks.
    """
    cfg = _demo_cfg(model_dir, tmp, tiny)
    times: dict[str, dict[bool, list[float]]] = {k: {True: [], False: []}
                                                 for k in ("generation", "update", "evaluation")}
    with GRPOTrainer(cfg) as trainer:
        tasks = trainer.sampler.next(cfg.tasks_per_step)
        trajs: list[Trajectory] = []
        for r in range(rounds):
            for share in (True, False):
                trainer.engine.share_prefixes = share  # type: ignore[attr-defined]
                t = time.perf_counter()
                trajs = trainer.rollout(tasks, group_size=cfg.group_size, seed=r, prefix="b:")
                times["generation"][share].append(time.perf_counter() - t)
        rows = [(t, 1.0) for t in trajs if t.generated_tokens > 0]
        trainer.model.train()
        for _ in range(rounds):
            for share in (True, False):
                trainer.cfg = cfg.model_copy(update={"shared_prompt_update": share})
                # the plain forward keeps every row's activations for the backward: 16
                # rows of ~400 tokens need ~20 GB, so it runs a GRPO group at a time
                mb = cfg.micro_batch_size if share else cfg.group_size
                t = time.perf_counter()
                for i in range(0, len(rows), mb):
                    logp, mask, _, _ = trainer._logps(rows[i : i + mb])
                    (logp * mask).sum().backward()  # type: ignore[no-untyped-call]
                trainer.optimizer.zero_grad(set_to_none=True)
                times["update"][share].append(time.perf_counter() - t)
        held = trainer.eval_tasks[:EVAL_TASKS]
        for _ in range(eval_rounds):
            for share in (True, False):
                trainer.engine.share_prefixes = share  # type: ignore[attr-defined]
                times["evaluation"][share].append(trainer.evaluate_tasks(held).seconds)
    print(f"shared starts on / off, alternated ({rounds} rounds; evaluation {eval_rounds}), the "
          f"demo's first step: {len(trajs)} episodes, {len(rows)} trained; {len(held)}-task "
          "evaluation")
    for part, by in times.items():
        on, off = statistics.median(by[True]), statistics.median(by[False])
        print(f"  {part:10s}  on {on:7.2f} s   off {off:7.2f} s   on / off {on / off:.2f}x time")


def bench_switch(model_dir: str, tmp: str, attr: str, what: str, tiny: bool = False,
                 rounds: int = 2) -> None:
    """One engine switch (``attr``) on against off, alternated round by round.

    The same work each way: the demo's first step's rollouts (its tasks, group size and
    sampling), then a greedy evaluation of held-out tasks. ``reserve_room``,
    ``prebuilt_masks`` and ``grouped_attention`` change no sample (tested), so only the
    time is compared.
    """
    cfg = _demo_cfg(model_dir, tmp, tiny)
    times: dict[str, dict[bool, list[float]]] = {k: {True: [], False: []}
                                                 for k in ("generation", "evaluation")}
    with GRPOTrainer(cfg) as trainer:
        tasks = trainer.sampler.next(cfg.tasks_per_step)
        held = trainer.eval_tasks[:EVAL_TASKS]
        trainer.rollout(tasks, group_size=cfg.group_size, seed=0, prefix="w:")  # warm-up
        for r in range(rounds):
            for on in (True, False):
                setattr(trainer.engine, attr, on)
                t = time.perf_counter()
                trainer.rollout(tasks, group_size=cfg.group_size, seed=r, prefix="b:")
                times["generation"][on].append(time.perf_counter() - t)
                times["evaluation"][on].append(trainer.evaluate_tasks(held).seconds)
    print(f"{what} on / off, alternated ({rounds} rounds): the demo's first step "
          f"({cfg.tasks_per_step} tasks x {cfg.group_size} samples) and a {len(held)}-task "
          "evaluation")
    for part, by in times.items():
        on, off = statistics.median(by[True]), statistics.median(by[False])
        print(f"  {part:10s}  on {on:7.2f} s   off {off:7.2f} s   on / off {on / off:.2f}x time")


def print_demo_split(m: dict[str, float], label: str, steps: int) -> None:
    rest = m["time_rollout"] - m["time_generate"]
    update = m["time_update"] - m["time_old_logprobs"] - m["time_weight_sync"]
    total = m["time_step"]
    print(f"time per demo step split into its parts ({label}, examples/sql_demo.toml, "
          f"sql-v0 in-process, step {steps} of {steps})")
    print(f"  prompt tokens (mean) {m['prompt_tokens_mean']:7.0f}   generated tokens "
          f"(mean) {m['generated_tokens'] / max(m['episodes'], 1):5.1f}   episodes "
          f"{m['episodes']:.0f}")
    old_note = ("skipped: one optimizer step per batch, ratio 1"
                if m["time_old_logprobs"] < 1e-3 else "")
    parts = [
        ("generation (engine)", m["time_generate"], ""),
        ("environments, rendering, parsing", rest, ""),
        ("old-logprob pass", m["time_old_logprobs"], old_note),
        ("update (forward, backward, AdamW)", update, ""),
        ("weight sync to the engine", m["time_weight_sync"], ""),
    ]
    for name, sec, note in parts:
        print(f"  {name:34s} {sec:8.2f} s  {100 * sec / total:5.1f} %  {note}".rstrip())
    print(f"  {'step':34s} {total:8.2f} s  100.0 %")
    print(f"  {EVAL_TASKS}-task held-out evaluation (greedy) {m['time_eval']:8.2f} s")


def print_rollouts(r: dict[str, float], label: str) -> None:
    print(f"rollout generation, {B} episodes, transformers engine, {label}, prompts of "
          f"{r['prompt_tokens']:.0f} tokens (median of {r['rounds']:.0f} rounds)")
    who = "taught tiny model" if label == "tiny Llama" else label
    print(f"  drift check (cache on, {who}, greedy): {r['drift']:.0f} of {B} "
          f"episodes ({r['drift_turns']:.0f} turns) drifted; {r['leaked']:.0f} KV caches left "
          "after the episodes ended")
    print(f"  single-turn (1 x 64 tokens)                       {r['single']:8.0f} tokens/s")
    print(f"  multi-turn  (4 x 16 tokens, echo-v0), cache off   {r['multi_off']:8.0f} tokens/s"
          f"   {r['multi_off_ratio']:.2f}x single-turn (before)")
    print(f"  multi-turn  (4 x 16 tokens, echo-v0), cache on    {r['multi_on']:8.0f} tokens/s"
          f"   {r['multi_on_ratio']:.2f}x single-turn (after)")
    print(f"  single-turn rollouts (1 x 64 tokens, echo-v0)     {r['single_rollout']:8.0f} tokens/s"
          f"   {r['single_rollout_ratio']:.2f}x single-turn; multi-turn (cache on) is "
          f"{r['multi_rollout_ratio']:.2f}x these")
    print(f"  cross-turn cache speed-up (on / off): {r['on_off_ratio']:.2f}x; the engine alone "
          f"(multi-turn's time inside it): {r['engine_only_ratio']:.2f}x single-turn")
    print(f"  what multi-turn must add, as plain forwards (the engine's masks and attention, no "
          f"engine): each turn's observation, {B} x {r['obs_tokens']:.0f} tokens prefilled after "
          f"the episode's cache, {r['obs_prefill_ms']:.1f} ms; 60 decode steps over the longer "
          f"contexts instead of 63 (a step ~{r['step_ms']:.2f} ms), {r['decode_extra_ms']:+.1f} ms "
          f"a run: with nothing else, multi-turn would take {r['floor_ms']:.1f} ms a run against "
          f"single-turn's {r['single_ms']:.1f} ms, a ceiling of {r['ceiling']:.2f}x single-turn")
    for key, name in (("multi_on", "multi-turn rollout (cache on)"),
                      ("single_rollout", "single-turn rollout"),
                      ("multi_threads", "multi-turn, env calls in threads")):
        if key + "_engine_ms" not in r:
            continue
        print(f"  {name:31s} per run: {r[key + '_engine_ms']:6.1f} ms inside the engine, "
              f"{r[key + '_outside_ms']:5.1f} ms outside it (environments, rendering, parsing, "
              "waiting for the lockstep batch)")
    if "multi_on_engine_ms" in r:
        engine, outside = r["multi_on_engine_ms"], r["multi_on_outside_ms"]
        print(f"  left above that ceiling, per multi-turn run: {engine - r['floor_ms']:.1f} ms of "
              "the engine's own per-turn work (building and keeping the batch caches, masks, each "
              f"call's setup) and {outside:.1f} ms outside it; with the work outside the engine "
              f"as it is, the ceiling is {r['single_ms'] / (r['floor_ms'] + outside):.2f}x")
    for switch, what in (("masks", "prebuilt attention masks"),
                         ("gqa", "grouped-query attention in prefills")):
        if f"single_{switch}_time" in r:
            print(f"  {what}, time with / without: single-turn generation "
                  f"{r[f'single_{switch}_time']:.2f}x, multi-turn rollouts "
                  f"{r[f'multi_{switch}_time']:.2f}x")
    print(f"  in-process calls made on the loop: {r['inline']:.0f} kinds")


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=0,
                   help="torch CPU threads (0: torch's default); 1 gives steadier figures on "
                        "a machine shared with other work")
    p.add_argument("--demo-model", default="auto",
                   help="model of the demo-step split: auto (SmolLM2 when prepared, else "
                        "skipped), smollm2 (prepare it, downloading once), tiny, none (skip "
                        "it), or a directory")
    p.add_argument("--demo-steps", type=int, default=2,
                   help="GRPO steps of the split; the last is reported (the first warms up)")
    p.add_argument("--compare-sharing", action="store_true",
                   help="also time the demo's first step and an evaluation with shared starts "
                        "on and off, alternated")
    p.add_argument("--compare-room", action="store_true",
                   help="also time the demo's first step and an evaluation with the engine's "
                        "reserved KV-cache room on and off, alternated")
    p.add_argument("--compare-masks", action="store_true",
                   help="also time the demo's first step and an evaluation with the engine's "
                        "prebuilt additive attention masks on and off, alternated")
    p.add_argument("--compare-gqa", action="store_true",
                   help="also time the demo's first step and an evaluation with the engine's "
                        "grouped-query attention in prefills on and off, alternated")
    p.add_argument("--engine-thread", choices=("caller", "pool"), default="caller",
                   help="where the demo split's engine calls run: the trainer's thread (the "
                        "default, as the learner runs) or the loop's thread pool (earlier "
                        "releases); compare two runs, one process each")
    p.add_argument("--rollout-model", choices=("tiny", "smollm2"), default="tiny",
                   help="model of the multi-turn / single-turn rollouts: the tiny Llama (the "
                        "default; per-turn fixed costs weigh most there) or the demo's "
                        "SmolLM2-135M (prepared once, as for the demo; ~1 minute a round)")
    p.add_argument("--rollout-rounds", type=int, default=0,
                   help=f"rounds of the rollout comparison (0: {ROUNDS} for the tiny model, 3 "
                        "for SmolLM2)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
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
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, label = demo_model(args.demo_model, tmp)
        if model_dir is None:
            print(f"time per demo step split into its parts: skipped: {label}")
        else:
            tiny = args.demo_model == "tiny"
            split = bench_demo_step(model_dir, tmp, args.demo_steps, tiny,
                                    pool=args.engine_thread == "pool")
            print_demo_split(split, label, args.demo_steps)
            if args.compare_sharing:
                bench_sharing(model_dir, tmp, tiny)
            if args.compare_room:
                bench_switch(model_dir, tmp, "reserve_room",
                             "decoding into reserved KV-cache room", tiny)
            if args.compare_masks:
                bench_switch(model_dir, tmp, "prebuilt_masks",
                             "attention masks prebuilt in SDPA's additive form", tiny)
            if args.compare_gqa:
                bench_switch(model_dir, tmp, "grouped_attention",
                             "grouped-query attention in prefills (no repeated heads)", tiny)
    if args.rollout_model == "smollm2":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path, _ = demo_model("smollm2", "")
        label = "SmolLM2-135M-Instruct"
        rtok = AutoTokenizer.from_pretrained(path)
        rmodel = AutoModelForCausalLM.from_pretrained(path).eval()
        r = bench_rollouts(rtok, rmodel, rounds=args.rollout_rounds or 3, compare=False)
    else:
        label = "tiny Llama"
        r = bench_rollouts(tok, rounds=args.rollout_rounds or ROUNDS)
    print_rollouts(r, label)
    print(f"multi-turn / single-turn tokens/s: {r['multi_on_ratio']:.2f}\u00d7")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
