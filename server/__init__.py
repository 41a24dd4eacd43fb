"""The HTTP boundary's server side: environments served to learners on other machines.

* :func:`create_app` (:mod:`.app`): the FastAPI episode server.
* :mod:`.cli`: ``gymhub serve``.

The learner's side (clients, ``RemoteEnv``, the pool) is :mod:`gymhub.client`; the
exceptions both sides share are in :mod:`gymhub.errors`. ``create_app`` is imported
lazily so that ``python -m gymhub.server.cli --help`` stays fast.
"""

from __future__ import annotations

if __name__ != "gymhub." + __name__.rpartition(".")[2]:  # run from the repo root
    raise ImportError(f"import gymhub.{__name__}, not {__name__}: the top-level folders "
                      "are subpackages of gymhub and must not load a second time")

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module 'gymhub.server' has no attribute {name!r}")
