"""The engine's attention masks, built once per forward in the form the kernel uses.

At every forward, transformers turns the engine's 2-D padding mask into a 4-D boolean
one (``create_causal_mask``), and torch's SDPA then converts a boolean mask into an
additive float one in *every layer* (``where(mask, 0, -inf)``). For a turn's prefill of
~75 observation tokens over ~400 cached columns that conversion was a fifth of the
engine call on the tiny model (``torch.profiler``: two ``aten::where`` per layer), and
the mask construction ~7 % of a decode step. Given the additive mask itself,
transformers returns a 4-D mask as it is and SDPA uses a float mask as it is, so both
are skipped. Its values are exactly those SDPA would have computed (0 where attended,
``-inf`` elsewhere) from exactly the mask transformers would have built (a column is
attended when the row fed it and it is not after the query), so the outputs are
bit-identical (``tests/trainer/test_engine_masks.py``).

Only where that equivalence is known: SDPA attention, every layer full attention (a
sliding-window layer would need its own mask). Where nothing is padded and the queries
are one decode step or the whole sequence, transformers passes no mask at all (SDPA then
uses its causal flag); the 2-D mask goes through unchanged there, so that path stays
transformers' own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["additive_mask", "prebuilt_masks_apply"]


def prebuilt_masks_apply(model: Any) -> bool:
    """Whether ``model``'s forward would build the mask :func:`additive_mask` builds."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    if not getattr(config, "is_causal", True) or getattr(config, "sliding_window", None):
        return False
    layer_types = getattr(config, "layer_types", None)
    return not layer_types or all(t == "full_attention" for t in layer_types)


def additive_mask(attn: torch.Tensor, queries: int, dtype: torch.dtype) -> torch.Tensor:
    """The ``(batch, 1, queries, columns)`` additive mask for 2-D padding mask ``attn``.

    The queries are the last ``queries`` columns of ``attn`` (a prefill after a cache, or
    one decode step). Returns ``attn`` itself where transformers would pass no mask (see
    the module docstring).
    """
    import torch

    columns = attn.shape[1]
    if (queries == 1 or queries == columns) and bool(attn.all()):
        return attn
    allowed = attn.bool()[:, None, None, :]
    if queries > 1:
        at = torch.arange(columns - queries, columns, device=attn.device)[:, None]
        allowed = allowed & (torch.arange(columns, device=attn.device)[None, :] <= at)
    out = torch.zeros(allowed.shape, dtype=dtype, device=attn.device)
    return out.masked_fill_(~allowed, float("-inf"))
