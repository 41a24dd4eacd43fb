"""Scoring a model (not only the gold policy) on an environment's tasks.

``gymhub eval ENV --model PATH`` lands in :func:`evaluate_model`. By default evaluation
plays one episode per task with greedy decoding, so a score is a property of the weights
and the prompt, not of a sampling seed. The mean leaves errored episodes out (an error is
the environment's or the verifier's failure, not the model's; they are counted apart), and
the standard error of the mean is reported with it because a held-out score on a few
dozen tasks moves by several points from noise alone.

``samples=k`` with a temperature scores each task by the mean of ``k`` sampled episodes
(avg@k, the expected reward of the sampling policy: what GRPO maximises). A task's
greedy answer flips on a small change of the weights, and each flip moves a binary
per-task score by a whole point; the avg@k of a task moves smoothly with the probability
of its right answer, so the paired change between two checkpoints has a smaller standard
error. The samples' seeds are fixed by the task's position and the sample's index, so
two checkpoints scored on the same tasks draw the same uniform numbers (common random
numbers: the part of a paired difference that is sampling luck cancels). The mean and
its standard error are over *tasks*, the independent unit, never over episodes.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from gymhub.errors import ConfigError

from .config import GRPOConfig
from .engines.base import SamplingConfig

__all__ = ["EvalResult", "evaluate_model", "run_eval"]


@dataclass
class EvalResult:
    """The outcome of an evaluation.

    Attributes:
        episodes: episodes played (``samples`` per task).
        scored: tasks with a valid score (the mean's denominator).
        mean: mean score of the scored tasks (0.0 when none).
        stderr: standard error of that mean (sample deviation / sqrt(n)).
        errors: episodes that errored (backend failure or unjudgeable score).
        lost: of those, episodes a server lost (it restarted or stopped answering):
            the fleet's failure, left out of the mean like every error.
        truncated: episodes ended by a budget before the environment scored them.
        parse_errors: assistant turns whose tool calls did not parse.
        seconds: wall time of the rollouts.
        scores: per task, ``"env/task_id" -> score`` (``None`` when errored): the
            episode's score, or with several samples the mean of the task's unerrored ones.
        samples: episodes per task.
        temperature: the sampling temperature (0.0: greedy).
    """

    episodes: int
    scored: int
    mean: float
    stderr: float
    errors: int
    truncated: int
    parse_errors: int
    seconds: float
    scores: dict[str, float | None] = field(default_factory=dict)
    samples: int = 1
    temperature: float = 0.0
    lost: int = 0

    @property
    def episodes_per_s(self) -> float:
        """Throughput of the evaluation."""
        return self.episodes / self.seconds if self.seconds > 0 else 0.0

    @classmethod
    def from_trajectories(
        cls, trajs: Sequence[Any], seconds: float, *, temperature: float = 0.0
    ) -> EvalResult:
        """Summarise played :class:`~gymhub.trainer.rollout.Trajectory` objects.

        Episodes of one task (several samples) are averaged into the task's score
        first; a task whose every episode errored has no score.
        """
        per_task: dict[str, list[float | None]] = {}
        for t in trajs:
            per_task.setdefault(f"{t.env_id}/{t.task_id}", []).append(t.value)
        scores: dict[str, float | None] = {}
        for key, vals in per_task.items():
            valid = [float(v) for v in vals if v is not None]
            scores[key] = sum(valid) / len(valid) if valid else None
        values = [v for v in scores.values() if v is not None]
        n = len(values)
        mean = sum(values) / n if n else 0.0
        var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
        return cls(
            episodes=len(trajs),
            scored=n,
            mean=mean,
            stderr=math.sqrt(var / n) if n > 1 else 0.0,
            errors=sum(1 for t in trajs if t.errored),
            truncated=sum(1 for t in trajs if t.truncated and not t.errored),
            parse_errors=sum(int(t.parse_errors) for t in trajs),
            seconds=seconds,
            scores=scores,
            samples=max((len(v) for v in per_task.values()), default=1),
            temperature=temperature,
            lost=sum(1 for t in trajs if getattr(t, "lost", False)),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (per-task scores included)."""
        return {
            "episodes": self.episodes,
            "scored": self.scored,
            "mean_score": self.mean,
            "stderr": self.stderr,
            "errors": self.errors,
            "lost": self.lost,
            "truncated": self.truncated,
            "parse_errors": self.parse_errors,
            "seconds": self.seconds,
            "episodes_per_s": self.episodes_per_s,
            "samples": self.samples,
            "temperature": self.temperature,
            "scores": self.scores,
        }


def _check_samples(samples: int, temperature: float) -> None:
    if samples < 1:
        raise ConfigError(f"samples must be at least 1, got {samples}")
    if samples > 1 and temperature <= 0:
        raise ConfigError("several samples per task need a temperature > 0 "
                         "(greedy decoding would repeat one episode)")


async def run_eval(
    *,
    backend: Any,
    engine: Any,
    renderer: Any,
    parser: Any,
    cfg: GRPOConfig,
    tasks: Sequence[tuple[str, str]],
    samples: int = 1,
    temperature: float = 0.0,
    executor: Executor | None = None,
) -> EvalResult:
    """Episodes of ``tasks`` with ``cfg``'s budgets and prompt settings.

    ``executor`` runs the engine's calls (see :func:`~.rollout.run_group_batch`).

    Greedy and one episode per task by default; ``samples`` episodes per task at
    ``temperature`` (with ``cfg.top_p``) score each task by their mean.

    Raises:
        ConfigError: ``samples < 1``, or several samples of a greedy decoder (they would
            be one episode played ``samples`` times).
    """
    from .rollout import Budgets, run_group_batch

    _check_samples(samples, temperature)
    sampling = SamplingConfig(
        temperature=temperature,
        top_p=cfg.top_p if temperature > 0 else 1.0,
        stop=tuple(cfg.stop),
        stop_token_ids=(renderer.end_of_turn_id,),
    )
    budgets = Budgets(
        cfg.max_turns, cfg.max_tokens_per_turn, cfg.max_tokens_per_episode, cfg.max_context_tokens
    )
    t0 = time.perf_counter()
    trajs = await run_group_batch(
        backend=backend,
        engine=engine,
        renderer=renderer,
        parser=parser,
        sampling=sampling,
        budgets=budgets,
        tasks=list(tasks),
        group_size=samples,
        seed=10_000_019,
        drift_check=cfg.drift_check,
        max_concurrent=cfg.max_concurrent_episodes,
        instructions=cfg.instructions,
        render_tools=cfg.render_tools,
        executor=executor,
    )
    return EvalResult.from_trajectories(trajs, time.perf_counter() - t0,
                                        temperature=temperature)


def evaluate_model(
    env_id: str,
    model: str,
    *,
    tasks: int | None = None,
    parser: str | None = None,
    env_url: str | None = None,
    env_kwargs: Mapping[str, Any] | None = None,
    config: str | None = None,
    overrides: Sequence[str] = (),
    samples: int = 1,
    temperature: float = 0.0,
) -> EvalResult:
    """Score the model in directory ``model`` on ``env_id`` (what ``gymhub eval`` runs).

    Args:
        env_id: the environment.
        model: a local transformers model directory (config, weights, tokenizer).
        tasks: the first N tasks (after ``task_filter``); all when ``None``.
        parser: tool-call parser (``hermes``, ``json``, ``tags``); the config's otherwise.
        env_url: an environment server to play on; in-process when ``None``.
        env_kwargs: constructor arguments of the in-process environment.
        config: a training TOML whose prompt, parser and budget settings to use, so a
            model is scored the way it was trained.
        overrides: ``--key value`` overrides of that config.
        samples: episodes per task, scored by their mean (see :func:`run_eval`).
        temperature: their sampling temperature (0: greedy).

    Raises:
        ConfigError: several samples at temperature 0, or ``samples < 1`` (before the
            model loads).
    """
    _check_samples(samples, temperature)
    from .backends import InProcessBackend, RemoteBackend
    from .chat import ChatRenderer
    from .config import load_config
    from .parsers import make_parser
    from .policy import load_policy, make_engine
    from .tasks import select_tasks

    extra = ["--model", model, "--env-ids", env_id, "--finetune", "full"]
    if parser:
        extra += ["--tool-parser", parser]
    cfg = load_config(config, [*overrides, *extra])
    policy, tokenizer = load_policy(cfg)
    policy.requires_grad_(False)
    backend: Any = (
        RemoteBackend([env_url])
        if env_url
        else InProcessBackend({env_id: dict(env_kwargs or {})})
    )

    async def main() -> EvalResult:
        try:
            if isinstance(backend, RemoteBackend):  # a server still starting is waited for
                await backend.wait_ready(cfg.env_wait_s, lambda line: print(
                    f"gymhub: {line}", file=sys.stderr, flush=True))
            chosen, _ = await select_tasks(backend, [env_id], cfg.task_filter, 0)
            return await run_eval(
                backend=backend,
                engine=make_engine(cfg, policy, tokenizer, train=False),
                renderer=ChatRenderer(tokenizer),
                parser=make_parser(cfg.tool_parser, cfg.tag_tools),
                cfg=cfg,
                tasks=chosen if tasks is None else chosen[:tasks],
                samples=samples,
                temperature=temperature,
                executor=compute,
            )
        finally:
            closer = getattr(backend, "aclose", None)
            if closer is not None:
                await closer()

    from gymhub.client import LoopThread

    from .compute_thread import CallerExecutor

    # the engine on this thread, which loaded the model (see .compute_thread)
    compute = CallerExecutor()
    with LoopThread("gymhub-eval") as loop:
        return loop.run(main(), wait=compute.run_until)
