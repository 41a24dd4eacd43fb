"""HTTP over a Unix domain socket: ``gymhub serve --uds`` and ``RemoteEnv(uds=...)``.

The hub's check reaches the environment it checks only this way (the sandbox has no
network), and the client it uses must not trust the server: replies are capped.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gymhub.client import RemoteEnv
from gymhub.envs import check_env, gold_policy, run_episode
from gymhub.hub.served_check import check_served

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def uds_server(tmp_path):
    path = tmp_path / "env.sock"
    proc = subprocess.Popen([sys.executable, "-m", "gymhub.server.cli", "echo-v0", "--uds",
                             str(path)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert f"unix:{path}" in banner, banner
        yield str(path)
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()


def test_an_episode_and_check_env_over_a_unix_socket(uds_server):
    assert stat.S_IMODE(os.stat(uds_server).st_mode) == 0o600  # owner only
    env = RemoteEnv("http://sandbox", "echo-v0", uds=uds_server)
    try:
        assert run_episode(env, gold_policy, seed=0).value == 1.0
        assert check_env(env, gold_tasks=3, raise_on_failure=False).ok
    finally:
        env.close()


def test_check_served_judges_from_the_client_side(uds_server):
    details = check_served(uds_server, ["echo-v0"])
    assert details["gold_score"] == 1.0 and details["noop_score"] < 1.0
    assert all(c["ok"] for c in details["checks"]), details
    assert details["envs"]["echo-v0"]["task_count"] > 0


def _hostile(path: str, body_bytes: int, stop: threading.Event) -> None:
    """A 'server' that answers every request with an endless or huge body."""
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(8)
    srv.settimeout(0.1)
    while not stop.is_set():
        try:
            conn, _ = srv.accept()
        except OSError:
            continue
        with conn:
            conn.recv(65536)
            head = (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    f"content-length: {body_bytes}\r\n\r\n").encode()
            try:
                conn.sendall(head)
                chunk = b" " * 65536
                sent = 0
                while sent < body_bytes and not stop.is_set():
                    conn.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass
    srv.close()


def test_a_server_sending_an_oversized_reply_fails_the_check_without_hurting_the_host(tmp_path):
    path = str(tmp_path / "evil.sock")
    stop = threading.Event()
    t = threading.Thread(target=_hostile, args=(path, 1 << 30, stop), daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        details = check_served(path, ["alice/word-ladder-v0"], call_timeout_s=10)
        assert time.monotonic() - t0 < 30
    finally:
        stop.set()
        t.join(5)
    assert [c["ok"] for c in details["checks"]] == [False]
    assert "loads" in details["checks"][0]["name"]
    assert details["gold_score"] is None and details["envs"] == {}
