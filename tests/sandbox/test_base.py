from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import pytest

import gymhub.sandbox as sandbox_pkg
from gymhub.errors import BackendError
from gymhub.sandbox import (
    ExecResult,
    Limits,
    PythonResult,
    Sandbox,
    Session,
    get_sandbox,
    shared_sandbox,
)
from gymhub.sandbox.cgroups import pid_alive
from gymhub.sandbox.docker import backend as docker_backend


def test_limits_validate_and_replace() -> None:
    lim = Limits()
    assert lim.replace(wall_s=1).wall_s == 1
    with pytest.raises(ValueError, match="wall_s"):
        Limits(wall_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        lim.replace(memory_mb=-1)


def test_exec_result_status_and_json() -> None:
    assert ExecResult(exit_code=0).status == "ok"
    assert ExecResult(exit_code=3).status == "exit"
    assert ExecResult(exit_code=None, signal=9, limit="wall_time", timed_out=True).status == \
        "wall_time"
    assert ExecResult(exit_code=None, signal=9, oom_killed=True).status == "oom"
    res = ExecResult(exit_code=0, stdout=b"\xffok", files={"a": b"\xfe"})
    data = json.loads(json.dumps(res.to_dict()))
    assert data["stdout"] == "\ufffdok" and data["files"] == {"a": "\ufffd"}
    assert PythonResult(exit_code=1).status == "exception"
    assert PythonResult(exit_code=0, restarted=True).to_dict()["restarted"] is True


def test_unknown_backend_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="unknown sandbox backend"):
        get_sandbox("nope")


def test_importing_the_package_is_light() -> None:
    code = ("import sys, gymhub.sandbox; "
            "bad = [m for m in ('docker', 'gymhub.sandbox.bwrap', 'gymhub.sandbox.docker',"
            " 'gymhub.sandbox.docker.backend', 'gymhub.sandbox.sql') if m in sys.modules];"
            " print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ shared_sandbox
class _Box(Sandbox):
    """A do-nothing sandbox that counts how often it was built and closed.

    Building one waits until ``callers`` threads have entered ``shared_sandbox`` (or
    ``wait_s`` passes), so concurrent first calls really overlap: without the lock,
    every one of them would be inside the build at once.
    """

    name = "bwrap"
    built: ClassVar[list[_Box]] = []
    all_called: ClassVar[threading.Event] = threading.Event()

    def __init__(self) -> None:
        super().__init__()
        self.closes = 0
        _Box.all_called.wait(timeout=10)
        _Box.built.append(self)

    def session(self, limits: Limits | None = None) -> Session:
        raise NotImplementedError

    def close(self) -> None:
        self.closes += 1


@pytest.fixture
def fresh_shared(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """An empty shared-sandbox table and a fake get_sandbox that records its calls."""
    calls: list[str | None] = []

    def fake(backend: str | None = None) -> Sandbox:
        calls.append(backend)
        if backend == "docker":
            raise BackendError("no daemon")
        return _Box()

    _Box.built = []
    _Box.all_called = threading.Event()
    _Box.all_called.set()
    monkeypatch.setattr(sandbox_pkg, "_shared", {})
    monkeypatch.setattr(sandbox_pkg, "get_sandbox", fake)
    monkeypatch.delenv("GYMHUB_SANDBOX_BACKEND", raising=False)
    return calls


def test_shared_sandbox_builds_one_per_backend_under_concurrent_first_calls(
        fresh_shared: list[str | None]) -> None:
    _Box.all_called = threading.Event()
    callers = 8
    arrived = threading.Semaphore(0)

    def first_call(_: int) -> Sandbox:
        arrived.release()
        return shared_sandbox("bwrap")

    def open_the_gate() -> None:
        for _ in range(callers):
            arrived.acquire()
        _Box.all_called.set()

    gate = threading.Thread(target=open_the_gate)
    gate.start()
    with ThreadPoolExecutor(callers) as pool:
        boxes = list(pool.map(first_call, range(2 * callers)))
    gate.join()
    assert len(_Box.built) == 1 and all(b is boxes[0] for b in boxes)
    # The automatic choice resolves to the same backend: the same object, the extra
    # one built to find out is closed at once.
    assert shared_sandbox() is boxes[0] and shared_sandbox(None) is boxes[0]
    assert [b.closes for b in _Box.built] == [0, 1]
    assert len(fresh_shared) == 2  # later calls are served from the table


def test_shared_sandbox_failures_are_not_cached_and_exit_closes_all(
        fresh_shared: list[str | None]) -> None:
    for _ in range(2):
        with pytest.raises(BackendError):
            shared_sandbox("docker")
    assert fresh_shared == ["docker", "docker"]
    box = shared_sandbox("bwrap")
    sandbox_pkg._close_shared()  # what the atexit hook runs
    assert box.closes == 1 and sandbox_pkg._shared == {}


def test_importing_the_sandbox_package_stays_light() -> None:
    code = ("import sys, gymhub.sandbox as s; s.shared_sandbox; "
            "print(sorted(m for m in ('docker', 'gymhub.sandbox.bwrap', "
            "'gymhub.sandbox.docker.backend', 'gymhub.sandbox.sql') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


def test_pid_alive() -> None:
    assert pid_alive(os.getpid())
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not pid_alive(proc.pid)

    assert not hasattr(docker_backend, "_pid_alive")  # one copy, in cgroups
