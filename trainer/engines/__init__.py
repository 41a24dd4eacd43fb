"""Inference engines behind one protocol (see :mod:`.base`); heavy imports are lazy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import Completion, Engine, GenerationRequest, SamplingConfig, SessionEngine

if TYPE_CHECKING:
    from .hf import TransformersEngine
    from .vllm_local import VLLMEngine
    from .vllm_server import VLLMServerEngine

__all__ = [
    "Completion",
    "Engine",
    "GenerationRequest",
    "SamplingConfig",
    "SessionEngine",
    "TransformersEngine",
    "VLLMEngine",
    "VLLMServerEngine",
]

_LAZY = {
    "TransformersEngine": ".hf",
    "VLLMEngine": ".vllm_local",
    "VLLMServerEngine": ".vllm_server",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
