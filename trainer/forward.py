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

The equality holds with ``lora_dropout = 0`` (the default): with dropout on, the rows
of a shared segment share one dropout mask. The shared starts form a prefix tree (:class:`_Tree`);
a micro-batch falls back to the plain padded forward when its model keeps no reusable
cache under training (gradient checkpointing), and ``shared_prompt_update = false`` asks
for it.
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


class _Tree:
    """One micro-batch's prefix tree: each shared segment forwarded once, with its graph.

    A node holds the rows that share ``ids[:depth]``, whose keys and values are in its
    batch-1 cache. Rows that share ``MIN_SHARED_TOKENS`` or more further prompt tokens
    form a child node (that segment forwarded once on top of the parent's cache); the
    rest are the node's leaves, forwarded together from ``depth`` on, each attending to
    the cache repeated to their number. So the demo's batch reads the common system
    prompt once, each database's schema once, and each task's question once.
    """

    def __init__(self, model: Any, rows: Sequence[Sequence[int]], prompt_lens: Sequence[int],
                 *, start: int, pad: int, temperature: float, keeps_logits: bool,
                 device: Any) -> None:
        self.model, self.rows, self.prompt_lens, self.start = model, rows, prompt_lens, start
        self.pad, self.temperature, self.device = pad, temperature, device
        self.last = {"logits_to_keep": 1} if keeps_logits else {}
        self.cache_kw = cache_keyword(model)
        #: per row: (first column, log-probabilities from that column on)
        self.out: dict[int, tuple[int, torch.Tensor]] = {}

    def _cache(self, layers: list[tuple[Any, Any]] | None, n: int) -> dict[str, Any]:
        """A fresh cache over ``layers`` for ``n`` rows (the tensors shared, not copied)."""
        if layers is None:
            return {}
        from transformers import DynamicCache

        data = [(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in layers]
        return {self.cache_kw: DynamicCache(ddp_cache_data=data)}

    def node(self, idx: list[int], depth: int, layers: list[tuple[Any, Any]] | None,
             head: torch.Tensor | None) -> bool:
        """Forward the rows ``idx`` below a node; False if the model keeps no usable cache."""
        import torch

        from .engines.session_cache import plain_layers

        rest = [self.rows[i][depth : self.prompt_lens[i]] for i in idx]
        grouped: set[int] = set()
        for members, n in prefix_groups(rest, MIN_SHARED_TOKENS, identical=True):
            sub = [idx[m] for m in members]
            seg = torch.tensor([list(self.rows[sub[0]][depth : depth + n])], device=self.device)
            pos = torch.arange(depth, depth + n, device=self.device)[None]
            out = self.model(input_ids=seg, position_ids=pos, use_cache=True,
                             **self._cache(layers, 1), **self.last)
            kept = plain_layers(cache_of(out))
            if kept is None:
                return False
            if not self.node(sub, depth + n, [(x.keys, x.values) for x in kept],
                             out.logits[:, -1:]):
                return False
            grouped.update(sub)
        leaves = [i for i in idx if i not in grouped]
        if leaves:
            self._leaves(leaves, depth, layers, head)
        return True

    def _leaves(self, leaves: list[int], depth: int, layers: list[tuple[Any, Any]] | None,
                head: torch.Tensor | None) -> None:
        import torch

        tails = [self.rows[i][depth:] for i in leaves]
        width = max(len(t) for t in tails)
        ids, attn = _padded(tails, width, self.pad)
        ids, attn = ids.to(self.device), attn.to(self.device)
        n = len(leaves)
        attn = torch.cat([torch.ones((n, depth), dtype=attn.dtype, device=self.device), attn], 1)
        pos = torch.arange(depth, depth + width, device=self.device).expand(n, -1)
        skip = max(self.start - depth, 0)  # own positions before the first wanted column
        keep = {"logits_to_keep": width - skip} if self.last else {}
        out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos,
                         use_cache=layers is not None, **self._cache(layers, n), **keep)
        logits = out.logits[:, -(width - skip):][:, :-1]
        targets = ids[:, skip + 1:]
        first = depth + skip
        if head is not None and self.start < depth:
            # the parent's last position scores this segment's first token
            logits = torch.cat([head.expand(n, -1, -1), logits], dim=1)
            targets = ids
            first = depth - 1
        logp = _select(logits, targets, self.temperature)
        for r, i in enumerate(leaves):
            self.out[i] = (first, logp[r, : max(len(self.rows[i]) - 1 - first, 0)])


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
        share: forward each shared start once (see :class:`_Tree`).
    """
    import torch
    import torch.nn.functional as F

    width = max(len(r) for r in rows)
    cols = width - 1 - start
    kw = {"pad": pad, "temperature": temperature, "keeps_logits": keeps_logits,
          "device": device}
    tree = _Tree(model, rows, prompt_lens, start=start, **kw) if share else None
    if tree is not None and tree.node(list(range(len(rows))), 0, None, None):
        out = []
        for i in range(len(rows)):
            first, got = tree.out[i]  # first >= start: no leaf returns earlier columns
            out.append(F.pad(got[None], (first - start, cols - (first - start) - len(got))))
        return torch.cat(out, dim=0)
    got = _plain(model, rows, start, **kw)
    return F.pad(got, (0, cols - got.shape[1]))
