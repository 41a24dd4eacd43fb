"""Long-lived commands in a session (``HostSession.spawn``): confined, bounded, stoppable.

The hub's check serves the checked wheel with ``gymhub serve`` inside bwrap while the
hub talks to it; whatever that process does (fork, ignore signals, flood stderr), the
host's ``stop`` must end all of it, and the session's close must too.
"""

from __future__ import annotations

import socket
import time

import pytest

from gymhub.sandbox import Limits
from gymhub.sandbox.bwrap import BwrapSandbox

from .conftest import TEST_LIMITS, sandbox_processes


@pytest.fixture(scope="module")
def box():
    if not BwrapSandbox.available():
        pytest.skip("bubblewrap is not installed")
    sb = BwrapSandbox(TEST_LIMITS)
    yield sb
    sb.close()


def _gone(deadline_s: float = 3.0) -> bool:
    end = time.monotonic() + deadline_s
    while sandbox_processes() and time.monotonic() < end:
        time.sleep(0.02)
    return sandbox_processes() == []


LONG = TEST_LIMITS.replace(wall_s=60.0, cpu_s=60.0)


def test_stop_ends_a_process_that_forks_and_ignores_signals(box):
    code = ("import os, signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "for _ in range(3):\n"
            "    if os.fork() == 0:\n"
            "        os.setsid()\n"
            "        break\n"
            "time.sleep(600)\n")
    with box.session(LONG) as s:
        bg = s.spawn(["python3", "-c", code])
        time.sleep(0.5)
        assert bg.alive
        bg.stop()
        assert not bg.alive and bg.returncode is not None
        bg.stop()  # idempotent
    assert _gone()


def test_closing_the_session_stops_what_it_spawned(box):
    s = box.session(LONG)
    bg = s.spawn(["sleep", "600"])
    time.sleep(0.2)
    s.close()
    assert not bg.alive
    assert _gone()


def test_stderr_is_kept_as_a_bounded_tail(box):
    with box.session(LONG) as s:
        bg = s.spawn(["python3", "-c",
                      "import sys\nfor i in range(200000): sys.stderr.write(f'line {i}\\n')\n"
                      "sys.stderr.write('THE END\\n'); sys.stderr.flush()\n"
                      "import time; time.sleep(600)\n"])
        deadline = time.monotonic() + 20
        while "THE END" not in bg.stderr_tail() and time.monotonic() < deadline:
            time.sleep(0.05)
        tail = bg.stderr_tail(limit=10_000_000)
        assert tail.endswith("THE END\n") and len(tail) <= 2 * 64 * 1024
        assert bg.alive  # a full pipe never blocked it
        bg.stop()


def test_a_unix_socket_in_the_workdir_reaches_the_host_without_a_network(box):
    server = ("import os, socket\n"
              "s = socket.socket(socket.AF_UNIX); s.bind('/work/s.sock'); s.listen(1)\n"
              "c, _ = s.accept(); c.sendall(b'hello from inside'); c.close()\n"
              "import time; time.sleep(600)\n")
    with box.session(LONG) as s:
        bg = s.spawn(["python3", "-c", server])
        path = str(s.workdir.path / "s.sock")
        deadline = time.monotonic() + 20
        got = b""
        while time.monotonic() < deadline and not got:
            try:
                with socket.socket(socket.AF_UNIX) as c:
                    c.connect(path)
                    got = c.recv(100)
            except OSError:
                time.sleep(0.05)
        assert got == b"hello from inside"
        # ... while the network stays closed inside.
        res = s.run(["python3", "-c", "import socket\ntry:\n    socket.create_connection("
                     "('1.1.1.1', 53), timeout=1)\n    print('open')\nexcept OSError:\n"
                     "    print('closed')\n"])
        assert res.stdout_text.strip() == "closed"
        bg.stop()


def test_memory_cap_applies_to_a_spawned_process(box):
    with box.session(LONG.replace(memory_mb=64)) as s:
        bg = s.spawn(["python3", "-c", "x = bytearray(512 << 20)\nimport time; time.sleep(600)"])
        deadline = time.monotonic() + 20
        while bg.alive and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not bg.alive and bg.returncode != 0
        bg.stop()


def test_spawn_on_a_closed_session_is_refused(box):
    s = box.session(Limits(wall_s=5))
    s.close()
    with pytest.raises(RuntimeError):
        s.spawn(["true"])
