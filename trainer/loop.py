"""The GRPO loop: tasks → concurrent rollouts → advantages → micro-batched updates.

One step: draw ``tasks_per_step`` tasks (a seeded shuffle, epoch by epoch; the
position is part of a checkpoint), play ``group_size`` episodes of each, turn scores
into group-normalised advantages, and update the policy on the kept trajectories'
action tokens with the clipped loss of :mod:`gymhub.trainer.losses`. With
``gradient_accumulation_steps = 0`` the whole batch is one optimizer step and the
old policy is the current one (``π_old = sg(π_θ)``, ratio 1, as TRL does); with more
updates per batch, old log-probabilities are computed once before the first update.
A batch with no trainable token (all errored, truncated and masked, or dropped) skips
the optimizer entirely: loss 0, no update, no scheduler step.

Every step appends one line to ``metrics.jsonl`` and, optionally, its trajectories to
``trajectories.jsonl``; a progress line shows reward, loss and tokens per second, and
the episodes the environment servers lost (``episodes_lost``) when there were any: those
are masked like every errored episode (left out of the group statistics, the loss and
the reward means), never scored 0.

On several processes (``torchrun``, ``gymhub train --nproc N``) each rank plays its share
of the step's groups, every rank then holds the whole step's trajectories, and the policy
is sharded with FSDP2; :mod:`.distributed` says how, and why the results do not depend on
the number of processes. Only rank 0 writes files.

Against servers, the trainer first waits up to ``env_wait_s`` for them to start (they
are often launched at the same moment), then checks that they serve the environments
as configured, all before the model loads.
"""

from __future__ import annotations

import json
import random
import sys
import time
import weakref
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gymhub.errors import ConfigError
from gymhub.lockfile import env_digests

from .advantages import Outcome, compute_advantages, partial_credit, trajectory_return
from .backends import EpisodeBackend, RemoteBackend, make_backend
from .chat import ChatRenderer
from .checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from .compute_thread import CallerExecutor
from .config import GRPOConfig
from .distributed import Padding, Processes, full_value
from .engines.base import Engine, SamplingConfig
from .evaluate import EvalResult, run_eval
from .forward import token_logps
from .hf_compat import takes_logits_to_keep
from .losses import StepCounts, policy_loss, truncated_importance_weights
from .parsers import make_parser
from .policy import apply_lora, load_policy, lr_lambda, make_engine
from .rollout import Budgets, Trajectory, run_group_batch, write_jsonl
from .tasks import TaskSampler, select_tasks

if TYPE_CHECKING:
    from gymhub.client import LoopThread

__all__ = ["GRPOTrainer", "TaskSampler", "apply_lora", "load_policy", "select_tasks"]

_T = TypeVar("_T")

#: Update statistics averaged over micro-batches (one process) or trained tokens (several).
_STAT_KEYS = ("clip_low", "clip_high", "clip_delta", "kl", "ratio_mean")

#: Metrics that measure time, excluded when comparing runs for exact reproduction.
TIMING_KEYS = frozenset({
    "time_rollout", "time_generate", "time_old_logprobs", "time_weight_sync", "time_update",
    "time_step", "tokens_per_s",
})


class GRPOTrainer:
    """Runs a GRPO training job described by a :class:`GRPOConfig`.

    Args:
        cfg: the configuration.
        model: a ready model (tests); loaded from ``cfg.model`` when ``None``.
        tokenizer: its tokenizer.
        backend: where episodes run; when ``None``, the servers of ``cfg.env_urls``
            (or ``cfg.env_urls_file``) over HTTP, else in-process environments.
        engine: the inference engine; built from ``cfg.engine`` when ``None``.
    """

    def __init__(
        self,
        cfg: GRPOConfig,
        *,
        model: Any = None,
        tokenizer: Any = None,
        backend: EpisodeBackend | None = None,
        engine: Engine | None = None,
    ) -> None:
        import torch

        self.cfg = cfg
        self._loop: LoopThread | None = None
        # the engine's calls run on the thread that waits in _run (see .compute_thread);
        # None runs them on the loop's thread pool instead (benchmarks compare the two)
        self.compute: CallerExecutor | None = CallerExecutor()
        self._stop_loop: weakref.finalize[Any, Any] | None = None
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)
        # before the model loads: on GPUs this rank's device becomes the current one
        self.dist = Processes.from_env(cfg)
        self.backend = backend if backend is not None else make_backend(cfg)
        # Servers, environment ids and tasks are checked before the model loads: a typo
        # or a server that never started costs seconds, not a model load.
        if isinstance(self.backend, RemoteBackend):
            self._await_servers(self.backend)
        train, self.eval_tasks = self._run(
            lambda: select_tasks(self.backend, cfg.env_ids, cfg.task_filter, cfg.eval_tasks)
        )
        if model is None:
            model, tokenizer = load_policy(cfg)
        model = self.dist.shard(model)  # FSDP2 on several processes; as is in one
        self.model, self.tokenizer = model, tokenizer
        self.engine = engine or make_engine(cfg, model, tokenizer)
        self.renderer = ChatRenderer(tokenizer)
        self.parser = make_parser(cfg.tool_parser, cfg.tag_tools)
        self.sampling = SamplingConfig(
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            stop=tuple(cfg.stop),
            stop_token_ids=(self.renderer.end_of_turn_id,),
        )
        self.budgets = Budgets(
            cfg.max_turns,
            cfg.max_tokens_per_turn,
            cfg.max_tokens_per_episode,
            cfg.max_context_tokens,
        )
        self.params = [p for p in model.parameters() if p.requires_grad]
        self._keeps_logits = takes_logits_to_keep(model)
        self.optimizer = torch.optim.AdamW(
            self.params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay
        )
        # the schedule counts optimizer steps: updates_per_batch of them per trainer step
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(cfg, max(cfg.max_steps * cfg.updates_per_batch, 1))
        )
        self.out = Path(cfg.output_dir)
        self.step = 0
        self.sampler = TaskSampler(train, cfg.seed)
        self.history: list[dict[str, float]] = []
        self._warned_context = False
        self._tb: Any = None

    def _await_servers(self, remote: RemoteBackend) -> None:
        """Wait for the servers to start (one line on stderr), then check what they serve.

        Raises:
            ServerUnreachable: a server was not ready within ``env_wait_s``.
            ConfigError: a server lacks an environment or runs it with other arguments,
                or ``env_urls_file`` listed no server in time.
        """
        cfg = self.cfg

        def say(line: str) -> None:
            print(f"gymhub: {line}", file=sys.stderr, flush=True)

        self._run(lambda: remote.wait_ready(cfg.env_wait_s, say))
        self._run(lambda: remote.check(cfg.env_ids, cfg.env_args))

    def _run(self, make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """Run a coroutine on the run's event loop (started on first use).

        One loop lives for the whole run, on a background thread, so the backend's
        connection pool (connections, semaphores and futures belong to one loop) is
        built once and kept warm across steps, instead of a fresh ``asyncio.run`` and
        a rebuilt pool, with a handshake per connection, at every rollout.
        :meth:`close` (which :meth:`train` calls at the end) releases both. The
        calling thread meanwhile runs the engine's calls (see :mod:`.compute_thread`).
        """
        if self._loop is None:
            from gymhub.client import LoopThread

            self._loop = LoopThread("gymhub-learner")
            self._stop_loop = weakref.finalize(self, self._loop.close)
        wait = self.compute.run_until if self.compute is not None else None
        return self._loop.run(make(), wait=wait)

    def close(self) -> None:
        """Close the backend's open episodes and connections, then stop the run's loop.

        Idempotent; a later rollout or evaluation starts a new loop and pool.
        """
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            closer = getattr(self.backend, "aclose", None)
            if closer is not None:
                loop.run(closer())
        finally:
            if self._stop_loop is not None:
                self._stop_loop()

    def __enter__(self) -> GRPOTrainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ resume
    def resume(self, path: str | Path | None = None) -> None:
        """Restore model, optimizer, schedule, RNG, step and data position."""
        target = Path(path) if path and path != "latest" else latest_checkpoint(self.out)
        if target is None:
            return
        state = load_checkpoint(
            target, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
            restore=self.dist.restorer(self.model, self.optimizer),
        )
        self.step = int(state["step"])
        self.sampler.restore(state["sampler"])
        # Push the restored weights: a vLLM engine still holds the base model. The push
        # numbers them with the checkpoint's version, so turns are tagged as before.
        self.engine.policy_version = int(state.get("policy_version", self.step)) - 1
        self.engine.update_weights(self.model)

    def save(self) -> Path:
        """Checkpoint the current step (on several processes: every rank calls it)."""
        path = self.out / "checkpoints" / f"step-{self.step}"
        tensors = optim = None
        if self.dist.active:  # gathered to rank 0, which alone writes
            tensors, optim = self.dist.full_state(self.model, self.optimizer)
            if not self.dist.is_main:
                self.dist.barrier()
                return path
        save_checkpoint(
            path,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            tensors=tensors,
            optimizer_state=optim,
            state={
                "step": self.step,
                "sampler": self.sampler.state(),
                "policy_version": self.engine.policy_version,
                "config": self.cfg.to_dict(),
                # Which exact hub files the policy trained on (lock entry or RECORD hash).
                "hub_envs": env_digests(list(self.cfg.env_ids)),
            },
        )
        self.dist.barrier()  # nobody reads the checkpoint before it is there
        return path

    # --------------------------------------------------------------- training
    def train(self) -> list[dict[str, float]]:
        """Run until ``max_steps``; returns every step's metrics.

        The backend's connections and the run's event loop are released at the end
        (:meth:`close`), also when a step raises.
        """
        try:
            return self._train()
        finally:
            self.close()

    def _train(self) -> list[dict[str, float]]:
        if self.cfg.resume:
            self.resume(self.cfg.resume)
        self.out.mkdir(parents=True, exist_ok=True)
        while self.step < self.cfg.max_steps:
            self.train_step()
            if self.cfg.checkpoint_interval and self.step % self.cfg.checkpoint_interval == 0:
                self.save()
        if self.cfg.max_steps and not self.cfg.checkpoint_interval:
            self.save()
        if self.cfg.progress and self.dist.is_main:
            print(file=sys.stderr)
        if self.cfg.report and self.history and self.dist.is_main:
            from .report import write_report

            write_report(self.out, self.history)
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        return self.history

    def rollout(
        self,
        tasks: list[tuple[str, str]],
        *,
        group_size: int,
        seed: int,
        sampling: SamplingConfig | None = None,
        prefix: str = "",
        stats: dict[str, float] | None = None,
        task_indices: list[int] | None = None,
    ) -> list[Trajectory]:
        """Play ``group_size`` episodes of each task.

        ``stats`` and ``task_indices``: see :func:`~.rollout.run_group_batch`.
        """
        return self._run(
            lambda: run_group_batch(
                backend=self.backend,
                engine=self.engine,
                renderer=self.renderer,
                parser=self.parser,
                sampling=sampling or self.sampling,
                budgets=self.budgets,
                tasks=tasks,
                group_size=group_size,
                seed=seed,
                group_prefix=prefix,
                drift_check=self.cfg.drift_check,
                max_concurrent=self.cfg.max_concurrent_episodes,
                instructions=self.cfg.instructions,
                render_tools=self.cfg.render_tools,
                stats=stats,
                executor=self.compute,
                task_indices=task_indices,
            )
        )

    def evaluate(self) -> float | None:
        """Mean greedy score on the held-out tasks (errored episodes left out).

        On several processes rank 0 plays them, with the weights gathered on every rank,
        and every rank gets its score.
        """
        if not self.eval_tasks:
            return None
        if not self.dist.active:
            return self.evaluate_tasks(self.eval_tasks).mean
        with self.dist.gathered():
            mean = self.evaluate_tasks(self.eval_tasks).mean if self.dist.is_main else None
            return self.dist.broadcast(mean)

    def evaluate_tasks(
        self, tasks: list[tuple[str, str]], *, samples: int = 1, temperature: float = 0.0
    ) -> EvalResult:
        """Score ``tasks``: mean, standard error, errors, speed.

        Greedy, one episode per task, by default; ``samples`` episodes per task at
        ``temperature`` give each task the mean of its samples (see :func:`run_eval`).
        """
        return self._run(
            lambda: run_eval(
                backend=self.backend,
                engine=self.engine,
                renderer=self.renderer,
                parser=self.parser,
                cfg=self.cfg,
                tasks=tasks,
                samples=samples,
                temperature=temperature,
                executor=self.compute,
            )
        )

    def _return(self, t: Trajectory) -> float | None:
        """A trajectory's return: score, turn rewards, partial credit (``None``: errored)."""
        if t.value is None:
            return None
        cfg = self.cfg
        ret = trajectory_return(t.value, t.turn_rewards, use_turn_rewards=cfg.use_turn_rewards,
                                discount=cfg.discount)
        if cfg.partial_credit and t.score is not None:
            # an unscored (truncated) episode earns no partial credit either
            ret += partial_credit(t.score.components, cfg.partial_credit,
                                  where=f"{t.env_id}'s score")
        return ret

    def train_step(self) -> dict[str, float]:
        """One GRPO step; appends and returns its metrics."""
        cfg = self.cfg
        t0 = time.perf_counter()
        tasks = self.sampler.next(cfg.tasks_per_step)
        stats: dict[str, float] = {}
        # this rank's groups (all of them in one process), numbered by their place in the
        # step; then every rank holds the whole step's trajectories, in index order
        mine = self.dist.my_tasks(len(tasks))
        with self.dist.gathered():
            trajs = self.rollout(
                [tasks[i] for i in mine],
                group_size=cfg.group_size,
                seed=cfg.seed * 1_000_003 + self.step,
                prefix=f"s{self.step}:",
                stats=stats,
                task_indices=mine,
            )
        trajs = self.dist.gather(trajs, key=lambda t: t.index)
        t1 = time.perf_counter()
        starved = self._check_context(trajs)
        outcomes = [Outcome(t.group, self._return(t), t.truncated) for t in trajs]
        adv = compute_advantages(
            outcomes,
            scaling=cfg.reward_scaling,
            dynamic_sampling=cfg.dynamic_sampling,
            mask_truncated=cfg.mask_truncated,
        )
        rows = [
            (t, a)
            for t, a, k in zip(trajs, adv.advantages, adv.keep, strict=True)
            if k and t.generated_tokens > 0
        ]
        if rows:
            # Free the engine's memory for the update, whose push wakes it (a vLLM engine
            # with sleep mode drops its weights here). A no-op batch keeps it awake.
            self.engine.sleep()
        update = self._update(rows)
        self.step += 1
        t2 = time.perf_counter()
        generated = sum(t.generated_tokens for t in trajs)
        values = [t.value for t in trajs if t.value is not None]
        metrics: dict[str, float] = {
            "step": float(self.step),
            "reward_mean": sum(values) / len(values) if values else 0.0,
            "return_mean": (sum(o.value for o in outcomes if o.value is not None)
                            / max(1, sum(o.value is not None for o in outcomes))),
            "episodes": float(len(trajs)),
            "episodes_lost": float(sum(t.lost for t in trajs)),
            "truncated": float(sum(t.truncated for t in trajs)),
            "parse_errors": float(sum(t.parse_errors for t in trajs)),
            "drift": float(sum(1 for t in trajs if t.drift is not None and not t.drift.ok)),
            "generated_tokens": float(generated),
            "turns_mean": sum(len(t.turn_versions) for t in trajs) / max(len(trajs), 1),
            "context_starved": float(starved),
            "prompt_tokens_mean": sum(_prompt_tokens(t) for t in trajs) / max(len(trajs), 1),
            "lr": float(self.scheduler.get_last_lr()[0]),
            "time_rollout": t1 - t0,
            "time_generate": stats.get("time_generate", 0.0),
            "time_update": t2 - t1,
            "time_step": t2 - t0,
            "tokens_per_s": generated / max(t1 - t0, 1e-9),
            **{f"adv/{k}": v for k, v in adv.metrics().items()},
            **update,
        }
        if cfg.eval_interval and self.step % cfg.eval_interval == 0:
            score = self.evaluate()
            if score is not None:
                metrics["eval_score"] = score
        self._log(metrics, trajs)
        return metrics

    def _check_context(self, trajs: list[Trajectory]) -> int:
        """Count episodes whose prompt left no room to generate; refuse a step of only those.

        Such an episode ends before its first token with reward 0: a run made of them
        trains on nothing while looking like a hard task, so it must not pass silently.

        Raises:
            ConfigError: no episode of the step could generate a single token.
        """
        starved = [t for t in trajs if t.stop_reason == "context" and not any(t.loss_mask)]
        if not starved:
            return 0
        longest = max(starved, key=lambda t: len(t.ids))
        why = (f"{len(starved)} of {len(trajs)} episodes had no room to generate: the prompt "
               f"of {longest.env_id} task {longest.task_id} is {len(longest.ids)} tokens, "
               f"max_context_tokens is {self.cfg.max_context_tokens}; raise "
               "max_context_tokens (or set render_tools = false for tag-style tool calls)")
        if len(starved) == len(trajs):
            raise ConfigError(why)
        if not self._warned_context:
            self._warned_context = True
            if not self.dist.is_main:  # every rank holds the same trajectories: one says it
                return len(starved)
            print(f"warning: {why}", file=sys.stderr, flush=True)
        return len(starved)

    def _log(self, metrics: dict[str, float], trajs: list[Trajectory]) -> None:
        self.history.append(metrics)
        if not self.dist.is_main:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        with (self.out / "metrics.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(metrics) + "\n")
        if self.cfg.tensorboard:
            from .report import tensorboard_writer

            self._tb = self._tb or tensorboard_writer(self.out / "tensorboard")
            if self._tb is not None:
                for key, value in metrics.items():
                    self._tb.add_scalar(key, value, self.step)
        if self.cfg.save_trajectories:
            write_jsonl(self.out / "trajectories.jsonl", trajs, step=self.step)
        if self.cfg.progress:
            bar = "#" * int(20 * self.step / max(self.cfg.max_steps, 1))
            live = sys.stderr.isatty()  # a log file gets one line per step, not \r runs
            start = "\r" if live else ""
            lost = int(metrics.get("episodes_lost", 0))
            print(
                f"{start}step {self.step}/{self.cfg.max_steps} [{bar:<20}] "
                f"reward {metrics['reward_mean']:.3f} loss {metrics['loss']:+.4f} "
                f"{metrics['tokens_per_s']:.0f} tok/s" + (f" lost {lost}" if lost else "")
                + ("\033[K" if live else ""),  # a live line clears what a longer one left
                end="" if live else "\n",
                file=sys.stderr,
                flush=True,
            )

    # ----------------------------------------------------------------- update
    def _logps(self, batch: list[tuple[Trajectory, float]]) -> tuple[Any, Any, Any, Any]:
        """Forward a micro-batch: (log-probs, mask, engine log-probs, advantages).

        Only the columns from the batch's first sampled token on are returned: the
        positions before it carry no loss, and projecting them onto the vocabulary
        (``logits_to_keep``) and normalising there is most of the forward's memory and a
        large part of its time when prompts are long. Every loss is mask-weighted, so
        dropping all-masked columns changes no value. Shared prompt starts (a group's
        prompt, a database's schema) are forwarded once (:mod:`.forward`).
        """
        import torch

        device = next(self.model.parameters()).device
        width = max(len(t.ids) for t, _ in batch)
        mask = torch.zeros((len(batch), width - 1), dtype=torch.bool)
        eng = torch.zeros((len(batch), width - 1))
        for i, (t, _) in enumerate(batch):
            n = len(t.ids)
            mask[i, : n - 1] = torch.tensor(t.loss_mask[1:], dtype=torch.bool)
            eng[i, : n - 1] = torch.tensor(t.logprobs[1:])
        # column j of mask/logits predicts token j + 1; the first sampled token is at
        # ``first`` >= 1, so columns before ``first - 1`` carry no loss
        prompts = [_prompt_tokens(t) for t, _ in batch]
        start = min(max(min(prompts, default=1) - 1, 0), width - 1)
        logp = token_logps(
            self.model, [t.ids for t, _ in batch], prompts, start=start,
            pad=self.tokenizer.pad_token_id or 0, temperature=self.cfg.temperature,
            keeps_logits=self._keeps_logits, device=device,
            # several processes: one forward per micro-batch, so FSDP's collectives line up
            share=(self.cfg.shared_prompt_update and not self.cfg.gradient_checkpointing
                   and not self.dist.active),
        )
        adv = torch.tensor([a for _, a in batch], device=device)
        return logp, mask[:, start:].to(device), eng[:, start:].to(device), adv

    def _update(self, rows: list[tuple[Trajectory, float]]) -> dict[str, float]:
        import torch

        cfg = self.cfg
        zero = {
            "loss": 0.0,
            "grad_norm": 0.0,
            "updates": 0.0,
            "trained_tokens": 0.0,
            "clip_low": 0.0,
            "clip_high": 0.0,
            "clip_delta": 0.0,
            "kl": 0.0,
            "ratio_mean": 1.0,
            "time_old_logprobs": 0.0,
            "time_weight_sync": 0.0,
        }
        if not rows:
            return zero
        mb = cfg.micro_batch_size
        micro = [rows[i : i + mb] for i in range(0, len(rows), mb)]
        ga = cfg.gradient_accumulation_steps or len(micro)
        groups = [micro[i : i + ga] for i in range(0, len(micro), ga)]
        counts: list[StepCounts | None] = [None] * len(groups)
        if self.dist.active:
            # Every rank holds every row, so each optimizer step's global counts need no
            # collective; then each rank keeps its share of the step's rows (padded).
            counts = [StepCounts(float(sum(sum(t.loss_mask) for m in g for t, _ in m)),
                                 sum(len(m) for m in g)) for g in groups]
            groups = self.dist.share(groups, mb)
            micro = [m for g in groups for m in g]
        # One optimizer step on the batch: pi_old is the policy being updated, so the ratio
        # is 1 by construction and its log-probabilities are the update's own, detached; a
        # separate no-grad pass is paid only when several steps share one batch or TIS
        # needs pi_old before the first step.
        need_old = len(groups) > 1 or cfg.tis_cap is not None
        passes = cfg.updates_per_batch
        old: list[Any] = []
        ref: list[Any] = []
        t_old = time.perf_counter()
        if need_old or cfg.beta > 0:
            self.model.eval()
            with torch.no_grad():
                for m in micro:
                    if need_old:
                        old.append(self._logps(m)[0])
                    if cfg.beta > 0:
                        ref.append(self._reference_logps(m))
        time_old = time.perf_counter() - t_old if need_old or cfg.beta > 0 else 0.0
        self.model.train()
        totals = dict.fromkeys(zero, 0.0)
        totals["time_old_logprobs"] = time_old
        # More passes over the batch (GRPO's mu, TRL's num_iterations) reuse the rollouts'
        # cost; from the second pass on the clipped ratio against the first pass's
        # log-probabilities (the sampling policy) bounds how far the policy moves.
        for step in range(passes):
            self._update_pass(groups, old, ref, need_old, step, totals, counts)
        self.optimizer.zero_grad(set_to_none=True)
        t_sync = time.perf_counter()
        self.engine.update_weights(self.model)
        totals["time_weight_sync"] = time.perf_counter() - t_sync
        if self.dist.active:
            self._sum_over_ranks(totals)
        else:
            for key in _STAT_KEYS:
                totals[key] /= passes
        totals["loss"] /= len(groups) * passes
        totals["trained_tokens"] /= passes
        return totals

    def _sum_over_ranks(self, totals: dict[str, float]) -> None:
        """Several processes: the update's metrics of the whole batch, on every rank.

        Losses and token counts are summed; each statistic was weighted by its micro-batch's
        tokens (see :meth:`_update_pass`) and becomes the mean over every trained token.
        """
        keys = ["loss", "trained_tokens", *_STAT_KEYS]
        summed = dict(zip(keys, self.dist.sum([totals[k] for k in keys]), strict=True))
        tokens = summed["trained_tokens"]
        totals["loss"], totals["trained_tokens"] = summed["loss"], tokens
        for key in _STAT_KEYS:
            totals[key] = summed[key] / tokens if tokens else (1.0 if key == "ratio_mean" else 0.0)

    def _update_pass(self, groups: list[list[list[tuple[Trajectory, float]]]], old: list[Any],
                     ref: list[Any], need_old: bool, pass_index: int,
                     totals: dict[str, float], counts: list[StepCounts | None]) -> None:
        """One pass over the batch: an optimizer step per group of micro-batches.

        ``counts`` (several processes) are each step's global counts; the statistics are
        then weighted by tokens, for :meth:`_sum_over_ranks`, and a :class:`Padding`
        micro-batch contributes a zero loss.
        """
        import torch

        cfg = self.cfg
        n_micro = sum(len(g) for g in groups)
        k = 0
        for group, count in zip(groups, counts, strict=True):
            n_tokens = float(sum(sum(t.loss_mask) for m in group for t, _ in m))
            self.optimizer.zero_grad(set_to_none=True)
            for m in group:
                logp, mask, eng, adv = self._logps(m)
                if need_old or pass_index > 0:
                    old_lp = old[k]
                else:  # one optimizer step on the batch: pi_old is the policy now, ratio 1
                    old_lp = logp.detach()
                    if cfg.updates_per_batch > 1:
                        old.append(old_lp)
                is_w = None
                if cfg.tis_cap is not None:
                    is_w = truncated_importance_weights(old_lp, eng, mask, cap=cfg.tis_cap)
                loss, stats = policy_loss(
                    logp,
                    old_lp,
                    adv,
                    mask,
                    loss_type=cfg.loss_type,
                    epsilon_low=cfg.epsilon_low,
                    epsilon_high=cfg.epsilon_high,
                    delta=cfg.delta,
                    level=cfg.importance_sampling_level,
                    ref_logp=ref[k] if ref else None,
                    beta=cfg.beta,
                    max_completion_length=cfg.max_tokens_per_episode,
                    is_weights=is_w,
                    num_items=n_tokens,
                    accumulation_steps=len(group),
                    counts=count,
                )
                k += 1
                if isinstance(m, Padding):  # its forward and backward only keep step
                    (loss * 0.0).backward()  # type: ignore[no-untyped-call]
                    continue
                loss.backward()  # type: ignore[no-untyped-call]
                totals["loss"] += float(loss.item())
                for key in _STAT_KEYS:
                    if count is None:
                        totals[key] += stats[key] / n_micro
                    else:
                        totals[key] += stats[key] * stats["tokens"]
                totals["trained_tokens"] += stats["tokens"]
            clip = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
            norm = torch.nn.utils.clip_grad_norm_(self.params, clip)
            totals["grad_norm"] = max(totals["grad_norm"], float(full_value(norm)))
            self.optimizer.step()
            self.scheduler.step()
            totals["updates"] += 1

    def _reference_logps(self, batch: list[tuple[Trajectory, float]]) -> Any:
        """Reference policy: the base model (adapters disabled) under LoRA."""
        if not hasattr(self.model, "disable_adapter"):
            raise NotImplementedError(
                "beta > 0 with full fine-tuning needs a reference copy; use LoRA"
            )
        with self.model.disable_adapter():
            return self._logps(batch)[0]



def _prompt_tokens(t: Trajectory) -> int:
    """Length of the first prompt: the ids before the first sampled token."""
    return next((i for i, m in enumerate(t.loss_mask) if m), len(t.ids))
