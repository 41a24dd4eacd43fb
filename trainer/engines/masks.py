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

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["StepMasks", "additive_mask", "prebuilt_masks_apply"]


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


class StepMasks:
    """A batch's attention masks for its decode steps, written one column at a time.

    Built with a column per decode step reserved, so that a step writes its column in
    place (two small slice assignments) where the loop used to concatenate a column to
    the 2-D mask and rebuild the additive one from it, a few percent of a tiny model's
    decode step (``benchmarks/bench_trainer.py``, the masks' line). The masks a step hands
    the model are views of the same values the rebuilt ones held, so the outputs are
    unchanged (``tests/trainer/test_engine_masks.py``).

    Args:
        attn: the ``(batch, columns)`` 0/1 mask after the prefill.
        steps: decode steps reserved.
        dtype: the attention's dtype for prebuilt additive masks (see
            :func:`additive_mask`), or ``None`` to hand the model the 2-D mask.
    """

    def __init__(self, attn: torch.Tensor, steps: int, dtype: torch.dtype | None) -> None:
        import torch

        b, self.cols = attn.shape
        self._plain = attn.new_zeros((b, self.cols + steps))
        self._plain[:, : self.cols] = attn
        self._full = bool(attn.all())  # nothing padded so far: the model's own no-mask path
        self._additive: torch.Tensor | None = None
        if dtype is not None:
            self._additive = torch.full((b, 1, 1, self.cols + steps), float("-inf"),
                                        dtype=dtype, device=attn.device)
            self._additive[:, 0, 0, : self.cols].masked_fill_(attn.bool(), 0.0)

    @property
    def attn(self) -> torch.Tensor:
        """The 0/1 mask of the columns so far."""
        return self._plain[:, : self.cols]

    def feed(self, rows: Sequence[int] | None) -> torch.Tensor:
        """Add the next column, fed by ``rows`` (``None``: every row); its step's mask."""
        c = self.cols
        if rows is None:
            self._plain[:, c] = 1
            if self._additive is not None:
                self._additive[:, 0, 0, c] = 0.0
        else:
            import torch

            self._full = False
            index = torch.tensor(list(rows), dtype=torch.long, device=self._plain.device)
            self._plain[index, c] = 1
            if self._additive is not None:
                self._additive[index, 0, 0, c] = 0.0
        self.cols += 1
        if self._additive is None or self._full:
            return self.attn
        return self._additive[..., : self.cols]
