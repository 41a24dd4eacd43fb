"""Adversarial programs, each on every available backend.

Every test checks the three promises: a typed result (never an exception), nothing left
running on the host, and a next call that behaves normally.
"""

from __future__ import annotations

import hashlib
import json
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from gymhub.sandbox import Limits, Sandbox, SandboxPathError

Clean = Callable[[Sandbox], None]

TEST_LIMITS = Limits(wall_s=2.0, cpu_s=1.5, memory_mb=128, pids=32, output_bytes=64 * 1024,
                     file_size_mb=8, open_files=64, tmp_mb=16, workdir_mb=16)


def py(code: str) -> list[str]:
    return ["python3", "-c", code]


def test_fork_bomb_python(sandbox: Sandbox, clean: Clean) -> None:
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    res = sandbox.run(py(code))  # never ends on its own: only a limit can stop it
    assert not res.ok
    assert res.timed_out or res.pids_exhausted
    assert res.exit_code is None and res.signal == 9
    clean(sandbox)


def test_fork_bomb_shell(sandbox: Sandbox, clean: Clean) -> None:
    res = sandbox.run(["bash", "-c", ":(){ :|:& };:; sleep 1"])
    assert res.backend == sandbox.name
    clean(sandbox)


def test_memory_bomb_one_large_allocation(sandbox: Sandbox, clean: Clean) -> None:
    res = sandbox.run(py("x = bytearray(4 * 1024**3)\nprint('survived')"))
    assert not res.ok
    assert b"survived" not in res.stdout
    assert res.oom_killed or b"MemoryError" in res.stderr
    clean(sandbox)


def test_memory_bomb_many_small_allocations(sandbox: Sandbox, clean: Clean) -> None:
    res = sandbox.run(py("a = []\nwhile True:\n    a.append(bytearray(1 << 20))"))
    assert not res.ok
    assert res.oom_killed or b"MemoryError" in res.stderr or res.signal == 9
    clean(sandbox)


def test_infinite_cpu_loop(sandbox: Sandbox, clean: Clean) -> None:
    res = sandbox.run(py("while True:\n    pass"), limits=TEST_LIMITS.replace(cpu_s=1, wall_s=4))
    assert res.timed_out
    assert res.exit_code is None
    assert res.cpu_ms >= 500
    clean(sandbox)


def test_sleep_past_deadline(sandbox: Sandbox, clean: Clean) -> None:
    res = sandbox.run(["sleep", "1000"], limits=TEST_LIMITS.replace(wall_s=1))
    assert res.timed_out and res.limit == "wall_time"
    assert res.exit_code is None and res.signal == 9  # killed, not finished
    clean(sandbox)


def test_daemon_does_not_outlive_the_call(sandbox: Sandbox, clean: Clean) -> None:
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.closerange(0, 3)\n"
        "        time.sleep(1000)\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    res = sandbox.run(py(code))
    assert res.ok and res.stdout == b"parent done\n"
    clean(sandbox)


def test_one_gigabyte_of_output(sandbox: Sandbox, clean: Clean) -> None:
    res = sandbox.run(["head", "-c", str(10**9), "/dev/zero"])
    assert res.stdout_truncated and res.limit == "output"
    assert res.exit_code is None and res.signal == 9  # killed at the cap, not left to finish
    assert len(res.stdout) == TEST_LIMITS.output_bytes
    clean(sandbox)


def test_filling_tmp(sandbox: Sandbox, clean: Clean) -> None:
    res = sandbox.run(["sh", "-c", "i=0; while [ $i -lt 40 ]; do head -c 1048576 /dev/zero "
                       "> /tmp/f$i || exit 7; i=$((i+1)); done"])
    assert res.exit_code == 7
    clean(sandbox)


def test_filling_the_workdir(sandbox: Sandbox, clean: Clean) -> None:
    with sandbox.session() as s:
        res = s.run(["sh", "-c", "i=0; while [ $i -lt 40 ]; do head -c 1048576 /dev/zero "
                     "> /work/f$i || exit 7; i=$((i+1)); done"])
        assert res.exit_code == 7
        again = s.run(["sh", "-c", "rm -f /work/f*; echo ok > /work/x; cat /work/x"])
        assert again.stdout == b"ok\n"
    clean(sandbox)


def test_file_size_limit(sandbox: Sandbox, clean: Clean) -> None:
    code = "open('/tmp/big', 'wb').write(b'x' * (9 << 20))"
    res = sandbox.run(py(code), limits=TEST_LIMITS.replace(tmp_mb=32))
    assert not res.ok
    assert b"File too large" in res.stderr or res.signal == 25
    clean(sandbox)


def test_open_file_exhaustion(sandbox: Sandbox, clean: Clean) -> None:
    code = (
        "fs = []\n"
        "try:\n"
        "    while True:\n"
        "        fs.append(open('/dev/null'))\n"
        "except OSError as e:\n"
        "    print(len(fs), e.errno)\n"
    )
    res = sandbox.run(py(code))
    count, errno_ = res.stdout.split()
    assert int(count) < TEST_LIMITS.open_files and int(errno_) == 24  # EMFILE
    clean(sandbox)


def test_network_egress_tcp_and_dns(sandbox: Sandbox, clean: Clean) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        f"for addr in [('1.1.1.1', 53), ('127.0.0.1', {port}), ('10.0.0.1', 80)]:\n"
        "    s = socket.socket(); s.settimeout(1)\n"
        "    try:\n"
        "        s.connect(addr); print('CONNECTED', addr)\n"
        "    except OSError as e:\n"
        "        print('blocked', addr)\n"
        "try:\n"
        "    socket.getaddrinfo('example.com', 80); print('RESOLVED')\n"
        "except OSError:\n"
        "    print('no dns')\n"
    )
    try:
        res = sandbox.run(py(code))
    finally:
        listener.close()
    assert b"CONNECTED" not in res.stdout and b"RESOLVED" not in res.stdout
    assert res.stdout.count(b"blocked") == 3 and b"no dns" in res.stdout
    clean(sandbox)


def test_binding_a_port_is_invisible_to_the_host(sandbox: Sandbox, clean: Clean) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    # The sandbox listens for a second and says whether anyone connected; the host
    # knocks from before the call starts until it has returned, so its knocks cover the
    # whole time the port is open whatever the machine's load (no timed rendezvous).
    code = (
        "import socket\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(('0.0.0.0', {port})); s.listen(5); print('listening', flush=True)\n"
        "s.settimeout(1.0)\n"
        "try:\n"
        "    s.accept(); print('REACHED')\n"
        "except OSError:\n"
        "    print('alone')\n"
    )
    reached: list[bool] = []
    done = threading.Event()

    def knock() -> None:
        while not done.is_set():
            c = socket.socket()
            c.settimeout(0.3)
            try:
                c.connect(("127.0.0.1", port))
                reached.append(True)
            except OSError:
                reached.append(False)
            finally:
                c.close()
            done.wait(0.02)

    thread = threading.Thread(target=knock)
    thread.start()
    try:
        res = sandbox.run(py(code))
    finally:
        done.set()
        thread.join()
    assert res.stdout == b"listening\nalone\n"
    assert reached and not any(reached)
    clean(sandbox)


def test_host_files_and_secrets_are_unreachable(sandbox: Sandbox, clean: Clean,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GYMHUB_TEST_SECRET", "s3cr3t-value")
    home = Path.home()
    with tempfile.NamedTemporaryFile(dir=home, prefix="gymhub-secret-", delete=True) as fh:
        fh.write(b"host secret")
        fh.flush()
        code = (
            "import os, glob\n"
            "for p in ['/etc/shadow', " + repr(fh.name) + "]:\n"
            "    try:\n"
            "        print('READ', open(p).read()[:10])\n"
            "    except OSError as e:\n"
            "        print('denied')\n"
            "print(sorted(glob.glob(" + repr(str(home) + "/*") + ")))\n"
            "print('env', dict(os.environ))\n"
            "for pid in os.listdir('/proc'):\n"
            "    if pid.isdigit():\n"
            "        try:\n"
            "            print(open(f'/proc/{pid}/environ', 'rb').read())\n"
            "        except OSError:\n"
            "            pass\n"
        )
        res = sandbox.run(py(code))
    assert b"READ" not in res.stdout and res.stdout.count(b"denied") == 2
    assert b"s3cr3t-value" not in res.stdout
    assert b"gymhub-secret-" not in res.stdout
    clean(sandbox)


def test_overwriting_the_interpreter(sandbox: Sandbox, clean: Clean) -> None:
    real = Path("/usr/bin/python3").resolve()
    before = hashlib.sha256(real.read_bytes()).hexdigest()
    code = (
        "import sys, os, shutil\n"
        "for target in [sys.executable, os.path.realpath(sys.executable), '/bin/sh']:\n"
        "    try:\n"
        "        open(target, 'wb').write(b'pwned')\n"
        "        print('WROTE', target)\n"
        "    except OSError as e:\n"
        "        print('refused', e.errno)\n"
    )
    res = sandbox.run(py(code))
    assert b"WROTE" not in res.stdout
    assert hashlib.sha256(real.read_bytes()).hexdigest() == before
    assert sandbox.run(py("print(6*7)")).stdout == b"42\n"
    clean(sandbox)


def test_path_escapes_in_the_files_api(sandbox: Sandbox, clean: Clean) -> None:
    passwd = Path("/etc/passwd").read_bytes()
    with sandbox.session() as s:
        for bad in ["../x", "/etc/x", "a/../../x", "", "a\x00b", "/work/../etc/x"]:
            with pytest.raises(SandboxPathError):
                s.write_file(bad, b"x")
        res = s.run(["sh", "-c", "ln -s /etc/passwd leak && ln -s / root && mkdir d && "
                     "ln -s /etc d/etc && echo ok"])
        assert res.stdout == b"ok\n"
        for name in ["leak", "root/etc/shadow", "d/etc/passwd"]:
            with pytest.raises(FileNotFoundError):
                s.read_file(name)
        with pytest.raises(SandboxPathError):
            s.write_file("leak", b"pwned")
        with pytest.raises(SandboxPathError):
            s.write_file("root/etc/passwd", b"pwned")
        res = s.run(["true"], collect=["leak", "root/etc/shadow", "../x"][:2])
        assert dict(res.files) == {}
        assert "leak" not in s.list_files()
        with pytest.raises(SandboxPathError):
            s.run(["true"], files={"../evil": b"x"})
    assert Path("/etc/passwd").read_bytes() == passwd
    clean(sandbox)


def test_nested_user_namespaces(sandbox: Sandbox, clean: Clean) -> None:
    res = sandbox.run(["sh", "-c", "unshare -Ur id && echo NESTED; unshare -m true && echo MOUNTNS;"
                       " grep Cap /proc/self/status; exit 0"])
    assert b"NESTED" not in res.stdout and b"MOUNTNS" not in res.stdout
    assert b"CapEff:\t0000000000000000" in res.stdout
    clean(sandbox)


def test_kill_minus_one(sandbox: Sandbox, clean: Clean) -> None:
    import os
    import subprocess

    # A host process of the sandbox's own uid (as root) is what kill -9 -1 would reach
    # without a pid namespace. Asking it to answer after the call is a check without a
    # clock: a process with a pending SIGKILL never runs again, so it could not reply.
    uid = 65534 if os.geteuid() == 0 else None
    with subprocess.Popen(
            ["python3", "-c", "import sys; sys.stdin.readline(); print('alive', flush=True)"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, user=uid, group=uid,
            cwd="/") as canary:
        try:
            res = sandbox.run(["sh", "-c", "sleep 5 & kill -9 -1; echo after"])
            assert res.exit_code is not None or res.signal == 9
            assert canary.stdin is not None and canary.stdout is not None
            canary.stdin.write(b"ping\n")
            canary.stdin.flush()
            assert canary.stdout.readline() == b"alive\n", "kill -9 -1 reached a host process"
        finally:
            canary.kill()
    clean(sandbox)


def test_non_utf8_output(sandbox: Sandbox, clean: Clean) -> None:
    res = sandbox.run(["sh", "-c", r"printf '\377\376ok\200' ; printf '\377' >&2"])
    assert res.stdout == b"\xff\xfeok\x80" and res.stderr == b"\xff"
    assert "ok" in res.stdout_text
    json.dumps(res.to_dict())
    clean(sandbox)


def test_zombies(sandbox: Sandbox, clean: Clean) -> None:
    code = (
        "import os, time\n"
        "for _ in range(10):\n"
        "    if os.fork() == 0:\n"
        "        os._exit(0)\n"
        "time.sleep(0.2)\n"
        "print(sum(1 for p in os.listdir('/proc') if p.isdigit()))\n"
    )
    res = sandbox.run(py(code))
    assert res.ok
    clean(sandbox)


def test_limits_are_not_shared_between_sessions(sandbox: Sandbox, clean: Clean) -> None:
    with sandbox.session() as a, sandbox.session() as b:
        a.write_file("mine.txt", "a")
        assert b.run(["sh", "-c", "ls /work"]).stdout == b""
        big = Limits(wall_s=2.0, memory_mb=128, output_bytes=16)
        assert b.run(["echo", "0123456789012345678"], limits=big).stdout_truncated
