"""gymhub: multi-turn agentic RL environments, compiled verifiers, and a GRPO learner.

The top level re-exports the small surface most users need; heavier parts (the
server, the learner) are imported from their subpackages so that ``import gymhub``
stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gymhub.errors import (
    ConfigError,
    EnvNotFound,
    GymhubError,
    SpecError,
    TaskNotFound,
)
from gymhub.types import Message, Score, StepResult, ToolCall, ToolSpec

if TYPE_CHECKING:  # loaded on first use (module __getattr__), so `import gymhub` stays light
    from gymnasium import Env

    from gymhub.envs import check_env, register

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "EnvNotFound",
    "GymhubError",
    "Message",
    "Score",
    "SpecError",
    "StepResult",
    "TaskNotFound",
    "ToolCall",
    "ToolSpec",
    "__version__",
    "check_env",
    "make",
    "register",
]


def make(env_id: str, **kwargs: Any) -> Env[list[Message], Message]:
    """Build an environment by id, or connect to a served one by URL.

    ``make("sql-v0")`` builds a registered environment (see :func:`gymhub.envs.make`);
    ``make("http://host:port/sql-v0")`` returns a :class:`~gymhub.client.RemoteEnv`
    that plays its episodes on that server and is used exactly like a local environment.
    The URL branch lives here, not in the registry, because ``envs`` sits below
    ``server`` in the layering.
    """
    if "://" in env_id:
        try:
            from gymhub.client import RemoteEnv
        except ModuleNotFoundError as exc:  # the client extra is not installed
            raise ConfigError(f"make({env_id!r}) connects to a server, which needs "
                              f"{exc.name!r}: pip install 'gymhub[client]'") from exc
        return RemoteEnv.from_url(env_id, **kwargs)
    from gymhub.envs import make as _make

    return _make(env_id, **kwargs)


def __getattr__(name: str) -> Any:
    """``gymhub.register`` and ``gymhub.check_env`` are gymhub.envs' own, loaded on first use."""
    if name in ("register", "check_env"):
        return getattr(importlib.import_module("gymhub.envs"), name)
    raise AttributeError(f"module 'gymhub' has no attribute {name!r}")
