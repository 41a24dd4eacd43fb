"""Shared fixtures: one sandbox per available backend, and host-cleanliness checks.

The docker backend is tested when a Docker Engine API answers: ``$DOCKER_HOST``, else
Podman's default rootful socket (``scripts/setup-system.sh`` starts one and prints the
``DOCKER_HOST`` to export). Tests skip a backend that is not available here.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gymhub.sandbox import Limits, Sandbox

#: Small limits keep every attack under a couple of seconds on 2 cores.
TEST_LIMITS = Limits(wall_s=2.0, cpu_s=1.5, memory_mb=128, pids=32, output_bytes=64 * 1024,
                     file_size_mb=8, open_files=64, tmp_mb=16, workdir_mb=16)


def _make(name: str) -> Sandbox:
    if name == "local":
        from gymhub.sandbox.local import LocalSandbox

        return LocalSandbox(TEST_LIMITS, allow=True)
    if name == "bwrap":
        from gymhub.sandbox.bwrap import BwrapSandbox

        if not BwrapSandbox.available():
            pytest.skip("bubblewrap is not installed")
        return BwrapSandbox(TEST_LIMITS)
    from gymhub.sandbox.docker.backend import DockerSandbox

    if not DockerSandbox.available():
        pytest.skip("no Docker/Podman API socket reachable")
    return DockerSandbox(TEST_LIMITS, pool_size=2)


_cache: dict[str, Sandbox] = {}


@pytest.fixture(scope="session", params=["bwrap", "docker"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """Each available isolating backend, built once per test session."""
    name = request.param
    if name not in _cache:
        _cache[name] = _make(name)
    yield _cache[name]


@pytest.fixture(scope="session", params=["bwrap", "docker", "local"])
def any_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """Every available backend including ``local`` (for features that need no isolation)."""
    name = request.param
    if name not in _cache:
        _cache[name] = _make(name)
    yield _cache[name]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for sb in _cache.values():
        sb.close()
    _cache.clear()


def _ours(pid: int, containers: list[str]) -> bool:
    """Whether ``pid`` was started by this test process: a descendant, a member of one of
    our cgroups, or a process in one of our containers. Other users of the machine (their
    own sandboxes also run as uid 65534) are not our business."""
    try:
        groups = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    if f"/gymhub/{os.getpid()}-" in groups or any(c in groups for c in containers):
        return True
    seen = 0
    while pid > 1 and seen < 64:
        if pid == os.getpid():
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        seen += 1
    return False


def _our_containers() -> list[str]:
    ids: list[str] = []
    for sb in _cache.values():
        client = getattr(sb, "client", None)
        if client is not None:
            with contextlib.suppress(Exception):
                ids += [c.id for c in client.containers.list(
                    filters={"label": f"gymhub.owner={os.getpid()}"})]
    return ids


def sandbox_processes() -> list[str]:
    """Host processes running as the sandbox user (uid 65534) that this test run started."""
    out = subprocess.run(["ps", "-u", "65534", "-o", "pid=,args="], capture_output=True,
                         text=True, check=False).stdout
    containers = _our_containers()
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return [line for line in lines if _ours(int(line.split()[0]), containers)]


def _assert_clean(sandbox: Sandbox) -> None:
    """Nothing the sandbox started is still running, and the next call works normally."""
    if os.geteuid() == 0:
        deadline = time.monotonic() + 2.0  # a killed process may take a moment to vanish
        while sandbox_processes() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sandbox_processes() == []
    cgroups = getattr(sandbox, "cgroups", None)
    if cgroups is not None:
        for parent in cgroups.parents.values():  # ours only: others share the parent
            assert [p.name for p in parent.iterdir()
                    if p.is_dir() and p.name.startswith(f"{os.getpid()}-")] == []
    follow = sandbox.run(["sh", "-c", "echo ok"])
    assert follow.ok, follow
    assert follow.stdout == b"ok\n"


@pytest.fixture
def clean() -> Callable[[Sandbox], None]:
    """``clean(sandbox)``: nothing left running and the next call behaves normally."""
    return _assert_clean
