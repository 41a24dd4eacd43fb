"""``gymhub serve``: banner, argument errors and graceful shutdown of a real process."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import pytest

from gymhub.server.cli import build_parser, main


def test_parser_defaults() -> None:
    args = build_parser().parse_args(["echo-v0", "sql-v0", "--max-episodes", "5"])
    assert args.env_ids == ["echo-v0", "sql-v0"] and args.max_episodes == 5
    assert args.host == "127.0.0.1" and args.port == 8000 and args.token is None


def test_unknown_env_exits_2_with_suggestion(capsys: Any) -> None:
    assert main(["echo-v1"]) == 2
    assert "Did you mean 'echo-v0'" in capsys.readouterr().err


def test_banner_and_graceful_sigterm(server_factory: Any) -> None:
    server = server_factory("echo-v0", "--max-episodes", "7", "--drain-timeout", "5",
                            "--log-level", "info")
    assert server.banner[0].endswith("(max 7 episodes)")
    assert server.banner[1].split() == ["echo-v0", f"{server.url}/echo-v0"]
    with httpx.Client(base_url=server.url) as http:
        created = http.post("/v1/episodes", json={"env": "echo-v0"}).json()
        assert created["episode_id"]
        results: list[int] = []
        hammering = threading.Event()

        def hammer() -> None:  # steps racing the shutdown get an answer or a clean refusal
            hammering.set()
            for seq in range(1, 4):
                try:
                    r = http.post(f"/v1/episodes/{created['episode_id']}/step",
                                  json={"action": "hi", "seq": seq})
                    results.append(r.status_code)
                except httpx.TransportError:
                    results.append(-1)

        t = threading.Thread(target=hammer)
        t.start()
        assert hammering.wait(10)  # the race is on (its outcome is not fixed)
        # uvicorn re-raises the signal after its graceful shutdown, as process managers expect
        assert server.stop(signal.SIGTERM, timeout=10) in (0, -signal.SIGTERM)
        t.join(5)
    assert all(code in (200, 503, -1) for code in results), results
    log = server.stderr()
    assert "drained: closed 1 open episode(s)" in log, log


def test_module_entry_point_help() -> None:
    out = subprocess.run([sys.executable, "-m", "gymhub.server.cli", "--help"],
                         capture_output=True, text=True, check=True)
    assert "--max-episodes" in out.stdout and "--token" in out.stdout


def test_serve_passes_env_args_to_the_constructor():
    import subprocess
    import sys

    from gymhub.client import EnvClient

    proc = subprocess.Popen([sys.executable, "-m", "gymhub.server.cli", "echo-v0", "--port", "0",
                             "--env-arg", "echo-v0:n_tasks=3"], stdout=subprocess.PIPE, text=True)
    try:
        line = ""
        deadline = time.monotonic() + 60
        while " at http://" not in line and time.monotonic() < deadline:
            line = proc.stdout.readline()
        url = line.split(" at ")[1].split()[0]
        client = EnvClient(url)
        assert len(client.tasks("echo-v0")) == 3
        client.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()


@pytest.mark.parametrize("value", ["abc", "1,2,3,4", "-5", "0"])
def test_bad_gc_threshold_exits_2(value: str, capsys: Any) -> None:
    assert main(["echo-v0", "--gc-threshold", value]) == 2
    assert "--gc-threshold" in capsys.readouterr().err
