"""Grouped-query attention over a cache without copying the cache, for the engine's prefills.

transformers' SDPA path lets torch's kernel group the query heads itself
(``enable_gqa``) only where no mask is given; with a mask, which every prefill after a
cache or with padding has, it first repeats each key and value head for its group of
query heads (``repeat_kv``): a copy of the whole cache in every layer of every such
forward. A multi-turn rollout prefills each observation over its episode's cache, so
it pays that copy at every turn; for SmolLM2-135M (9 query heads on 3 key/value heads)
it triples the bytes a prefill's attention reads. On the models measured the copy is
small next to the attention itself (``benchmarks/bench_trainer.py``, its grouped-query
line and ``--compare-gqa``), but leaving it out is exact and free.

:func:`gqa_sdpa` is the same attention with torch grouping the heads: each query head
reads its key/value head in place, the arithmetic per head is unchanged, and the
outputs are bit-identical (``tests/trainer/test_engine_gqa.py``). It is registered with
transformers under :data:`NAME` and used only while the engine runs the model
(:func:`engine_attention`), so the trainer's forward and backward keep transformers' own
path. Everything it does not cover (a decode step, which transformers already packs
without a copy; no mask; a boolean mask; a bias) goes to transformers' function. The
engine uses it for models whose config has no sub-configs: switching a config's
attention switches its sub-configs' too, and switching back would not restore theirs.

Imported lazily: it needs torch and transformers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

__all__ = ["NAME", "engine_attention", "gqa_sdpa"]

#: The attention implementation's name in transformers' registries.
NAME = "gymhub_gqa_sdpa"


def gqa_sdpa(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The SDPA attention of transformers, with torch grouping the heads where it would copy."""
    groups = getattr(module, "num_key_value_groups", 1)
    if (
        groups > 1
        and query.shape[2] > 1
        and attention_mask is not None
        and attention_mask.dtype != torch.bool
        and kwargs.get("position_bias") is None
        and kwargs.get("softcap") is None
        and not kwargs.get("output_attentions", False)
    ):
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
            is_causal=False, enable_gqa=True,
        )
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
        is_causal=is_causal, **kwargs
    )


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(NAME, gqa_sdpa)
    # the same masks as SDPA's (without an entry, transformers would build none at all)
    AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


_register()


@contextlib.contextmanager
def engine_attention(model: Any) -> Iterator[None]:
    """Run ``model`` with :func:`gqa_sdpa` inside the block, its own attention after."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = NAME
    try:
        yield
    finally:
        config._attn_implementation = before
