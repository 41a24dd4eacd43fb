"""Shared pieces of the ``gpu`` tests of the vLLM engines (imported only by them)."""

from __future__ import annotations

from typing import Any

import torch


def vllm_ready_model(vocab_size: int, seed: int = 0) -> Any:
    """A 2-layer Llama whose head size (64) every vLLM attention backend supports.

    The CPU tests' tiny model has head size 16, which vLLM's GPU kernels refuse.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=256, intermediate_size=512,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=1024, tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).to(torch.bfloat16).eval()  # type: ignore[no-untyped-call]


def perturbed(model: Any, seed: int) -> Any:
    """``model`` with every weight moved by noise, so a missed update is visible."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen).to(p.dtype).to(p.device))
    return model


def forward_logprobs(model: Any, prompt: list[int], out: list[int], temperature: float) -> list[float]:
    """The trainer's log-probability of each generated id (what the engines must report)."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + out], device=device)
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    t = temperature if temperature > 0 else 1.0
    lp = torch.log_softmax(logits[len(prompt) - 1 : -1] / t, dim=-1)
    return [float(x) for x in lp.gather(-1, torch.tensor(out, device=device)[:, None])[:, 0]]


def close_enough(got: list[float], want: list[float]) -> bool:
    """bf16 kernels differ from transformers' by a few hundredths per token."""
    diffs = [abs(a - b) for a, b in zip(got, want, strict=True)]
    return bool(diffs) and sum(diffs) / len(diffs) < 0.05 and max(diffs) < 0.3
