"""Room reserved in a batch's KV cache, so that a decode step writes in place.

transformers' ``DynamicLayer`` grows by ``torch.cat``: every decode step copies the
whole cache of every layer to append one column. On a CPU, where decoding is bound by
memory traffic, that copy reads and writes twice what the attention itself reads (by
arithmetic, for SmolLM2-135M, 64 rows of ~420 tokens: ~2.5 GB per step against ~1.2 GB
of attention reads and 0.5 GB of weights). A :class:`RoomyLayer` holds its keys and values in a
buffer with the decode steps' columns reserved after them; ``keys``/``values`` are views
of the filled part, so everything that reads a plain layer (cutting rows out into
per-episode caches, reusing prefixes) reads it unchanged.

Imported lazily: it needs transformers.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

__all__ = ["RoomyLayer", "reserve_room"]


class RoomyLayer(DynamicLayer):  # type: ignore[no-untyped-call]
    """A full-attention cache layer with columns reserved ahead of its last one."""

    _key_buf: torch.Tensor
    _value_buf: torch.Tensor

    @classmethod
    def around(cls, layer: Any, room: int) -> RoomyLayer:
        """A copy of plain ``layer``'s columns with ``room`` more reserved after them."""
        n = layer.keys.shape[-2]
        return cls.over(_with_room(layer.keys, room), _with_room(layer.values, room), n)

    @classmethod
    def over(cls, key_buf: torch.Tensor, value_buf: torch.Tensor, n: int) -> RoomyLayer:
        """A layer holding the first ``n`` columns of the buffers; the rest is its room."""
        new = cls()
        new.device = key_buf.device
        new.is_initialized = True
        new._key_buf, new._value_buf = key_buf, value_buf
        new.keys, new.values = key_buf[:, :, :n], value_buf[:, :, :n]
        return new

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new columns into the reserved room (grow by doubling when it is out).

        ``keys``/``values`` reassigned by an inherited method (a batch selection copies
        them out of the buffer) are taken into a fresh buffer first.
        """
        assert self.keys is not None and self.values is not None
        n, m = self.keys.shape[-2], key_states.shape[-2]
        if (n + m > self._key_buf.shape[-2] or self.keys.data_ptr() != self._key_buf.data_ptr()
                or self.values.data_ptr() != self._value_buf.data_ptr()):
            self._key_buf = _with_room(self.keys, max(m, n))
            self._value_buf = _with_room(self.values, max(m, n))
        self._key_buf[:, :, n : n + m] = key_states
        self._value_buf[:, :, n : n + m] = value_states
        self.keys, self.values = self._key_buf[:, :, : n + m], self._value_buf[:, :, : n + m]
        return self.keys, self.values


def _with_room(t: torch.Tensor, room: int) -> torch.Tensor:
    b, h, n, d = t.shape
    buf = t.new_empty((b, h, n + room, d))
    buf[:, :, :n] = t
    return buf


def reserve_room(cache: Any, room: int) -> bool:
    """Give each plain layer of ``cache`` ``room`` reserved columns; False if none is plain.

    Layers of other kinds (sliding windows, quantised) are left as they are, and then
    so is the whole cache: mixing kinds would gain little and test nothing.
    """
    from .session_cache import plain_layers

    layers = plain_layers(cache)
    if room <= 0 or layers is None or any(isinstance(layer, RoomyLayer) for layer in layers):
        return False
    if any(layer.keys.dim() != 4 for layer in layers):  # a lazily initialised, empty layer
        return False
    cache.layers = [RoomyLayer.around(layer, room) for layer in layers]
    return True
