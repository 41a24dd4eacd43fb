"""The engine protocol: token ids in, token ids and log-probabilities out.

The learner owns the token ids of every episode (see :mod:`gymhub.trainer.rollout`),
so an engine never sees text or chat messages: it continues sequences of ids and
reports, for each sampled token, the log-probability the sampler drew it with. That is
all GRPO needs from inference, and it is what keeps multi-turn episodes token-exact.

Log-probabilities are those of ``log_softmax(logits / temperature)`` at the sampled
id, *before* top-p truncation (at temperature 0: ``log_softmax(logits)``), which is
also what the trainer computes, so that with identical weights the engine/trainer
ratio is 1 and the truncated importance-sampling correction only sees genuine
numerical mismatch. vLLM cannot report that quantity when ``top_p < 1``: its
``processed_logprobs`` are taken after temperature *and* top-k/top-p, renormalised
over the nucleus, and its ``raw_logprobs`` (the default) ignore the temperature
(``vllm/v1/sample/sampler.py``, ``vllm/v1/sample/ops/topk_topp_sampler.py``). The vLLM
engines therefore ask for ``processed_logprobs`` and refuse ``top_p < 1`` with a
:class:`~gymhub.errors.ConfigError` rather than report a different number.

Stopping: only ``stop`` strings and ``stop_token_ids`` end a turn. An engine must not
also stop on the model's end-of-sequence ids (vLLM does by default, including the
ids of ``generation_config.json``; its engines send ``ignore_eos``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "Completion",
    "Engine",
    "FinishReason",
    "GenerationRequest",
    "SamplingConfig",
    "SessionEngine",
]

#: ``abort``: the engine gave up on the request (e.g. a vLLM server paused for a weight
#: update); the tokens are partial and must not be read as a stop.
FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings shared by every request of a batch.

    Attributes:
        temperature: 0 means greedy.
        top_p: nucleus threshold.
        stop: strings that end a turn (the token completing one is kept).
        stop_token_ids: ids that end a turn (kept as the last id), e.g. end-of-turn.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class GenerationRequest:
    """One sequence to continue.

    Attributes:
        prompt_ids: the whole context so far.
        max_tokens: the most tokens to generate for it.
        seed: per-request seed, so a sample does not depend on its batch-mates.
        session: the episode this request continues, or ``None``. An engine that keeps
            per-episode state (the transformers engine's KV cache) may reuse what it
            kept from the session's earlier turns; ``prompt_ids`` is still the whole
            context and the only truth, so an engine that ignores ``session`` (vLLM,
            which caches prefixes by content) is correct too.
    """

    prompt_ids: Sequence[int]
    max_tokens: int
    seed: int | None = None
    session: str | None = None


@dataclass
class Completion:
    """What the engine generated for one request.

    Attributes:
        token_ids: generated ids, the stop token included.
        logprobs: one log-probability per generated id.
        finish_reason: ``stop`` (stop token or string), ``length`` (``max_tokens``) or
            ``abort`` (the engine dropped the request; see :data:`FinishReason`).
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    """What the rollout needs from an inference engine.

    ``policy_version`` counts weight updates; every turn is tagged with it so that
    stale samples can be recognised.
    """

    policy_version: int

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
    ) -> list[Completion]:
        """Continue every request (one completion each, in order)."""
        ...

    def update_weights(self, model: Any) -> None:
        """Bring the engine's weights up to date with the trainer's ``model``."""
        ...

    def sleep(self) -> None:
        """Release accelerator memory (KV cache, and weights when possible)."""
        ...

    def wake_up(self) -> None:
        """Undo :meth:`sleep` before the next generation."""
        ...


@runtime_checkable
class SessionEngine(Protocol):
    """An engine that keeps state per session (see ``GenerationRequest.session``).

    Optional: the rollout calls :meth:`release` when an episode ends, on engines that
    have it, so that nothing an episode cached outlives it.
    """

    def release(self, session: str) -> None:
        """Forget everything kept for ``session`` (unknown sessions are ignored)."""
        ...
