"""Checkpoints that resume a run exactly: weights, optimizer, schedule, RNG, data position.

Only trainable tensors are saved (the LoRA adapters, or every weight when fine-tuning
fully), as safetensors; the optimizer and scheduler go through ``torch.save``; the
step, the task sampler's position and the Python/NumPy/torch RNG states go into
``state.json``/``rng.pt``. Because rollouts draw their seeds from the step number and
batch in lockstep (see :mod:`gymhub.trainer.rollout`), the step after a resume
reproduces the uninterrupted run's metrics bit for bit.

On several processes (:mod:`gymhub.trainer.distributed`) the same files are written once,
by rank 0, from the full state gathered there (``tensors`` and ``optimizer_state``), and
read back by every rank through a ``restore`` that shards them: the format does not
depend on the number of processes, so a run resumes on any number, one included.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["latest_checkpoint", "load_checkpoint", "save_checkpoint"]


def save_checkpoint(
    path: str | Path,
    *,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    state: dict[str, Any],
    tensors: dict[str, Any] | None = None,
    optimizer_state: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint directory (atomically renamed into place).

    ``tensors`` (trainable tensors by name) and ``optimizer_state`` (in
    ``optimizer.state_dict()``'s layout) replace what ``model`` and ``optimizer`` hold
    here: a sharded model's full state, gathered beforehand.
    """
    import numpy as np
    import torch
    from safetensors.torch import save_file

    final = Path(path)
    tmp = final.with_name(final.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    if tensors is None:
        tensors = {
            n: p.detach().cpu().contiguous() for n, p in model.named_parameters()
            if p.requires_grad
        }
    save_file(tensors, str(tmp / "trainable.safetensors"))
    torch.save(
        {"optimizer": optimizer.state_dict() if optimizer_state is None else optimizer_state,
         "scheduler": scheduler.state_dict()},
        tmp / "optim.pt",
    )
    torch.save(
        {
            "python": random.getstate(),
            "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
        },
        tmp / "rng.pt",
    )
    (tmp / "state.json").write_text(json.dumps(state, indent=1), encoding="utf-8")
    if final.exists():
        import shutil

        shutil.rmtree(final)
    tmp.rename(final)
    return final


def load_checkpoint(
    path: str | Path,
    *,
    model: Any,
    optimizer: Any,
    scheduler: Any,
    restore: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Restore everything :func:`save_checkpoint` wrote; returns the saved ``state``.

    ``restore(tensors, optimizer_state)``, when given, loads the weights and the
    optimizer state instead of copying them into ``model``'s parameters and
    ``optimizer.load_state_dict`` (a sharded model, see :mod:`gymhub.trainer.distributed`).

    Raises:
        FileNotFoundError: not a checkpoint directory.
        ValueError: its trainable tensors do not match the model's.
    """
    import numpy as np
    import torch
    from safetensors.torch import load_file

    p = Path(path)
    if not (p / "state.json").is_file():
        raise FileNotFoundError(f"{p} is not a checkpoint (no state.json)")
    tensors = load_file(str(p / "trainable.safetensors"))
    params = {n: q for n, q in model.named_parameters() if q.requires_grad}
    if set(tensors) != set(params):
        missing = sorted(set(params) - set(tensors))[:3]
        raise ValueError(f"checkpoint {p} does not match the model (e.g. missing {missing})")
    optim = torch.load(p / "optim.pt", weights_only=False)
    if restore is not None:
        restore(tensors, optim["optimizer"])
    else:
        with torch.no_grad():
            for name, tensor in tensors.items():
                params[name].copy_(tensor.to(params[name].device, params[name].dtype))
        optimizer.load_state_dict(optim["optimizer"])
    scheduler.load_state_dict(optim["scheduler"])
    rng = torch.load(p / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    return dict(json.loads((p / "state.json").read_text(encoding="utf-8")))


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The highest-step checkpoint under ``output_dir/checkpoints``, if any."""
    root = Path(output_dir) / "checkpoints"
    found = (
        [d for d in root.glob("step-*") if (d / "state.json").is_file()] if root.is_dir() else []
    )
    return max(found, key=lambda d: int(d.name.split("-")[1]), default=None)
