"""The GRPO learner: the only part of gymhub that imports torch.

Importing this package is cheap: torch, transformers and peft load only when a module
that needs them is used. Modules, lowest first:

* :mod:`.config` — :class:`GRPOConfig` (TOML + command-line overrides);
* :mod:`.losses` — the clipped policy loss and its aggregation rules (torch);
* :mod:`.advantages` — returns, group normalisation, masking (pure Python);
* :mod:`.parsers` — tool calls from model text (Hermes, JSON, tags);
* :mod:`.engines` — inference behind one protocol (transformers, vLLM, vLLM server);
* :mod:`.chat`, :mod:`.backends`, :mod:`.rollout` — token-exact multi-turn episodes;
* :mod:`.checkpoint`, :mod:`.loop`, :mod:`.cli` — the training loop and ``gymhub train``;
* :mod:`.distributed` — the loop on several processes (``torchrun``, FSDP2).
"""

from __future__ import annotations

if __name__ != "gymhub." + __name__.rpartition(".")[2]:  # run from the repo root
    raise ImportError(f"import gymhub.{__name__}, not {__name__}: the top-level folders "
                      "are subpackages of gymhub and must not load a second time")

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .advantages import compute_advantages
    from .config import GRPOConfig, load_config
    from .loop import GRPOTrainer
    from .losses import policy_loss

__all__ = ["GRPOConfig", "GRPOTrainer", "compute_advantages", "load_config", "policy_loss"]

_LAZY = {
    "GRPOConfig": ".config",
    "load_config": ".config",
    "GRPOTrainer": ".loop",
    "compute_advantages": ".advantages",
    "policy_loss": ".losses",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
