"""What a transformers model's forward accepts, across the releases gymhub supports.

Why a module: transformers renamed ``past_key_values`` to ``cache`` (5.2x) and not every
model takes ``logits_to_keep``; the engine and the update both ask, so they ask here.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["cache_keyword", "cache_of", "forward_params", "last_logits_keyword",
           "takes_logits_to_keep"]


def forward_params(model: Any) -> Any:
    """The parameters of the (PEFT-unwrapped) model's ``forward``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inspect.signature(base.forward).parameters


def cache_keyword(model: Any) -> str:
    """``cache`` (transformers >= 5.2x) or ``past_key_values`` (older releases)."""
    return "cache" if "cache" in forward_params(model) else "past_key_values"


def takes_logits_to_keep(model: Any) -> bool:
    """Whether the forward can skip the vocabulary projection of early positions."""
    return "logits_to_keep" in forward_params(model)


def last_logits_keyword(model: Any) -> dict[str, int]:
    """``logits_to_keep=1`` where the model takes it.

    A prefill needs only the last position's logits, and the vocabulary projection of
    every other position is most of a small model's prefill.
    """
    return {"logits_to_keep": 1} if takes_logits_to_keep(model) else {}


def cache_of(result: Any) -> Any:
    """The cache a forward returned, under either name."""
    cache = getattr(result, "cache", None)
    return cache if cache is not None else getattr(result, "past_key_values", None)
