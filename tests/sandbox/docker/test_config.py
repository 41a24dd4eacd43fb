"""The docker subpackage's SDK-free half, and that its name never hides the SDK."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gymhub.sandbox.docker.config import find_docker_host, seccomp_profile


def test_docker_host_comes_from_the_environment_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://example.invalid:2375")
    assert find_docker_host() == "tcp://example.invalid:2375"
    monkeypatch.delenv("DOCKER_HOST")
    found = find_docker_host()
    assert found is None or found.startswith("unix:///")


def test_seccomp_profile_refuses_new_user_namespaces() -> None:
    rules = seccomp_profile()["syscalls"]
    allowed = {n for r in rules if r.get("action") == "SCMP_ACT_ALLOW" and not r.get("args")
               for n in r.get("names", [])}
    assert not allowed & {"clone", "clone3", "unshare"}  # only with the flag check below
    guarded = [r for r in rules if "unshare" in r.get("names", []) and r.get("args")]
    assert {r["action"] for r in guarded} == {"SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO"}
    assert any(r["names"] == ["clone3"] and r.get("errnoRet") == 38 for r in rules)


def test_the_subpackage_does_not_shadow_the_sdk() -> None:
    # gymhub.sandbox.docker shares its name with the SDK's package: the backend's
    # ``import docker`` must still load the SDK, and importing the subpackage (or its
    # SDK-free config) must load neither the SDK nor the backend.
    pytest.importorskip("docker")
    code = (
        "import sys\n"
        "import gymhub.sandbox.docker, gymhub.sandbox.docker.config\n"
        "print(sorted(m for m in ('docker', 'gymhub.sandbox.docker.backend') if m in sys.modules))\n"
        "from gymhub.sandbox.docker.backend import DockerSandbox\n"
        "DockerSandbox.available()\n"
        "import docker\n"
        "print(docker.__name__, hasattr(docker, 'DockerClient'), 'gymhub' in docker.__file__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["[]", "docker True False"]
