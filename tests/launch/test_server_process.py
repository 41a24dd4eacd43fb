"""What a launcher's actor runs, without Ray: a `gymhub serve` child, its URL, its port memory."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

from gymhub.launch.server_process import ServerProcess, healthz


def test_starts_reports_and_drains(tmp_path):
    memory = tmp_path / "port"
    server = ServerProcess(["echo-v0"], ["--drain-timeout", "5"], host="127.0.0.1",
                           exit_on_crash=False, port_memory=memory)
    try:
        info = server.info()
        assert info["error"] is None and info["url"].startswith("http://127.0.0.1:")
        health = healthz(info["url"])
        assert health is not None and health["status"] == "ok"
        assert memory.read_text() == info["url"].rsplit(":", 1)[1]
    finally:
        status = server.stop(timeout=10)
    assert status in (0, -signal.SIGTERM)  # drained; uvicorn re-raises the signal
    assert not memory.exists()  # a stopped server is not restarted
    assert healthz(info["url"], timeout=0.5) is None


def test_a_restart_takes_the_port_back_or_another_when_it_is_taken(tmp_path):
    memory = tmp_path / "port"
    first = ServerProcess(["echo-v0"], host="127.0.0.1", exit_on_crash=False, port_memory=memory)
    url = first.url
    assert url is not None
    os.kill(first.info()["pid"], signal.SIGKILL)  # a crash: the port is free again
    time.sleep(0.2)
    second = ServerProcess(["echo-v0"], host="127.0.0.1", exit_on_crash=False, port_memory=memory)
    try:
        assert second.url == url and second.incarnation != first.incarnation
    finally:
        second.stop(timeout=5)
    port = int(url.rsplit(":", 1)[1])
    assert not memory.exists()  # stopped for good: nothing to take back
    memory.write_text(str(port))  # as a crashed one leaves it
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        third = ServerProcess(["echo-v0"], host="127.0.0.1", exit_on_crash=False,
                              port_memory=memory)
        try:
            assert third.error is None and third.url not in (None, url)
            assert memory.read_text() == third.url.rsplit(":", 1)[1]
        finally:
            third.stop(timeout=5)


def test_a_server_that_cannot_start_is_an_error_with_its_reason():
    server = ServerProcess(["no-such-env-v0"], host="127.0.0.1", exit_on_crash=False,
                           ready_timeout_s=30)
    assert server.url is None
    assert server.error is not None and "exited with status 2" in server.error
    assert "no-such-env-v0" in server.error


def test_the_child_dies_with_its_parent(tmp_path):
    """PDEATHSIG: a killed actor process leaves no server behind on an unlisted port."""
    import subprocess
    import sys

    code = ("from gymhub.launch.server_process import ServerProcess\n"
            "s = ServerProcess(['echo-v0'], host='127.0.0.1', exit_on_crash=False)\n"
            "print(s.info()['pid'], s.url, flush=True)\n"
            "import time; time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid, url = parent.stdout.readline().split()
    assert healthz(url) is not None
    parent.kill()
    parent.wait()
    parent.stdout.close()
    stat = Path(f"/proc/{pid}/stat")

    def running() -> bool:
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:  # gone (reaped)
            return False

    deadline = time.monotonic() + 5
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running()
    assert healthz(url, timeout=0.5) is None
