from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gymhub.errors import BackendError
from gymhub.sandbox import ExecResult, Limits, PythonResult, get_sandbox


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
            "bad = [m for m in ('docker', 'gymhub.sandbox.bwrap', 'gymhub.sandbox.docker_backend')"
            " if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
