"""gymhub: multi-turn agentic RL environments, compiled verifiers, and a GRPO learner.

The top level re-exports the small surface most users need; heavier parts (the
server, the learner) are imported from their subpackages so that ``import gymhub``
stays light.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gymhub.errors import (
    ConfigError,
    EnvNotFound,
    GymhubError,
    SpecError,
    TaskNotFound,
)
from gymhub.types import Message, Score, StepResult, ToolCall, ToolSpec

if TYPE_CHECKING:  # the wrappers below import these lazily, so `import gymhub` stays light
    from gymnasium import Env

    from gymhub.envs import CheckReport, EnvSpec, TextEnv
    from gymhub.envs.registration import EntryPoint

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
        from gymhub.client import RemoteEnv

        return RemoteEnv.from_url(env_id, **kwargs)
    from gymhub.envs import make as _make

    return _make(env_id, **kwargs)


def register(
    id_or_spec: str | EnvSpec,
    entry_point: EntryPoint | None = None,
    *,
    kwargs: Mapping[str, Any] | None = None,
    max_turns: int | None = None,
    description: str = "",
    verifier: str = "",
    tags: Sequence[str] = (),
    override: bool = False,
) -> EnvSpec:
    """Register an environment on the default registry (see :func:`gymhub.envs.register`)."""
    from gymhub.envs import register as _register

    return _register(id_or_spec, entry_point, kwargs=kwargs, max_turns=max_turns,
                     description=description, verifier=verifier, tags=tags, override=override)


def check_env(
    env: TextEnv,
    *,
    gold_tasks: int | None = 25,
    seeds: Sequence[int] = (0, 1, 2),
    verifier_tasks: int = 5,
    raise_on_failure: bool = True,
) -> CheckReport:
    """Run the environment checker (see :func:`gymhub.envs.check_env`)."""
    from gymhub.envs import check_env as _check

    return _check(env, gold_tasks=gold_tasks, seeds=seeds, verifier_tasks=verifier_tasks,
                  raise_on_failure=raise_on_failure)
