"""gymhub: multi-turn agentic RL environments, compiled verifiers, and a GRPO learner.

The top level re-exports the small surface most users need; heavier parts (the
server, the learner) are imported from their subpackages so that ``import gymhub``
stays light.
"""

from __future__ import annotations

from typing import Any

from gymhub.errors import (
    ConfigError,
    EnvNotFound,
    GymhubError,
    SpecError,
    TaskNotFound,
)
from gymhub.types import Message, Score, StepResult, ToolCall, ToolSpec

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


def make(env_id: str, **kwargs: Any) -> Any:
    """Build an environment by id, or connect to a served one by URL.

    ``make("sql-v0")`` builds a registered environment (see :func:`gymhub.envs.make`);
    ``make("http://host:port/sql-v0")`` returns a :class:`~gymhub.client.RemoteEnv`
    that plays its episodes on that server and is used exactly like a local environment.
    The URL branch lives here, not in the registry, because ``envs`` sits below
    ``server`` in the layering.
    """
    if "://" in env_id:
        from gymhub.client import RemoteEnv

        return RemoteEnv.from_url(env_id, **kwargs)
    from gymhub.envs import make as _make

    return _make(env_id, **kwargs)


def register(*args: Any, **kwargs: Any) -> Any:
    """Register an environment on the default registry (see :func:`gymhub.envs.register`)."""
    from gymhub.envs import register as _register

    return _register(*args, **kwargs)


def check_env(env: Any, **kwargs: Any) -> Any:
    """Run the environment checker (see :func:`gymhub.envs.check_env`)."""
    from gymhub.envs import check_env as _check

    return _check(env, **kwargs)
