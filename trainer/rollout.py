"""Token-exact multi-turn episodes, many at once.

One episode is one growing sequence of ids that the learner owns (see
:mod:`gymhub.trainer.chat` for why): the rendered first prompt (mask 0), then for each
turn the engine's ids and log-probabilities verbatim (mask 1), then the observation's
template delta (mask 0). A turn that did not end on the end-of-turn token (it hit its
token budget or a stop string) gets that token appended with mask 0, so the next
observation lands where the template expects it.

Budgets end an episode as truncated: ``max_turns`` assistant turns, ``max_tokens_per_
episode`` generated tokens, ``max_context_tokens`` in the whole sequence. An episode
the learner truncates before the environment scored it gets a return of 0 (it did not
answer) and ``truncated=True``; the loss may mask it (``mask_truncated``). An episode
whose backend failed, or whose score carries an ``error``, is *errored*: masked and
counted, never scored. An errored episode whose server lost it (it restarted, or stopped
answering: :data:`~.backends.LOST_ERRORS`) is also *lost*, counted apart, because a
fleet that loses episodes needs its operator, not a different learning rate.

Each episode is one engine *session*: an engine that keeps per-episode state (the
transformers engine's KV cache) continues turn ``k+1`` from what it kept of turn ``k``
and is told to release it when the episode ends, however it ends. The ids remain the
learner's: every request carries the whole context.

Episodes run as asyncio tasks. Generation is batched in lockstep: a batch is sent to
the engine when every live episode is waiting for a turn, in a fixed order, and each
request carries its own seed. Batches are therefore identical from run to run
whatever order environment steps finish in, which is what makes a resumed run
reproduce its metrics exactly.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gymhub.errors import GenerationAborted, TemplateError
from gymhub.types import Message, Score

from .backends import LOST_ERRORS, EpisodeBackend
from .chat import ChatRenderer, Drift, tools_key
from .engines.base import Completion, Engine, GenerationRequest, SamplingConfig, SessionEngine
from .parsers import ToolCallParser

__all__ = [
    "Budgets",
    "LockstepGenerator",
    "Trajectory",
    "run_episode",
    "run_group_batch",
    "with_instructions",
    "write_jsonl",
]

# Session names: unique in the process, without a system call per episode (uuid4 reads
# the OS's randomness, a quarter of a millisecond each on this VM's kernel).
_SESSION_PREFIX = uuid.uuid4().hex[:12]
_SESSION_NUMBERS = itertools.count()

StopReason = Literal[
    "terminated", "env_truncated", "max_turns", "episode_tokens", "context", "error"
]


@dataclass(frozen=True)
class Budgets:
    """Limits that end an episode as truncated."""

    max_turns: int = 4
    max_tokens_per_turn: int = 64
    max_tokens_per_episode: int = 256
    max_context_tokens: int = 2048


@dataclass
class Trajectory:
    """One episode as the learner trains on it.

    Attributes:
        env_id: environment id.
        task_id: task played.
        group: GRPO group key (episodes of one task in one step).
        index: position in the batch.
        ids: the whole sequence.
        loss_mask: 1 on sampled tokens, 0 on prompt, observations and template glue.
        logprobs: the engine's log-probability of each sampled token, 0.0 elsewhere.
        turn_rewards: per-turn shaping rewards (the final score excluded).
        score: the verifier's score, or ``None`` when there is none.
        stop_reason: why the episode ended.
        error: why it errored, or ``None``.
        lost: it errored because its server lost the episode (restarted or silent).
        policy_version: engine version of the first turn; ``turn_versions`` per turn.
        messages: the transcript (assistant turns as raw text, as rendered).
        parse_errors: turns whose tool calls did not parse.
        drift: the drift check, when it ran.
    """

    env_id: str
    task_id: str
    group: str
    index: int
    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    score: Score | None = None
    stop_reason: StopReason = "terminated"
    error: str | None = None
    lost: bool = False
    policy_version: int = 0
    turn_versions: list[int] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    parse_errors: int = 0
    drift: Drift | None = None

    @property
    def truncated(self) -> bool:
        """Ended by a budget rather than by the agent."""
        return self.stop_reason not in ("terminated", "error")

    @property
    def errored(self) -> bool:
        """No valid return: a failure, or a score the verifier could not judge."""
        return self.error is not None or (self.score is not None and not self.score.ok)

    @property
    def value(self) -> float | None:
        """The final score (0.0 when truncated unscored), ``None`` when errored."""
        if self.errored:
            return None
        return self.score.value if self.score is not None else 0.0

    @property
    def generated_tokens(self) -> int:
        """Tokens trained on."""
        return sum(self.loss_mask)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready record for trajectories.jsonl."""
        return {
            "env_id": self.env_id,
            "task_id": self.task_id,
            "group": self.group,
            "index": self.index,
            "ids": self.ids,
            "loss_mask": self.loss_mask,
            "logprobs": [round(x, 6) for x in self.logprobs],
            "turn_rewards": self.turn_rewards,
            "score": self.score.to_dict() if self.score is not None else None,
            "stop_reason": self.stop_reason,
            "error": self.error,
            "lost": self.lost,
            "policy_version": self.policy_version,
            "turn_versions": self.turn_versions,
            "messages": [m.to_dict() for m in self.messages],
            "parse_errors": self.parse_errors,
            "drift": self.drift.to_dict() if self.drift is not None else None,
        }


class LockstepGenerator:
    """Batches the turns of concurrent episodes into engine calls (see module docstring)."""

    def __init__(self, engine: Engine, sampling: SamplingConfig,
                 executor: Executor | None = None) -> None:
        self.engine = engine
        self.sampling = sampling
        self.executor = executor  # where engine calls run; None: the loop's thread pool
        self._active = 0
        self._pending: list[tuple[int, GenerationRequest, asyncio.Future[Completion]]] = []
        self._running = False
        self.calls = 0
        self.generated = 0
        self.seconds = 0.0  # wall time inside the engine

    def join(self) -> None:
        """An episode starts."""
        self._active += 1

    def leave(self, session: str | None = None) -> None:
        """An episode ends (it may have been the one the batch waited for).

        ``session`` is released on engines that keep state per session (their KV
        cache), before the next batch can start.
        """
        if session is not None and isinstance(self.engine, SessionEngine):
            self.engine.release(session)
        self._active -= 1
        self._maybe_flush()

    async def generate(self, order: int, request: GenerationRequest) -> Completion:
        """Queue a request; resolves when its batch has been generated."""
        fut: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self._pending.append((order, request, fut))
        self._maybe_flush()
        return await fut

    def _maybe_flush(self) -> None:
        if self._running or not self._pending or len(self._pending) < self._active:
            return
        batch = sorted(self._pending, key=lambda p: p[0])
        self._pending = []
        self._running = True
        asyncio.get_running_loop().create_task(self._flush(batch))

    async def _flush(
        self, batch: list[tuple[int, GenerationRequest, asyncio.Future[Completion]]]
    ) -> None:
        try:
            start = time.perf_counter()
            outs = await asyncio.get_running_loop().run_in_executor(
                self.executor, self.engine.generate, [b[1] for b in batch], self.sampling
            )
            self.seconds += time.perf_counter() - start
            self.calls += 1
            for (_, _, fut), out in zip(batch, outs, strict=True):
                self.generated += len(out.token_ids)
                fut.set_result(out)
        except BaseException as exc:  # every waiter must learn of the failure
            for _, _, fut in batch:
                if not fut.done():
                    fut.set_exception(exc)
        finally:
            self._running = False
            self._maybe_flush()


@dataclass
class _Ctx:
    backend: EpisodeBackend
    generator: LockstepGenerator
    renderer: ChatRenderer
    parser: ToolCallParser
    budgets: Budgets
    drift_check: str
    instructions: str = ""
    render_tools: bool = True
    # first prompts rendered in this batch, by their messages and tools: the G episodes of
    # a GRPO group open with the same prompt, which is then rendered once, not G times
    prompts: dict[tuple[tuple[str, ...], str], list[int]] = field(default_factory=dict)

    def prompt_ids(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> list[int]:
        key = (tuple(repr(m) for m in messages), tools_key(tools))
        ids = self.prompts.get(key)
        if ids is None:
            ids = self.prompts[key] = self.renderer.prompt_ids(messages, tools)
        return list(ids)


def _shaping(reward: float, score: Score | None, final: bool) -> float:
    """The step reward without the final score that ``TextEnv`` folds into it."""
    if final and score is not None and score.ok:
        return reward - score.value
    return reward


async def run_episode(ctx: _Ctx, traj: Trajectory, *, seed: int) -> Trajectory:
    """Play one episode into ``traj`` (see the module docstring)."""
    b = ctx.budgets
    eot = ctx.renderer.end_of_turn_id
    session = f"{_SESSION_PREFIX}-{next(_SESSION_NUMBERS)}"  # names its KV cache in the engine
    ctx.generator.join()
    episode_id: str | None = None
    tools: list[dict[str, Any]] | None = None
    try:
        start = await ctx.backend.create(traj.env_id, task_id=traj.task_id, seed=seed)
        episode_id = start.episode_id
        tools = (start.info.get("tools") or None) if ctx.render_tools else None
        traj.messages = with_instructions(start.observation, ctx.instructions)
        traj.ids = ctx.prompt_ids(traj.messages, tools)
        traj.loss_mask = [0] * len(traj.ids)
        traj.logprobs = [0.0] * len(traj.ids)
        traj.stop_reason = "max_turns"
        generated = 0
        for turn in range(b.max_turns):
            budget = min(
                b.max_tokens_per_turn,
                b.max_tokens_per_episode - generated,
                b.max_context_tokens - len(traj.ids) - 1,
            )
            if budget <= 0:
                traj.stop_reason = (
                    "episode_tokens" if generated >= b.max_tokens_per_episode else "context"
                )
                break
            req = GenerationRequest(
                traj.ids, budget, seed=(seed * 1_000_003 + turn) % (2**62), session=session
            )
            comp = await ctx.generator.generate(traj.index, req)
            if comp.finish_reason == "abort":  # partial tokens: mask, never read as a stop
                raise GenerationAborted(str(comp.extra.get("error") or "the engine aborted"))
            traj.turn_versions.append(ctx.generator.engine.policy_version)
            out_ids = list(comp.token_ids)
            generated += len(out_ids)
            traj.ids += out_ids
            traj.loss_mask += [1] * len(out_ids)
            traj.logprobs += [float(x) for x in comp.logprobs]
            body = out_ids[:-1] if out_ids and out_ids[-1] == eot else out_ids
            if not out_ids or out_ids[-1] != eot:
                traj.ids.append(eot)
                traj.loss_mask.append(0)
                traj.logprobs.append(0.0)
            text = ctx.renderer.decode(body)
            traj.messages.append(Message(role="assistant", content=text))
            parsed = ctx.parser.parse(text)
            traj.parse_errors += 0 if parsed.ok else 1
            result = await ctx.backend.step(episode_id, parsed.message)
            score = result.info.get("score")
            final = result.terminated or result.truncated
            traj.turn_rewards.append(
                _shaping(result.reward, score if isinstance(score, Score) else None, final)
            )
            if final:
                traj.score = score if isinstance(score, Score) else None
                if traj.score is None:
                    traj.error = "the environment ended the episode without a score"
                traj.stop_reason = "terminated" if result.terminated else "env_truncated"
                break
            if turn + 1 >= b.max_turns:
                break  # stop_reason stays "max_turns"; the last observation is not needed
            obs = ctx.renderer.observation_ids(result.observation, tools)
            if len(traj.ids) + len(obs) >= b.max_context_tokens:
                traj.stop_reason = "context"
                break
            traj.ids += obs
            traj.loss_mask += [0] * len(obs)
            traj.logprobs += [0.0] * len(obs)
            traj.messages.extend(result.observation)
    except Exception as exc:
        traj.error = f"{type(exc).__name__}: {exc}"
        traj.stop_reason = "error"
        traj.lost = isinstance(exc, LOST_ERRORS)
    finally:
        ctx.generator.leave(session)
        if episode_id is not None:
            try:
                await ctx.backend.close(episode_id)
            except Exception as exc:  # a failed close must not lose the trajectory
                if traj.error is None:
                    traj.error = f"close failed: {exc}"
                    traj.lost = isinstance(exc, LOST_ERRORS)
    traj.policy_version = (
        traj.turn_versions[0] if traj.turn_versions else ctx.generator.engine.policy_version
    )
    if ctx.drift_check != "off" and traj.error is None and traj.turn_versions:
        traj.drift = ctx.renderer.drift(traj.ids, _rendered(traj), tools)
        if not traj.drift.ok and ctx.drift_check == "strict":
            raise TemplateError(
                f"token drift in {traj.task_id} at position {traj.drift.position}: the "
                "engine's ids differ from a full render of the same episode"
            )
    return traj


def with_instructions(messages: Sequence[Message], instructions: str) -> list[Message]:
    """Append learner-side instructions (e.g. the answer format) to the system message.

    The environment does not know which text format the learner parses (DESIGN.md §3),
    so the learner says it. A conversation without a system message gets one.
    """
    out = list(messages)
    if not instructions:
        return out
    if out and out[0].role == "system":
        out[0] = Message(role="system", content=f"{out[0].content}\n\n{instructions}")
    else:
        out.insert(0, Message(role="system", content=instructions))
    return out


def _rendered(traj: Trajectory) -> list[Message]:
    """The messages whose render the ids must equal (everything up to the last turn)."""
    last = max((i for i, m in enumerate(traj.messages) if m.role == "assistant"), default=-1)
    return traj.messages[: last + 1]


async def run_group_batch(
    *,
    backend: EpisodeBackend,
    engine: Engine,
    renderer: ChatRenderer,
    parser: ToolCallParser,
    sampling: SamplingConfig,
    budgets: Budgets,
    tasks: Sequence[tuple[str, str]],
    group_size: int,
    seed: int,
    group_prefix: str = "",
    drift_check: str = "warn",
    max_concurrent: int = 64,
    instructions: str = "",
    render_tools: bool = True,
    stats: dict[str, float] | None = None,
    executor: Executor | None = None,
    task_indices: Sequence[int] | None = None,
) -> list[Trajectory]:
    """Play ``group_size`` episodes of each ``(env_id, task_id)``, concurrently.

    Episodes are numbered in order (task by task), which fixes batch order and seeds.
    ``task_indices`` gives each task's position in the whole step when this process
    plays only a share of it (see :mod:`.distributed`): an episode's index, group key and
    seeds come from that position and its sample number, never from which process
    played it, so 1 and N processes play the same episodes (default: 0, 1, 2, ...).
    ``instructions`` and ``render_tools`` shape the prompt (see :func:`with_instructions`).
    ``stats``, when given, receives ``time_generate`` (seconds inside the engine) and
    ``engine_calls``: what the rest of the rollout time is not (environments, rendering).
    ``executor`` runs the engine's calls (the trainer's thread, see
    :mod:`.compute_thread`); by default a thread of the loop's pool.
    """
    gen = LockstepGenerator(engine, sampling, executor)
    ctx = _Ctx(backend, gen, renderer, parser, budgets, drift_check, instructions, render_tools)
    positions = list(range(len(tasks))) if task_indices is None else list(task_indices)
    if len(positions) != len(tasks):
        raise ValueError(f"{len(tasks)} tasks but {len(positions)} task_indices")
    trajs = [
        Trajectory(
            env_id=env,
            task_id=task,
            group=f"{group_prefix}{env}/{task}#{t}",
            index=t * group_size + g,
        )
        for t, (env, task) in zip(positions, tasks, strict=True)
        for g in range(group_size)
    ]
    limit = asyncio.Semaphore(max_concurrent)

    async def one(traj: Trajectory) -> Trajectory:
        async with limit:
            return await run_episode(ctx, traj, seed=seed * 100_003 + traj.index)

    out = list(await asyncio.gather(*(one(t) for t in trajs)))
    if stats is not None:
        stats["time_generate"] = gen.seconds
        stats["engine_calls"] = float(gen.calls)
    return out


def write_jsonl(path: str | Path, trajectories: Sequence[Trajectory], **extra: Any) -> None:
    """Append trajectories (with ``extra`` fields such as the step) to a JSONL file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a", encoding="utf-8") as f:
        for t in trajectories:
            f.write(json.dumps({**extra, **t.to_json()}, ensure_ascii=False) + "\n")
