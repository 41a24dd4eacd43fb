"""Docker backend configuration that needs no SDK: where the daemon is, and seccomp.

Kept apart from :mod:`gymhub.sandbox.docker.backend` so that tests and tools can find
the socket or inspect the profile without importing the ``docker`` SDK.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["find_docker_host", "seccomp_profile"]

_SOCKETS = ("/run/gymhub-podman.sock", "/run/podman/podman.sock", "/var/run/docker.sock")
_CLONE_NEWUSER = 0x10000000
_NO_NEWUSER = [{"index": 0, "value": _CLONE_NEWUSER, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]


def seccomp_profile() -> dict[str, Any]:
    """The engine's default seccomp profile, minus user-namespace creation.

    Docker's and Podman's defaults allow ``unshare(CLONE_NEWUSER)`` (an unprivileged
    user can always make a user namespace, and gain capabilities inside it). This keeps
    the default allowlist (from ``/usr/share/containers/seccomp.json`` when present, else
    allow-all) and only allows ``clone``/``unshare`` without ``CLONE_NEWUSER``; ``clone3``
    (whose flags seccomp cannot inspect) fails with ENOSYS, so libc falls back to ``clone``.
    """
    base = Path("/usr/share/containers/seccomp.json")
    try:
        profile: dict[str, Any] = json.loads(base.read_text())
    except (OSError, ValueError):
        profile = {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []}
    guarded = {"clone", "clone3", "unshare"}
    rules = []
    for rule in profile.get("syscalls", []):
        if rule.get("action") == "SCMP_ACT_ALLOW":
            rule = {**rule, "names": [n for n in rule.get("names", []) if n not in guarded]}
        rules.append(rule)
    rules += [
        {"names": ["clone", "unshare"], "action": "SCMP_ACT_ALLOW", "args": _NO_NEWUSER},
        {"names": ["clone", "unshare"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
         "args": [{**_NO_NEWUSER[0], "valueTwo": _CLONE_NEWUSER}]},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
    ]
    profile["syscalls"] = rules
    return profile


def find_docker_host() -> str | None:
    """``$DOCKER_HOST``, else the first existing Podman/Docker socket, as a URL."""
    env = os.environ.get("DOCKER_HOST")
    if env:
        return env
    for path in _SOCKETS:
        if os.path.exists(path):
            return f"unix://{path}"
    return None
