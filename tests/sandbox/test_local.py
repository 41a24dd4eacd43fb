from __future__ import annotations

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
        slow = s.run(["sleep", "10"])
        assert slow.timed_out and slow.wall_ms < 3000
        flood = s.run(["head", "-c", "100000", "/dev/zero"])
        assert flood.stdout_truncated and len(flood.stdout) == 1000
    assert s.closed
    with pytest.raises(RuntimeError):
        s.run(["true"])
