"""The hub's view of ``gymhub.lock`` (the format itself is :mod:`gymhub.lockfile`).

The lock moved below the hub so that the learner can read it without importing the hub;
this module keeps the hub's names working (``gymhub.hub.lock.Lock`` and friends are the
same objects) and adds the one thing only the hub knows: the owner-qualified distribution
name of an environment id (:mod:`gymhub.hub.names`).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Sequence
from typing import Any

from gymhub import lockfile
from gymhub.lockfile import LOCK_FILE, LOCK_VERSION, Lock, installed_digest, now_iso

__all__ = ["LOCK_FILE", "LOCK_VERSION", "Lock", "env_digests", "now_iso"]


def env_digests(env_ids: Sequence[str], lock_path: str | os.PathLike[str] = LOCK_FILE
                ) -> dict[str, dict[str, Any]]:
    """:func:`gymhub.lockfile.env_digests`, also finding a package by its hub name.

    An id that neither the lock nor an installed entry point accounts for is looked up
    once more as the distribution the hub's naming rule gives it
    (``gymhub-env-5-alice-wordle``), e.g. one installed with its entry points hidden.

    Raises:
        InvalidName: such an id is not a canonical ``OWNER/NAME-vN``.
    """
    from gymhub.hub.names import distribution_name, parse_env_id

    out = lockfile.env_digests(env_ids, lock_path)
    for env_id, found in out.items():
        if found != {"source": "unknown"}:
            continue
        parsed = parse_env_id(env_id)
        try:
            dist = importlib.metadata.distribution(distribution_name(parsed.owner, parsed.name))
        except importlib.metadata.PackageNotFoundError:
            continue
        out[env_id] = installed_digest(dist)
    return out
