"""A transformers engine: batched sampling with a KV cache, on the CPU or one GPU.

It runs the trainer's own model object (colocated, no copy), so a weight update is a
version bump. The decode loop is written out rather than delegated to
``model.generate`` because the learner needs exactly what it sampled with: the
log-probability of each sampled id under the tempered distribution, per-request seeds
(a sample must not depend on which other episodes share its batch, or a resumed run
would not reproduce), and per-request token limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .base import Completion, GenerationRequest, SamplingConfig

if TYPE_CHECKING:
    import torch

__all__ = ["TransformersEngine"]

_STOP_TAIL_TOKENS = 32


class TransformersEngine:
    """Generate with a ``transformers`` causal LM (or a peft wrapper of one).

    Args:
        model: the policy; the engine and the trainer share it.
        tokenizer: needed only for stop strings (to decode the tail of a sequence).
        pad_token_id: id used to left-pad prompts; its value never matters to outputs.
        seed: base seed for requests that carry none.
        max_batch_size: requests generated together at most.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        pad_token_id: int = 0,
        seed: int = 0,
        max_batch_size: int = 64,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.pad_token_id = pad_token_id
        self.seed = seed
        self.max_batch_size = max_batch_size
        self.policy_version = 0
        self._calls = 0
        self._cache_kw = _cache_keyword(model)

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
    ) -> list[Completion]:
        """Continue each request; see :class:`~gymhub.trainer.engines.base.Engine`."""
        import torch

        if sampling.stop and self.tokenizer is None:
            raise ValueError("stop strings need the engine to have a tokenizer")
        out: list[Completion] = []
        was_training = bool(getattr(self.model, "training", False))
        self.model.eval()
        try:
            with torch.no_grad():
                for i in range(0, len(requests), self.max_batch_size):
                    out.extend(self._batch(requests[i : i + self.max_batch_size], sampling))
        finally:
            if was_training:
                self.model.train()
        return out

    def _generators(self, requests: Sequence[GenerationRequest]) -> list[torch.Generator]:
        import torch

        gens = []
        for r in requests:
            self._calls += 1
            seed = r.seed if r.seed is not None else self.seed * 1_000_003 + self._calls
            gens.append(torch.Generator().manual_seed(int(seed) % (2**63)))
        return gens

    def _batch(
        self, requests: Sequence[GenerationRequest], sampling: SamplingConfig
    ) -> list[Completion]:
        import torch

        device = next(self.model.parameters()).device
        b = len(requests)
        lengths = [len(r.prompt_ids) for r in requests]
        if min(lengths, default=1) < 1:
            raise ValueError("every request needs at least one prompt token")
        width = max(lengths)
        ids = torch.full((b, width), self.pad_token_id, dtype=torch.long)
        attn = torch.zeros((b, width), dtype=torch.long)
        for row, r in enumerate(requests):
            ids[row, width - len(r.prompt_ids) :] = torch.tensor(
                list(r.prompt_ids), dtype=torch.long
            )
            attn[row, width - len(r.prompt_ids) :] = 1
        ids, attn = ids.to(device), attn.to(device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        gens = self._generators(requests)
        stop_ids = set(sampling.stop_token_ids)
        gen_ids: list[list[int]] = [[] for _ in range(b)]
        gen_lp: list[list[float]] = [[] for _ in range(b)]
        reasons: list[str | None] = [None if r.max_tokens > 0 else "length" for r in requests]
        steps = max((r.max_tokens for r in requests), default=0)

        result = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True)
        past = _cache_of(result)
        logits = result.logits[:, -1, :].float()
        last_pos = pos[:, -1:]
        for _ in range(steps):
            next_tokens = torch.full((b, 1), self.pad_token_id, dtype=torch.long)
            for row in range(b):
                if reasons[row] is not None:
                    continue
                tok, lp = _sample(logits[row], sampling.temperature, sampling.top_p, gens[row])
                next_tokens[row, 0] = tok
                gen_ids[row].append(tok)
                gen_lp[row].append(lp)
                if tok in stop_ids or self._hit_stop_string(gen_ids[row], sampling.stop):
                    reasons[row] = "stop"
                elif len(gen_ids[row]) >= requests[row].max_tokens:
                    reasons[row] = "length"
            if all(r is not None for r in reasons):
                break
            attn = torch.cat([attn, torch.ones((b, 1), dtype=attn.dtype, device=device)], dim=1)
            last_pos = last_pos + 1
            result = self.model(
                input_ids=next_tokens.to(device),
                attention_mask=attn,
                position_ids=last_pos,
                use_cache=True,
                **{self._cache_kw: past},
            )
            past = _cache_of(result)
            logits = result.logits[:, -1, :].float()
        return [
            Completion(
                token_ids=gen_ids[row],
                logprobs=gen_lp[row],
                finish_reason="stop" if reasons[row] == "stop" else "length",
            )
            for row in range(b)
        ]

    def _hit_stop_string(self, ids: list[int], stops: Sequence[str]) -> bool:
        if not stops:
            return False
        tail = self.tokenizer.decode(ids[-_STOP_TAIL_TOKENS:], skip_special_tokens=False)
        return any(s in tail for s in stops)

    def update_weights(self, model: Any) -> None:
        """Colocated: the engine runs the trainer's model, so only the version moves."""
        if model is not self.model:
            self.model.load_state_dict(model.state_dict())
        self.policy_version += 1

    def sleep(self) -> None:
        """Nothing to free: the model is shared with the trainer and there is no KV pool."""

    def wake_up(self) -> None:
        """See :meth:`sleep`."""


def _cache_keyword(model: Any) -> str:
    """``cache`` (transformers >= 5.2x) or ``past_key_values`` (older releases)."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(base.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _cache_of(result: Any) -> Any:
    cache = getattr(result, "cache", None)
    return cache if cache is not None else getattr(result, "past_key_values", None)


def _sample(
    logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator
) -> tuple[int, float]:
    """Draw one id; return it with its log-probability under ``softmax(logits / T)``."""
    import torch

    if temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        tok = int(torch.argmax(logits).item())
        return tok, float(logp[tok].item())
    logp = torch.log_softmax(logits / temperature, dim=-1)
    probs = logp.exp()
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, descending=True)
        cum = sorted_p.cumsum(-1)
        drop = cum - sorted_p > top_p  # keep the smallest prefix reaching top_p
        sorted_p = torch.where(drop, torch.zeros_like(sorted_p), sorted_p)
        probs = torch.zeros_like(probs).scatter(0, order, sorted_p)
    tok = int(torch.multinomial(probs.cpu(), 1, generator=gen).item())
    return tok, float(logp[tok].item())
