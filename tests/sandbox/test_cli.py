from __future__ import annotations

import json

import pytest

from gymhub.sandbox.bwrap import BwrapSandbox
from gymhub.sandbox.cli import main

needs_bwrap = pytest.mark.skipif(not BwrapSandbox.available(), reason="bubblewrap missing")


@needs_bwrap
def test_exec_json_reports_the_command_not_the_exit(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["exec", "--backend", "bwrap", "--timeout", "1", "--json", "--",
               "sh", "-c", "echo hi; exit 4"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 4 and data["stdout"] == "hi\n" and data["backend"] == "bwrap"


@needs_bwrap
def test_exec_timeout_is_data(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["exec", "--backend", "bwrap", "--timeout", "0.5", "--", "sleep", "5"]) == 0
    assert "status=wall_time" in capsys.readouterr().err


def test_usage_and_backend_errors(capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GYMHUB_SANDBOX_ALLOW_LOCAL", raising=False)
    assert main(["exec"]) == 2
    assert main(["exec", "--timeout", "-1", "--", "true"]) == 2
    assert main(["exec", "--backend", "local", "--", "true"]) == 3
    assert main(["exec", "--backend", "nope", "--", "true"]) == 3
    assert main(["--help"]) == 0
