from __future__ import annotations

import errno
import os
from typing import Any

import pytest

from gymhub.errors import BackendError
from gymhub.sandbox import Limits
from gymhub.sandbox.local import LocalSandbox


def test_refused_unless_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GYMHUB_SANDBOX_ALLOW_LOCAL", raising=False)
    with pytest.raises(BackendError, match="without isolation"):
        LocalSandbox()
    monkeypatch.setenv("GYMHUB_SANDBOX_ALLOW_LOCAL", "1")
    LocalSandbox().close()


def test_runs_with_limits_and_a_clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYMHUB_TEST_SECRET", "s3cr3t")
    sb = LocalSandbox(Limits(wall_s=1, output_bytes=1000), allow=True)
    with sb.session() as s:
        res = s.run(["sh", "-c", "cat; env; echo data > out.txt"], stdin=b"in\n",
                    collect=["out.txt"], env={"FOO": "bar"})
        assert res.ok and res.stdout.startswith(b"in\n")
        assert b"FOO=bar" in res.stdout and b"s3cr3t" not in res.stdout
        assert res.files == {"out.txt": b"data\n"}
        assert s.read_file("out.txt") == b"data\n"
        slow = s.run(["sleep", "10"])  # ends on its own only after 10 s: the deadline did it
        assert slow.timed_out and slow.limit == "wall_time" and slow.signal == 9
        flood = s.run(["head", "-c", "100000", "/dev/zero"])
        assert flood.stdout_truncated and len(flood.stdout) == 1000
    assert s.closed
    with pytest.raises(RuntimeError):
        s.run(["true"])


# ------------------------------------------------------------ leaks on failure paths
def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_failed_repl_kill_still_releases_the_workdir(monkeypatch: pytest.MonkeyPatch) -> None:
    sb = LocalSandbox(Limits(wall_s=5), allow=True)
    session = sb.session()
    assert session.run_python("x = 1").ok
    path = session.workdir.path
    repl_kill = session._repl.kill

    def broken() -> Any:
        repl_kill()  # the interpreter does die; then the kill reports a failure
        raise RuntimeError("kill failed")

    monkeypatch.setattr(session._repl, "kill", broken)
    with pytest.raises(RuntimeError, match="kill failed"):
        session.close()
    assert session.closed and not path.exists()  # the workdir (a tmpfs as root) is gone


def test_a_failed_pidfd_open_kills_and_reaps_the_repl(monkeypatch: pytest.MonkeyPatch) -> None:
    sb = LocalSandbox(Limits(wall_s=5), allow=True)
    with sb.session() as session:
        session.run(["true"])  # warm up lazily opened descriptors
        before = _open_fds()
        pids: list[int] = []

        def no_pidfd(pid: int, flags: int = 0) -> int:
            pids.append(pid)
            raise OSError(errno.EMFILE, "Too many open files")

        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
        with pytest.raises(BackendError, match="cannot watch the Python REPL"):
            session.run_python("1")
        monkeypatch.undo()
        assert len(pids) == 1
        with pytest.raises(ProcessLookupError):
            os.kill(pids[0], 0)  # killed and reaped, not a zombie
        assert _open_fds() <= before  # pipes and stderr closed
        assert session.run_python("1 + 1").value == "2"  # the next call starts afresh
    if sb.cgroups is not None:
        for parent in sb.cgroups.parents.values():
            assert not [p for p in parent.iterdir()
                        if p.is_dir() and p.name.startswith(f"{os.getpid()}-")]
