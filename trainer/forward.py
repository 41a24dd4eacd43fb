"""The update's forward pass: each sampled token's log-probability, common starts once.

Why share: a GRPO group is ``group_size`` samples of one prompt, and on the demo's
sql-v0 the prompt is ~375 tokens against ~40 generated, so a plain padded forward spends
most of the update re-reading the same prompt ``group_size`` times, in the backward pass
too; tasks of one database also share the ~320 tokens of system prompt and schema
before their questions. Here rows whose prompts share a long start (grouped as the
engine groups them, :mod:`.engines.prefix_share`) forward that start once; its keys and
values, with their graph, are repeated across the rows and each row's rest attends to
them. The gradient of every repeated copy flows back into the one shared pass, so the
values and gradients are those of the padded forward (tested to float tolerance) at
roughly ``(P + G·C) / (G·(P + C))`` of its token work for a group.

Rows that share no start with another take the plain padded forward. Models whose
forward keeps no cache under training (gradient checkpointing) take it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .engines.prefix_share import MIN_SHARED_TOKENS, prefix_groups
from .hf_compat import cache_keyword, cache_of

if TYPE_CHECKING:
    import torch

__all__ = ["token_logps"]


def _select(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    import torch

    logits = logits.float()
    if temperature > 0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None])[..., 0]


def _padded(rows: Sequence[Sequence[int]], width: int, pad: int) -> tuple[Any, Any]:
    import torch

    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(list(r))
        attn[i, : len(r)] = 1
    return ids, attn


def _plain(model: Any, rows: Sequence[Sequence[int]], start: int, *, pad: int,
           temperature: float, keeps_logits: bool, device: Any) -> torch.Tensor:
    """Columns ``start .. width-2`` (column j scores token j + 1) of a padded forward."""
    width = max(len(r) for r in rows)
    ids, attn = _padded(rows, width, pad)
    ids, attn = ids.to(device), attn.to(device)
    keep = {"logits_to_keep": width - start} if keeps_logits else {}
    out = model(input_ids=ids, attention_mask=attn, use_cache=False, **keep)
    logits = out.logits[:, -(width - start):][:, :-1]
    return _select(logits, ids[:, start + 1:], temperature)


def _shared(model: Any, rows: Sequence[Sequence[int]], prompt_len: int, *, pad: int,
            temperature: float, keeps_logits: bool, device: Any) -> torch.Tensor | None:
    """Columns ``prompt_len-1 .. width-2``, the prompt forwarded once.

    None when the model returned no cache to share.
    """
    import torch

    prompt = torch.tensor([list(rows[0][:prompt_len])], dtype=torch.long, device=device)
    keep = {"logits_to_keep": 1} if keeps_logits else {}
    head = model(input_ids=prompt, use_cache=True, **keep)
    cache = cache_of(head)
    if cache is None or not hasattr(cache, "batch_repeat_interleave"):
        return None
    cache.batch_repeat_interleave(len(rows))
    tails = [r[prompt_len:] for r in rows]
    width = max(len(t) for t in tails)
    ids, attn = _padded(tails, width, pad)
    ids, attn = ids.to(device), attn.to(device)
    full_attn = torch.cat([torch.ones((len(rows), prompt_len), dtype=attn.dtype,
                                      device=device), attn], dim=1)
    positions = torch.arange(prompt_len, prompt_len + width, device=device).expand(len(rows), -1)
    out = model(input_ids=ids, attention_mask=full_attn, position_ids=positions,
                use_cache=True, **{cache_keyword(model): cache})
    first = head.logits[:, -1:].expand(len(rows), -1, -1)
    logits = torch.cat([first, out.logits[:, :-1]], dim=1)
    return _select(logits, ids, temperature)


def token_logps(model: Any, rows: Sequence[Sequence[int]], prompt_lens: Sequence[int], *,
                start: int, pad: int, temperature: float, keeps_logits: bool, device: Any,
                share: bool = True) -> torch.Tensor:
    """``[B, width-1-start]`` log-probabilities; column ``c`` scores token ``start+c+1``.

    Args:
        model: the policy (plain or PEFT-wrapped causal LM).
        rows: each row's token ids.
        prompt_lens: tokens before each row's first sampled token (its prompt).
        start: first column wanted; at most ``min(prompt_lens) - 1``. Columns that
            score a row's prompt or its padding hold arbitrary values (0 or a padding
            token's score): the loss mask is 0 there and every loss ignores them.
        pad: the id right-padding fills with (masked out of attention).
        temperature: the sampling temperature the logits are divided by (0: none).
        keeps_logits: the forward takes ``logits_to_keep``.
        device: where the model's parameters are.
        share: forward each run of identical prompts once (see the module docstring).
    """
    import torch
    import torch.nn.functional as F

    width = max(len(r) for r in rows)
    cols = width - 1 - start
    kw = {"pad": pad, "temperature": temperature, "keeps_logits": keeps_logits,
          "device": device}
    parts: list[tuple[list[int], torch.Tensor]] = []
    groups = prefix_groups([r[:n] for r, n in zip(rows, prompt_lens, strict=True)],
                           MIN_SHARED_TOKENS, identical=True) if share else []
    alone = set(range(len(rows))) - {i for members, _ in groups for i in members}
    for members, n in groups:
        got = _shared(model, [rows[i] for i in members], n, **kw)
        if got is None:
            alone.update(members)
            continue
        # got's column 0 is column n - 1; the output starts at column ``start``
        left = n - 1 - start
        got = got[:, max(-left, 0):]
        left = max(left, 0)
        parts.append((members, F.pad(got, (left, cols - left - got.shape[1]))))
    if alone:
        lone = sorted(alone)
        got = _plain(model, [rows[i] for i in lone], start, **kw)
        parts.append((lone, F.pad(got, (0, cols - got.shape[1]))))
    order = [i for idx, _ in parts for i in idx]
    stacked = torch.cat([t for _, t in parts], dim=0)
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    return stacked[inverse.to(stacked.device)]
