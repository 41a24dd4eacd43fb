"""``python -m gymhub.trainer [--config FILE.toml] [--key value ...]``: ``gymhub train``.

What ``torchrun --nproc-per-node N -m gymhub.trainer ...`` runs on every rank, and what
``gymhub train --nproc N`` launches (see :mod:`gymhub.trainer.distributed`).
"""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
