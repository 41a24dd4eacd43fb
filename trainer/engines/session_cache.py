"""Per-episode KV caches that survive between the turns of an episode.

Without them every turn re-reads the whole, growing context (prompt, earlier turns,
observations): turn ``k`` costs a prefill of everything before it. With them, turn
``k`` prefills only what was appended since the engine last ran the episode (the
closing end-of-turn token when the turn did not sample it, and the observation's
template delta) and decodes from there.

Storage is one cache per episode (no padding, positions ``0..n-1``) rather than one
padded batch cache kept across calls: a lockstep batch changes shape from turn to turn
(episodes end, new ones start, suffixes differ in length), and a batch cache would
accumulate padding holes that every later attention step pays for. At each engine call
the episodes' caches are copied, left-padded, into one batch cache with room reserved
for the call's prefill and decode steps (one copy per layer, small next to a forward
pass); after decoding, each row's real columns, one run of them, are kept as views of
that batch cache (no second copy). The prefill it saves grows with the context
(``benchmarks/bench_trainer.py``).

Token-exactness does not depend on the cache: the request's ``prompt_ids`` stay the
whole truth. A cached prefix is used only as far as it equals the start of the new
prompt (longest common prefix), at most up to the prompt's last token, which is always
fed again so that the next-token distribution comes from a forward pass. Entries carry
the policy version and are dropped when the weights change; the store is bounded (least
recently used entries go first) so that an episode that never releases its session
cannot hold memory forever.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["CachedPrefix", "SessionCaches", "batch_cache", "common_prefix", "plain_layers"]


@dataclass
class CachedPrefix:
    """The KV cache of one episode: ``ids`` and, per layer, keys and values.

    Attributes:
        ids: the token ids whose keys and values are cached, in order.
        keys: per layer, a ``(1, heads, len(ids), head_dim)`` tensor.
        values: same shape as ``keys``.
        version: the engine's policy version they were computed with.
    """

    ids: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    version: int


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    return next(i for i in range(n) if a[i] != b[i])


class SessionCaches:
    """A thread-safe, bounded store of :class:`CachedPrefix` by session.

    An engine call *takes* its sessions' entries (they leave the store while the batch
    runs, so the batch cache is the only copy) and *puts* the extended ones back.
    A session released while its entry is taken is remembered, and the entry is not put
    back.

    Args:
        max_sessions: entries kept at most; the least recently used are dropped.
    """

    def __init__(self, max_sessions: int = 256) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.max_sessions = max_sessions
        self._entries: OrderedDict[str, CachedPrefix] = OrderedDict()
        self._taken: set[str] = set()
        self._released: set[str] = set()
        self._lock = threading.Lock()
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def cached_tokens(self) -> int:
        """Tokens whose keys and values the store holds."""
        with self._lock:
            return sum(len(e.ids) for e in self._entries.values())

    def take(
        self, session: str, prompt_ids: Sequence[int], version: int
    ) -> tuple[CachedPrefix | None, int]:
        """Remove ``session``'s entry; return it with how many of its tokens to reuse.

        The count is the common prefix with ``prompt_ids``, at most ``len(prompt_ids) - 1``;
        an entry of another policy version, or one sharing nothing, is dropped.
        """
        with self._lock:
            self._taken.add(session)
            self._released.discard(session)
            entry = self._entries.pop(session, None)
        if entry is None or entry.version != version:
            return None, 0
        n = min(common_prefix(entry.ids, prompt_ids), len(prompt_ids) - 1)
        if n <= 0:
            return None, 0
        self.hits += 1
        self.reused_tokens += n
        return entry, n

    def put(self, session: str, entry: CachedPrefix) -> None:
        """Store ``entry`` unless the session was released meanwhile."""
        with self._lock:
            self._taken.discard(session)
            if session in self._released:
                self._released.discard(session)
                return
            self._entries[session] = entry
            self._entries.move_to_end(session)
            while len(self._entries) > self.max_sessions:
                self._entries.popitem(last=False)

    def untake(self, session: str) -> None:
        """The call that took ``session`` stores nothing for it (it failed, or cannot)."""
        with self._lock:
            self._taken.discard(session)
            self._released.discard(session)

    def release(self, session: str) -> None:
        """Drop ``session``'s entry, now or when the call holding it ends."""
        with self._lock:
            self._entries.pop(session, None)
            if session in self._taken:
                self._released.add(session)

    def clear(self) -> None:
        """Drop every entry (the weights changed); calls in flight store nothing."""
        with self._lock:
            self._entries.clear()
            self._released |= self._taken


def plain_layers(cache: Any) -> list[Any] | None:
    """The layers of ``cache`` when all are plain ``DynamicLayer``s, else ``None``.

    A plain, full-attention ``DynamicLayer`` (or a :class:`.kv_room.RoomyLayer`, one with
    room reserved after its columns) holds exactly the positions fed, in order.
    Sliding-window, linear-attention or quantised layers do not keep every position,
    so a prefix cut out of them could not be reused; such models run without
    cross-turn caching.
    """
    from transformers.cache_utils import DynamicLayer

    from .kv_room import RoomyLayer

    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer) not in (DynamicLayer, RoomyLayer) for layer in layers):
        return None
    if any(layer.keys is None for layer in layers):
        return None
    return list(layers)


def batch_cache(
    prefixes: Sequence[tuple[CachedPrefix | None, int]], width: int, room: int = 0
) -> Any:
    """One cache of ``width`` columns holding each row's prefix, left-padded.

    Row ``i`` holds the first ``n_i`` cached tokens of its prefix in its last ``n_i``
    columns; the columns before them are zeros, which the attention mask hides. With
    ``room``, its layers are :class:`.kv_room.RoomyLayer` s with that many columns
    reserved, so that the prefill and the decode steps after it write in place (a
    ``DynamicLayer`` would copy the whole cache to append each of them).
    """
    from transformers import DynamicCache

    ref = next(e for e, n in prefixes if e is not None and n > 0)
    # only the padding needs zeros (the mask hides it, but uninitialised memory could
    # hold NaNs, which a masked score does not cancel); rows' prefixes are mostly alike
    # in length, so zeroing the whole width first wrote most of it twice
    held = [n if entry is not None and n > 0 else 0 for entry, n in prefixes]
    pad = width - min(held)
    layers = []
    for layer in range(len(ref.keys)):
        bufs = []
        for t in (ref.keys[layer], ref.values[layer]):
            buf = t.new_empty((len(prefixes), t.shape[1], width + room, t.shape[3]))
            if pad:
                buf[:, :, :pad].zero_()
            bufs.append(buf)
        for row, (entry, n) in enumerate(prefixes):
            if held[row]:
                bufs[0][row, :, width - n : width] = entry.keys[layer][0, :, :n]  # type: ignore[union-attr]
                bufs[1][row, :, width - n : width] = entry.values[layer][0, :, :n]  # type: ignore[union-attr]
        layers.append((bufs[0], bufs[1]))
    if room > 0:
        from .kv_room import RoomyLayer

        cache = DynamicCache()
        cache.layers = [RoomyLayer.over(k, v, width) for k, v in layers]
        return cache
    return DynamicCache(ddp_cache_data=layers)


def view_row(layers: Sequence[Any], row: int, start: int, stop: int) -> tuple[list[Any], list[Any]]:
    """Row ``row``'s keys and values at the columns ``start:stop``, as views (no copy).

    The views keep the batch's buffers alive until every row cut from them is replaced
    or released; the next call of those sessions copies them into its own batch anyway.
    """
    keys = [layer.keys[row : row + 1, :, start:stop] for layer in layers]
    values = [layer.values[row : row + 1, :, start:stop] for layer in layers]
    return keys, values
