"""The learner's side of the HTTP boundary: clients of ``gymhub serve``.

Importing this package loads neither FastAPI nor the environments (DESIGN §1): only
:mod:`gymhub.types`, :mod:`gymhub.errors`, :mod:`gymhub.json_codec` and httpx.
:class:`RemoteEnv` loads :mod:`gymhub.envs` when one is built, for Gymnasium's spaces.

* :class:`AsyncEnvClient`, :class:`RemoteEpisode` (:mod:`.async_client`): the client
  learners use, with bounded retries, typed errors and batching.
* :class:`EnvClient` (:mod:`.sync_client`): the same calls, blocking.
* :class:`RemoteEnv` (:mod:`.remote`): a served environment as a ``gymnasium.Env``.
* :class:`EnvPool` (:mod:`.pool`): episodes spread over several servers.
* :class:`ClientConfig` (:mod:`.retries`): timeouts, retries, connection limits.
* :class:`LoopThread` (:mod:`.loop_thread`): one long-lived event loop for blocking code.
"""

from __future__ import annotations

if __name__ != "gymhub." + __name__.rpartition(".")[2]:  # run from the repo root
    raise ImportError(f"import gymhub.{__name__}, not {__name__}: the top-level folders "
                      "are subpackages of gymhub and must not load a second time")

from .async_client import AsyncEnvClient, RemoteEpisode, encode_action
from .loop_thread import LoopThread
from .pool import EnvPool
from .remote import RemoteEnv, split_env_url
from .retries import ClientConfig
from .sync_client import EnvClient

__all__ = [
    "AsyncEnvClient",
    "ClientConfig",
    "EnvClient",
    "EnvPool",
    "LoopThread",
    "RemoteEnv",
    "RemoteEpisode",
    "encode_action",
    "split_env_url",
]
