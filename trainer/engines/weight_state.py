"""What a weight push carries, gathered from a possibly sharded learner and loaded back.

Shared by the ``disk`` and ``broadcast`` backends (:mod:`.weight_push_disk`,
:mod:`.weight_push_broadcast`) and meant for the learner's own checkpoints too:

* :func:`full_state_dict` turns a module or a state dict whose values may be FSDP2
  ``DTensor`` shards into plain full tensors. ``DTensor.full_tensor()`` is a collective
  over the shard's mesh, so **every learner rank must call it, in the same order**: the
  order is the state dict's, which is the same on every rank. A tensor tied to another
  (SmolLM2's ``lm_head.weight`` is ``embed_tokens.weight``) is gathered once.
* :func:`push_payload` chooses what travels. Full fine-tuning: the whole state dict.
  LoRA (a peft model): **the adapter weights only** (the trainable parameters, under
  peft's names), not merged weights. The base weights are frozen and identical on both
  sides (the rollout worker builds its policy from the same checkpoint and the same LoRA
  settings), so ~1 % of the bytes carry everything training changed; merging instead
  would mean merging on the learner every push (and peft's unmerge is not bit-exact, so
  the learner would drift) and would make the worker's forward differ numerically from
  the learner's peft forward that computes the training log-probabilities.
* :func:`dedupe` sends each storage once and names its aliases; :func:`load_payload`
  loads a received payload into a receiver's model (``load_state_dict``, checked).
* :func:`weights_checksum` is what tests compare across processes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gymhub.errors import WeightSyncError

if TYPE_CHECKING:
    import torch

__all__ = [
    "agree_on_failure",
    "dedupe",
    "dtype_from_name",
    "full_state_dict",
    "load_payload",
    "push_payload",
    "weights_checksum",
]


def full_state_dict(
    source: Any, *, device: Any = "cpu", keep: bool = True
) -> dict[str, torch.Tensor]:
    """Plain, full tensors of ``source`` (a module, or a state dict of possibly-DTensors).

    Args:
        source: an ``nn.Module`` (its ``state_dict()`` is read) or a mapping name → tensor.
        device: where the full tensors are put (``None``: where they are gathered). On
            the CPU a plain tensor that is already there is returned as is (no copy).
        keep: ``False`` on ranks that only take part in the gathers (a push's non-source
            ranks): each full tensor is dropped at once and ``{}`` is returned, so those
            ranks never hold the whole model.

    Every rank holding shards of the same ``DTensor`` must make this call, in the same
    order (the gathers are collectives); see the module docstring.
    """
    from torch.distributed.tensor import DTensor

    state: Mapping[str, Any] = source if isinstance(source, Mapping) else source.state_dict()
    out: dict[str, torch.Tensor] = {}
    gathered: dict[tuple[Any, ...], torch.Tensor] = {}
    for name, value in state.items():
        tensor = value.detach()
        if isinstance(tensor, DTensor):
            local = tensor.to_local()
            # tied parameters are one DTensor under two names: gather it once
            key = (local.untyped_storage().data_ptr(), local.storage_offset(),
                   tuple(tensor.shape))
            if key in gathered:  # every rank skips the same repeat: the gathers stay paired
                tensor = gathered[key]
            else:
                tensor = tensor.full_tensor()
                # a non-keeping rank remembers only that it gathered (an empty stand-in)
                gathered[key] = tensor if keep else tensor.new_empty(0)
        if not keep:
            continue
        out[name] = tensor if device is None else tensor.to(device)
    return out


def push_payload(model: Any) -> tuple[dict[str, Any], bool]:
    """The state a push sends for ``model`` (values may be DTensors), and whether it is partial.

    A peft model sends its trainable parameters only (the adapters; see the module
    docstring for why not merged weights); anything else its whole state dict.
    """
    state: dict[str, Any] = dict(model.state_dict())
    if not hasattr(model, "peft_config"):
        return state, False
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    chosen = {name: t for name, t in state.items() if name in trainable}
    if not chosen:
        raise WeightSyncError("the peft model has no trainable parameters to push")
    return chosen, True


def dedupe(tensors: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Each storage once: ``(unique, aliases)`` with ``aliases[name] = name it repeats``.

    Two names are one tensor when they view the same bytes the same way (tied
    weights); safetensors refuses to save such a pair, and sending both would double
    the largest tensor of a small model (SmolLM2's embedding is a fifth of its bytes).
    """
    unique: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple[Any, ...], str] = {}
    for name, t in tensors.items():
        if t.numel() == 0:
            unique[name] = t
            continue
        key = (t.device, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
               t.stride(), t.dtype)
        first = seen.get(key)
        if first is None:
            seen[key] = name
            unique[name] = t
        else:
            aliases[name] = first
    return unique, aliases


def dtype_from_name(name: str) -> torch.dtype:
    """``torch.float32`` from ``"torch.float32"`` or ``"float32"`` (a manifest's spelling)."""
    import torch

    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise WeightSyncError(f"unknown dtype {name!r} in a weight push")
    return dtype


def load_payload(
    model: Any, tensors: Mapping[str, torch.Tensor], aliases: Mapping[str, str], *,
    partial: bool, version: int,
) -> None:
    """Copy a received payload into ``model`` in place (``load_state_dict``), checked.

    A full payload must name every key of the model; a partial one (LoRA adapters)
    only keys the model has. A missing or unexpected key, or a shape that differs,
    means the two sides do not hold the same architecture: refused, naming the version.
    """
    state = dict(tensors)
    for alias, name in aliases.items():
        state[alias] = tensors[name]
    try:
        result = model.load_state_dict(state, strict=not partial)
    except RuntimeError as exc:  # strict mismatches and shape mismatches land here
        raise WeightSyncError(f"policy version {version} does not fit the receiver's model: "
                              f"{exc}") from exc
    if result.unexpected_keys:
        raise WeightSyncError(
            f"policy version {version} carries keys the receiver's model lacks (is it built "
            f"with the learner's LoRA settings?): {sorted(result.unexpected_keys)[:5]}"
        )


def weights_checksum(source: Any) -> str:
    """SHA-256 over the names and bytes of ``source``'s full state (module or state dict).

    Collective where ``source`` holds DTensors (see :func:`full_state_dict`).
    """
    import torch

    digest = hashlib.sha256()
    state = full_state_dict(source, device="cpu")
    for name in sorted(state):
        t = state[name].contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def agree_on_failure(failed: bool, group: Any = None) -> bool:
    """Whether any learner rank of ``group`` failed its part of a push (a collective).

    Only the source rank sends; without this the other ranks would return from a push
    that did not happen and train on, while rank 0 raised. With a single process (or no
    process group) this is just ``failed``.
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size(group) == 1:
        return failed
    device = "cpu"
    if dist.get_backend(group) == "nccl":
        device = f"cuda:{torch.cuda.current_device()}"
    flag = torch.tensor([1 if failed else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    return bool(flag.item())


def learner_rank(group: Any = None) -> tuple[int, int]:
    """``(rank, world_size)`` of this process among the learner ranks (``(0, 1)`` alone)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def gather_for_push(model: Any, group: Any, device: Any) -> tuple[int, bool, dict[str, Any]]:
    """``(learner rank, partial, tensors)`` for one push, the start every backend shares.

    A collective: every learner rank calls it, and only rank 0 keeps the gathered
    tensors (the others take part in the gathers and get an empty dict).
    """
    rank, _ = learner_rank(group)
    state, partial = push_payload(model)
    return rank, partial, full_state_dict(state, device=device, keep=rank == 0)
