"""``gymhub push``/``info``/``yank``/``search`` against a real ``gymhub hub serve`` process.

Everything runs on loopback, offline: the hub is a subprocess on a free port, its
database a SQLite file the test also opens to mint tokens and inspect what is visible.
"""

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gymhub.errors import PackageNotFound
from gymhub.hub.store import HubStore
from gymhub.hub.tokens import create_token

REPO = Path(__file__).resolve().parents[2]


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYMHUB_HUB_")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def gymhub(*args, **env):
    return subprocess.run([sys.executable, "-m", "gymhub.cli", *args], capture_output=True,
                          text=True, env=_env(**env), timeout=300, cwd=REPO)


class Hub:
    def __init__(self, root: Path):
        self.db_url = f"sqlite:///{root / 'hub.db'}"
        self.storage = root / "files"
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self, max_mb: int = 1, *extra: str) -> "Hub":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gymhub.cli", "hub", "serve", "--port", "0", "--db",
             self.db_url, "--storage", str(self.storage), "--max-upload-mb", str(max_mb),
             *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_env(), cwd=REPO)
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        line = self.proc.stdout.readline() if ready else ""
        assert line.startswith("hub serving at http://127.0.0.1:"), line
        self.url = line.split()[-1]
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def store(self) -> HubStore:
        return HubStore.open(self.db_url, self.storage)


@pytest.fixture
def hub(tmp_path):
    h = Hub(tmp_path).start()
    yield h
    h.kill()


@pytest.fixture
def alice(hub):
    store = hub.store()
    try:
        return create_token(store.db, "alice", ["read", "publish", "yank"])[1]
    finally:
        store.db.close()


def _raw(port: int, head: bytes, body: bytes = b"", wait: float = 10) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(head + body)
        reply = b""
        while not reply.endswith(b"}}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply


def test_init_push_info_repush_yank(hub, alice, tmp_path):
    assert gymhub("env", "init", "word-ladder", "--owner", "alice", "--dir",
                  str(tmp_path)).returncode == 0
    pkg = tmp_path / "word-ladder"
    auth = {"GYMHUB_HUB_URL": hub.url, "GYMHUB_HUB_TOKEN": alice}
    out = gymhub("push", str(pkg), **auth)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "published: alice/word-ladder 0.1.0 sha256 " in out.stdout
    sha = out.stdout.split()[-1]
    info = gymhub("info", "alice/word-ladder", GYMHUB_HUB_URL=hub.url)
    assert info.returncode == 0 and sha in info.stdout and "alice/word-ladder-v0" in info.stdout
    wheel = next((pkg / "dist").glob("*.whl"))
    again = gymhub("push", str(wheel), **auth)
    assert again.returncode == 0 and "already published" in again.stdout and sha in again.stdout
    # The hub is a standard index: pip installs exactly the pushed file, offline, and a
    # fresh process finds alice/word-ladder-v0 through its entry point and plays it to 1.0.
    target = tmp_path / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--no-deps", "--index-url",
         f"{hub.url}/simple/", "--target", str(target), "gymhub-env-5-alice-word-ladder"],
        capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    play = subprocess.run(
        [sys.executable, "-c", "import gymhub\n"
         "from gymhub.envs import run_episode\n"
         "env = gymhub.make('alice/word-ladder-v0')\n"
         "print(run_episode(env, seed=0).score.value)\n"],
        capture_output=True, text=True, timeout=300,
        env={**_env(), "PYTHONPATH": f"{target}{os.pathsep}{REPO}"})
    assert play.returncode == 0 and play.stdout.strip() == "1.0", play.stdout + play.stderr
    found = gymhub("search", "ladder", "--hub", hub.url)
    assert found.stdout.startswith("alice/word-ladder")
    yank = gymhub("yank", "alice/word-ladder@0.1.0", "--reason", "broken verifier", **auth)
    assert yank.returncode == 0, yank.stderr
    info = gymhub("info", "alice/word-ladder", "--hub", hub.url)
    assert "YANKED: broken verifier" in info.stdout and "latest: none" in info.stdout


def test_init_takes_the_owner_from_the_token(hub, alice, tmp_path):
    out = gymhub("env", "init", "chess", "--dir", str(tmp_path), GYMHUB_HUB_URL=hub.url,
                 GYMHUB_HUB_TOKEN=alice)
    assert out.returncode == 0 and "alice/chess-v0" in out.stdout, out.stdout + out.stderr


def test_missing_hub_or_token_is_a_clear_error(tmp_path, hub):
    wheel = tmp_path / "gymhub_env_5_alice_wordle-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"x")
    out = gymhub("push", str(wheel))
    assert out.returncode == 2 and "--hub URL or set GYMHUB_HUB_URL" in out.stderr
    out = gymhub("push", str(wheel), "--hub", hub.url)
    assert out.returncode == 2 and "GYMHUB_HUB_TOKEN" in out.stderr
    bad = gymhub("push", str(wheel), "--hub", hub.url, GYMHUB_HUB_TOKEN="ghub_nope")
    assert bad.returncode == 2 and "not a gymhub hub token" in bad.stderr


def test_an_oversized_upload_is_refused_before_its_body(hub, alice):
    head = (f"POST /api/v1/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {alice}\r\n"
            "X-Filename: gymhub_env_5_alice_wordle-0.1.0-py3-none-any.whl\r\n"
            f"Content-Length: {100 << 20}\r\n\r\n").encode()
    start = time.monotonic()
    reply = _raw(hub.port, head)  # not one body byte is sent: the answer cannot wait for it
    assert reply.startswith(b"HTTP/1.1 413") and b"payload_too_large" in reply
    assert time.monotonic() - start < 10


def test_a_hub_killed_mid_upload_shows_nothing_and_the_push_succeeds_after(
        hub, alice, tmp_path):
    from tests.hub.conftest import WheelSpec

    filename, data = WheelSpec().build()
    head = (f"POST /api/v1/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {alice}\r\n"
            f"X-Filename: {filename}\r\nContent-Length: {len(data)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", hub.port), timeout=10) as s:
        s.sendall(head + data[: len(data) // 2])
        time.sleep(0.5)
        hub.kill()
    store = hub.store()
    try:
        with pytest.raises(PackageNotFound):
            store.list_versions("alice", "wordle")
    finally:
        store.db.close()
    hub.start()
    wheel = tmp_path / filename
    wheel.write_bytes(data)
    out = gymhub("push", str(wheel), GYMHUB_HUB_URL=hub.url, GYMHUB_HUB_TOKEN=alice)
    assert out.returncode == 0 and out.stdout.startswith("published: alice/wordle 0.1.0"), \
        out.stdout + out.stderr


def test_serve_signs_with_the_key_it_is_given_and_keeps_it_across_restarts(tmp_path):
    import httpx

    from gymhub.hub.signing import HubKey

    path = tmp_path / "keys" / "hub.pem"
    first = Hub(tmp_path).start(1, "--key", str(path))
    try:
        served = httpx.get(f"{first.url}/.well-known/gymhub-hub-key").json()
    finally:
        first.kill()
    assert path.exists() and (path.stat().st_mode & 0o077) == 0  # private to its owner
    assert served == HubKey.load_or_create(path).public_json()
    again = Hub(tmp_path).start(1, "--key", str(path))
    try:
        assert httpx.get(f"{again.url}/.well-known/gymhub-hub-key").json() == served
    finally:
        again.kill()
