"""The ``local`` backend: commands run as plain host processes, with no isolation.

It exists for trusted development (debugging a task's tests on a laptop without
bubblewrap). The command sees the host's files and network as the calling user. It still
gets the limits that need no isolation: wall deadline, output cap, rlimits, a cgroup when
writable, a cleared environment, its own workdir as current directory, and its process
group (and cgroup) killed after each call.

Refused unless enabled explicitly: ``LocalSandbox(allow=True)`` or the environment
variable ``GYMHUB_SANDBOX_ALLOW_LOCAL=1``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from gymhub.errors import BackendError
from gymhub.sandbox.base import Limits, Sandbox, Session
from gymhub.sandbox.cgroups import detect
from gymhub.sandbox.hostsession import HostSession

__all__ = ["LocalSandbox", "local_allowed"]


def local_allowed() -> bool:
    """Whether ``GYMHUB_SANDBOX_ALLOW_LOCAL`` enables the local backend."""
    return os.environ.get("GYMHUB_SANDBOX_ALLOW_LOCAL", "").lower() in ("1", "true", "yes")


class LocalSandbox(Sandbox):
    """Unisolated backend for trusted code only.

    Args:
        limits: default limits.
        allow: must be True (or ``GYMHUB_SANDBOX_ALLOW_LOCAL=1`` set): running model
            output unisolated is never a default.

    Raises:
        BackendError: not explicitly allowed.
    """

    name = "local"

    def __init__(self, limits: Limits | None = None, *, allow: bool = False) -> None:
        if not (allow or local_allowed()):
            raise BackendError(
                "the local sandbox backend runs code without isolation; enable it with "
                "LocalSandbox(allow=True) or GYMHUB_SANDBOX_ALLOW_LOCAL=1"
            )
        super().__init__(limits)
        self.cgroups, self.cgroup_reason = detect()

    def session(self, limits: Limits | None = None) -> Session:
        """Open a session (see :meth:`Sandbox.session`)."""
        return LocalSession(self, limits or self.limits)


class LocalSession(HostSession):
    """A local session: a workdir on the host and plain child processes."""

    def __init__(self, sandbox: LocalSandbox, limits: Limits) -> None:
        super().__init__(sandbox.name, limits, sandbox.cgroups, os.geteuid(), os.getegid())

    def _wrap(self, argv: Sequence[str], env: Mapping[str, str], limits: Limits, *,
              repl: bool = False) -> list[str]:
        # env(1) replaces the launcher's environment with exactly the sandbox's.
        pairs = [f"{k}={v}" for k, v in env.items()]
        return ["/usr/bin/env", "-i", "--", *pairs, *argv]
