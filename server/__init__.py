"""The HTTP boundary: serving episodes to learners on other machines.

Names are imported lazily so that ``import gymhub.server.client`` (what a learner
needs) never pulls in FastAPI or the environments.

* :func:`create_app` (:mod:`.app`): the FastAPI server.
* :class:`AsyncEnvClient`, :class:`EnvClient`, :class:`RemoteEpisode` (:mod:`.client`).
* :class:`RemoteEnv` (:mod:`.remote`): a served environment as a ``gymnasium.Env``.
* :class:`EnvPool` (:mod:`.pool`): episodes spread over several servers.
* :mod:`.errors`: the error codes and their exceptions.
"""

from __future__ import annotations

if __name__ != "gymhub." + __name__.rpartition(".")[2]:  # run from the repo root
    raise ImportError(f"import gymhub.{__name__}, not {__name__}: the top-level folders "
                      "are subpackages of gymhub and must not load a second time")

import importlib
from typing import Any

__all__ = ["AsyncEnvClient", "EnvClient", "EnvPool", "RemoteEnv", "RemoteEpisode", "create_app"]

_WHERE = {
    "create_app": ".app",
    "AsyncEnvClient": ".client",
    "EnvClient": ".client",
    "RemoteEpisode": ".client",
    "RemoteEnv": ".remote",
    "EnvPool": ".pool",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'gymhub.server' has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
