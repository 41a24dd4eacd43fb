"""Drawing the next token of many rows at once, each from its own seeded generator.

Kept apart from the engine's decode loop (:mod:`.hf`) because it is the one place where
what a row samples is decided: it must not depend on which other rows share its batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["draw_uniforms", "sample_rows"]


def draw_uniforms(gens: Sequence[torch.Generator], steps: int) -> torch.Tensor:
    """``(len(gens), steps)`` uniform numbers: row ``i`` holds the next ``steps`` of ``gens[i]``.

    A call's draws are made up front, one ``torch.rand`` per row, instead of one per row
    and decode step: the same numbers in the same order (a generator's ``rand(n)`` is
    ``n`` successive ``rand(1)``, checked by a test), for a fixed cost per call instead of
    one that grows with the steps. A row that stops early leaves its tail unread; the
    generators are the call's own.
    """
    import torch

    if not gens:
        return torch.empty((0, steps))
    return torch.stack([torch.rand(steps, generator=g) for g in gens])


def sample_rows(
    logits: torch.Tensor, temperature: float, top_p: float, uniforms: torch.Tensor | None
) -> list[tuple[int, float]]:
    """Draw one id per row; each with its log-probability under ``softmax(logits / T)``.

    Batched (one softmax, one sort and one cumulative sum for all rows: drawing row by row
    was a fifth of a CPU decode step), yet each row's draw depends only on its own
    logits and its own uniform number (``uniforms[i]``, from the row's own generator, see
    :func:`draw_uniforms`): the id is where that number falls in the row's cumulative
    distribution (inverse transform sampling), so a request's sample does not depend on
    which others share its batch. Greedy decoding (``temperature <= 0``) reads none.
    """
    import torch

    if temperature <= 0:
        logp = torch.log_softmax(logits, dim=-1)
        toks = torch.argmax(logits, dim=-1, keepdim=True)
    else:
        # dividing by 1.0 changes no bit: skipped, one operator fewer a decode step
        logp = torch.log_softmax(logits if temperature == 1.0 else logits / temperature, dim=-1)
        probs = logp.exp()
        order = None
        if top_p < 1.0:
            probs, order = torch.sort(probs, dim=-1, descending=True)
            cum = probs.cumsum(-1)
            # keep the smallest prefix reaching top_p
            probs = torch.where(cum - probs > top_p, torch.zeros_like(probs), probs)
        if uniforms is None:
            raise ValueError("sampling at a temperature needs one uniform number per row")
        cdf = probs.cumsum(-1)
        u = uniforms.to(cdf)
        toks = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)
        toks = toks.clamp(max=logits.shape[-1] - 1)
        if order is not None:
            toks = order.gather(-1, toks)
    lps = logp.gather(-1, toks)[:, 0].tolist()
    if not all(math.isfinite(lp) for lp in lps):  # on the list: no operator a step
        raise ValueError("the model produced non-finite logits; nothing can be sampled")
    return list(zip(toks[:, 0].tolist(), lps, strict=True))
