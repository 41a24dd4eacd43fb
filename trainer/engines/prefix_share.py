"""Prompts of one batch that start alike share one prefill of their common start.

Why: an evaluation batch of sql-v0 tasks is dozens of prompts that differ only in the
last ~50 of their ~375 tokens (the system prompt and the schema are the same for every
task of a database), and a GRPO step's tasks are alike in the same way. Prefilling each
prompt whole spends most of a CPU evaluation re-reading that start. Here the batch's
distinct prompts are grouped by their longest common prefix; each group's prefix is
prefilled once, and its keys and values serve every prompt of the group as if they had
been cached from an earlier turn (:mod:`.session_cache`), so each prompt prefills only
its own tail. Outputs are the engine's own as ever: the ids and log-probabilities it
reports are from the forward that sampled them.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from .session_cache import common_prefix

__all__ = ["MIN_SHARED_TOKENS", "prefix_groups"]

#: A common start shorter than this is not worth a forward pass of its own.
MIN_SHARED_TOKENS = 32


def prefix_groups(
    prompts: Sequence[Sequence[int]],
    min_len: int = MIN_SHARED_TOKENS,
    *,
    identical: bool = False,
) -> list[tuple[list[int], int]]:
    """Groups of indices whose prompts share a common prefix of at least ``min_len``.

    Returns ``(indices, length)`` pairs for groups with at least two *distinct* prompts
    (the engine prefills identical prompts once by itself); with ``identical``, a
    prompt of ``min_len`` or more tokens repeated with no alike neighbour is a group
    too, its length the whole prompt. Prompts are sorted, so prompts with a long common
    start are neighbours; a group is a run of neighbours whose every adjacent pair
    shares ``min_len`` tokens, and its length is the smallest such overlap (the common
    prefix of the whole run).
    """
    distinct = sorted({tuple(p) for p in prompts})
    runs: list[tuple[list[tuple[int, ...]], int]] = []
    for prev, cur in pairwise(distinct):
        n = common_prefix(prev, cur)
        if n < min_len:
            continue
        if runs and runs[-1][0][-1] == prev:
            members, length = runs[-1]
            runs[-1] = ([*members, cur], min(length, n))
        else:
            runs.append(([prev, cur], n))
    if identical:
        grouped = {m for members, _ in runs for m in members}
        counts: dict[tuple[int, ...], int] = {}
        for p in prompts:
            counts[tuple(p)] = counts.get(tuple(p), 0) + 1
        runs += [([p], len(p)) for p, c in counts.items()
                 if c > 1 and p not in grouped and len(p) >= min_len]
    index: dict[tuple[int, ...], int] = {}
    for g, (members, _) in enumerate(runs):
        for m in members:
            index[m] = g
    out: list[tuple[list[int], int]] = [([], length) for _, length in runs]
    for i, p in enumerate(prompts):
        at = index.get(tuple(p))
        if at is not None:
            out[at][0].append(i)
    return out
