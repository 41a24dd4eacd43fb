"""Drawing the next token of many rows at once, each from its own seeded generator.

Kept apart from the engine's decode loop (:mod:`.hf`) because it is the one place where
what a row samples is decided: it must not depend on which other rows share its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["sample_rows"]


def sample_rows(
    logits: torch.Tensor, temperature: float, top_p: float, gens: Sequence[torch.Generator]
) -> list[tuple[int, float]]:
    """Draw one id per row; each with its log-probability under ``softmax(logits / T)``.

    Batched (one softmax, one sort and one cumulative sum for all rows: drawing row by row
    was a fifth of a CPU decode step), yet each row's draw depends only on its own
    logits and its own generator, which gives it one uniform number: the id is where that
    number falls in the row's cumulative distribution (inverse transform sampling), so a
    request's sample does not depend on which others share its batch.
    """
    import torch

    if temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        toks = torch.argmax(logits, dim=-1, keepdim=True)
    else:
        logp = torch.log_softmax(logits / temperature, dim=-1)
        probs = logp.exp()
        order = None
        if top_p < 1.0:
            probs, order = torch.sort(probs, dim=-1, descending=True)
            cum = probs.cumsum(-1)
            # keep the smallest prefix reaching top_p
            probs = torch.where(cum - probs > top_p, torch.zeros_like(probs), probs)
        cdf = probs.cumsum(-1)
        u = torch.cat([torch.rand(1, generator=g) for g in gens]).to(cdf)
        toks = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)
        toks = toks.clamp(max=logits.shape[-1] - 1)
        if order is not None:
            toks = order.gather(-1, toks)
    lps = logp.gather(-1, toks)[:, 0]
    if not bool(torch.isfinite(lps).all()):
        raise ValueError("the model produced non-finite logits; nothing can be sampled")
    return list(zip(toks[:, 0].tolist(), lps.tolist(), strict=True))
