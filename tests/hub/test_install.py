"""``gymhub install``: by digest from one hub, verified, locked; and the attacks on it.

The hub runs in this process (uvicorn on a loopback port, in a thread) so each test can
stand in for the server-side check: a test router serves the hub key and signed
attestations per the signing contract, and can tamper with them. ``gymhub install``
itself runs as a real subprocess with pip, offline, into a ``--target`` directory.
"""

import base64
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from fastapi import APIRouter, Response

from gymhub.hub.archive import validate_wheel
from gymhub.hub.build import build_wheel
from gymhub.hub.index import index_router
from gymhub.hub.scaffold import init_env
from gymhub.hub.service import create_hub_app
from gymhub.hub.signing import canonical_bytes, key_id
from gymhub.hub.store import HubStore
from gymhub.hub.tokens import create_token
from tests.hub.test_push import REPO, _env

DIST = "gymhub-env-5-alice-word-ladder"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """The scaffold built at 0.1.0, 0.2.0 and 9.9.9 (the attacker's)."""
    root = tmp_path_factory.mktemp("wheels")
    pkg = init_env("word-ladder", owner="alice", parent=root)
    pyproject = pkg / "pyproject.toml"
    text = pyproject.read_text()
    out = {}
    for v in ("0.1.0", "0.2.0", "9.9.9"):
        pyproject.write_text(text.replace('version = "0.1.0"', f'version = "{v}"'))
        out[v] = build_wheel(pkg, out_dir=root / v)
    return out


class Signer:
    """The server-side check, stood in for per the contract (and tamperable)."""

    def __init__(self, store: HubStore) -> None:
        self.store = store
        self.key = Ed25519PrivateKey.generate()
        self.status: dict[str, str] = {}  # version -> passed|failed; absent: never checked
        self.tamper: str | None = None  # "signature" | "statement"
        self.checked_at = "2026-12-01T00:00:00Z"

    def raw(self) -> bytes:
        return self.key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def router(self) -> APIRouter:
        r = APIRouter()

        @r.get("/.well-known/gymhub-hub-key")
        def hub_key() -> dict[str, str]:
            return {"algorithm": "ed25519", "key_id": key_id(self.raw()),
                    "public_key": base64.b64encode(self.raw()).decode()}

        @r.get("/api/v1/packages/{owner}/{name}/{version}/attestation")
        def attestation(owner: str, name: str, version: str) -> Any:
            if version not in self.status:
                return Response(status_code=404)
            v = next(i for i in self.store.list_versions(owner, name) if i.version == version)
            details = {"gold": 1.0}
            st = {"type": "gymhub.check/v1", "owner": owner, "name": v.name,
                  "version": version, "filename": v.filename, "sha256": v.sha256,
                  "status": self.status[version], "checked_at": self.checked_at,
                  "details_sha256": hashlib.sha256(canonical_bytes(details)).hexdigest()}
            sig = self.key.sign(canonical_bytes(st))
            if self.tamper == "signature":
                sig = bytes([sig[0] ^ 1]) + sig[1:]
            if self.tamper == "statement":
                st = {**st, "sha256": "0" * 64}
                sig = self.key.sign(canonical_bytes(st))
            return {"statement": st, "signature": base64.b64encode(sig).decode(),
                    "key_id": key_id(self.raw()), "details": details}

        return r


def _serve(app: Any) -> tuple[uvicorn.Server, threading.Thread, socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="error"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    return server, thread, sock


class InProcessHub:
    def __init__(self, root: Path, wheels: dict[str, Path]) -> None:
        self.store = HubStore.open(f"sqlite:///{root / 'hub.db'}", root / "files")
        create_token(self.store.db, "alice", ["read"])
        self.signer = Signer(self.store)
        self.wheels = wheels
        self.before: list[APIRouter] = []
        self.running: tuple[uvicorn.Server, threading.Thread, socket.socket] | None = None
        self.url = ""

    def publish(self, *versions: str) -> None:
        for v in versions:
            data = self.wheels[v].read_bytes()
            info = validate_wheel(data, owner="alice", filename=self.wheels[v].name)
            self.store.publish("alice", info.describe(), data)

    def start(self) -> "InProcessHub":
        app = create_hub_app(self.store, extra_routers=[
            *self.before, index_router(self.store), self.signer.router()])
        self.running = _serve(app)
        self.url = f"http://127.0.0.1:{self.running[2].getsockname()[1]}"
        return self

    def stop(self) -> None:
        if self.running is not None:
            server, thread, sock = self.running
            server.should_exit = True
            thread.join(30)
            sock.close()


@pytest.fixture
def hub(tmp_path, wheels):
    h = InProcessHub(tmp_path, wheels)
    yield h
    h.stop()
    h.store.db.close()


@pytest.fixture
def spec_factory():
    """The scaffold's own name, in a wheel that also carries a sitecustomize.py."""
    from tests.hub.conftest import WheelSpec

    def build() -> tuple[str, bytes]:
        spec = WheelSpec(name="word-ladder")
        spec.entry_points = ("[gymhub.envs]\nalice/word-ladder-v0 = "
                             f"{spec.module}.env:WordleEnv\n")
        spec.extra = [("sitecustomize.py", b"import os\nos.system('echo owned')\n")]
        return spec.build()

    return build


def install(hub: InProcessHub, tmp_path: Path, *args: str, **env: str):
    cmd = [sys.executable, "-m", "gymhub.cli", "install", *args, "--target",
           str(tmp_path / "site"), "--lock", str(tmp_path / "gymhub.lock")]
    if args and not args[0].startswith("-"):
        cmd += ["--hub", hub.url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=_env(**env))


def installed(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "site").glob("*.dist-info"))


def lock(tmp_path: Path) -> dict[str, Any]:
    return dict(json.loads((tmp_path / "gymhub.lock").read_text()))


def test_latest_skips_yanked_installs_verified_and_locks(hub, tmp_path):
    hub.publish("0.1.0", "0.2.0")
    hub.store.yank("alice", "word-ladder", "0.2.0", "broken verifier")
    hub.signer.status.update({"0.1.0": "passed", "0.2.0": "passed"})
    out = install(hub.start(), tmp_path, "alice/word-ladder")
    assert out.returncode == 0, out.stderr
    assert "trust on first use" in out.stderr
    assert installed(tmp_path) == ["gymhub_env_5_alice_word_ladder-0.1.0.dist-info"]
    data = lock(tmp_path)
    kid = key_id(hub.signer.raw())
    assert data["hubs"][hub.url]["key_id"] == kid
    entry = data["packages"]["alice/word-ladder"]
    v = hub.store.list_versions("alice", "word-ladder")[1]
    assert entry == {**entry, "hub": hub.url, "key_id": kid, "owner": "alice",
                     "name": "word-ladder", "version": "0.1.0", "sha256": v.sha256,
                     "filename": v.filename, "env_ids": ["alice/word-ladder-v0"],
                     "trusted": False, "check": "passed"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", entry["installed_at"])
    # The installed file plays, in a fresh process, and serves.
    play = subprocess.run(
        [sys.executable, "-c", "import gymhub\nfrom gymhub.envs import run_episode\n"
         "print(run_episode(gymhub.make('alice/word-ladder-v0'), seed=0).score.value)\n"],
        capture_output=True, text=True, timeout=300,
        env={**_env(), "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPO}"})
    assert play.stdout.strip() == "1.0", play.stdout + play.stderr
    _serves(tmp_path)


def _serves(tmp_path: Path) -> None:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gymhub.cli", "serve", "alice/word-ladder-v0", "--port",
         str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
        env={**_env(), "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPO}"})
    try:
        deadline, body = time.monotonic() + 60, ""
        while time.monotonic() < deadline and "alice/word-ladder-v0" not in body:
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/v1/envs", timeout=2).text
            except httpx.HTTPError:
                time.sleep(0.2)
        assert "alice/word-ladder-v0" in body
    finally:
        proc.kill()
        proc.wait(30)


def test_exact_pin_may_take_a_yanked_version_with_a_warning(hub, tmp_path):
    hub.publish("0.1.0", "0.2.0")
    hub.store.yank("alice", "word-ladder", "0.2.0", "broken verifier")
    hub.signer.status["0.2.0"] = "passed"
    out = install(hub.start(), tmp_path, "alice/word-ladder@0.2.0")
    assert out.returncode == 0, out.stderr
    assert "is yanked: broken verifier" in out.stderr
    assert installed(tmp_path) == ["gymhub_env_5_alice_word_ladder-0.2.0.dist-info"]


def test_unknown_name_suggests_and_never_resolves(hub, tmp_path):
    hub.publish("0.1.0")
    hub.signer.status["0.1.0"] = "passed"
    out = install(hub.start(), tmp_path, "alice/word-ladders")
    assert out.returncode == 2 and "alice/word-ladder" in out.stderr, out.stderr
    assert "did you mean" in out.stderr.lower() and not (tmp_path / "site").exists()


@pytest.mark.parametrize("tamper,error", [("signature", "does not verify"),
                                          ("statement", "is about other sha256")])
def test_tampered_attestation_is_refused_even_with_trust(hub, tmp_path, tamper, error):
    hub.publish("0.1.0")
    hub.signer.status["0.1.0"] = "passed"
    hub.signer.tamper = tamper
    out = install(hub.start(), tmp_path, "alice/word-ladder", "--trust")
    assert out.returncode == 2 and error in out.stderr, out.stderr
    assert not (tmp_path / "site").exists()


def test_a_new_hub_key_is_refused_after_pinning(hub, tmp_path):
    hub.publish("0.1.0")
    hub.signer.status["0.1.0"] = "passed"
    assert install(hub.start(), tmp_path, "alice/word-ladder").returncode == 0
    hub.signer.key = Ed25519PrivateKey.generate()
    out = install(hub, tmp_path, "alice/word-ladder")
    assert out.returncode == 2 and "pinned" in out.stderr and "--accept-new-key" in out.stderr
    # --trust answers "install this unchecked package", not "believe this new key".
    out = install(hub, tmp_path, "alice/word-ladder", "--trust")
    assert out.returncode == 2 and "pinned" in out.stderr, out.stderr
    ok = install(hub, tmp_path, "alice/word-ladder", "--accept-new-key")
    assert ok.returncode == 0 and "re-pinned" in ok.stderr, ok.stderr
    assert lock(tmp_path)["hubs"][hub.url]["key_id"] == key_id(hub.signer.raw())


def test_a_replayed_older_attestation_cannot_hide_a_newer_failed_check(hub, tmp_path):
    hub.publish("0.1.0")
    hub.signer.status["0.1.0"] = "passed"
    assert install(hub.start(), tmp_path, "alice/word-ladder").returncode == 0
    # The hub re-checks the same bytes and they fail now: refused, and remembered.
    hub.signer.status["0.1.0"], hub.signer.checked_at = "failed", "2026-12-03T00:00:00Z"
    out = install(hub, tmp_path, "alice/word-ladder")
    assert out.returncode == 2 and "failed its check" in out.stderr, out.stderr
    # A mirror (or a compromised hub) replays the older, validly signed "passed".
    hub.signer.status["0.1.0"], hub.signer.checked_at = "passed", "2026-12-01T00:00:00Z"
    out = install(hub, tmp_path, "alice/word-ladder")
    assert out.returncode == 2 and "replayed attestation" in out.stderr, out.stderr
    # A newer genuine re-check that passes is accepted again.
    hub.signer.checked_at = "2026-12-04T00:00:00Z"
    assert install(hub, tmp_path, "alice/word-ladder").returncode == 0


def test_a_hub_serving_a_wheel_outside_its_namespace_is_refused_by_the_client(
        hub, tmp_path, spec_factory):
    """A compromised hub stores and signs a wheel that an honest hub refuses at push."""
    import dataclasses

    filename, data = spec_factory()
    honest = validate_wheel(hub.wheels["0.1.0"].read_bytes(), owner="alice",
                            filename=hub.wheels["0.1.0"].name)
    assert filename == honest.filename
    desc = dataclasses.replace(honest.describe(), sha256=hashlib.sha256(data).hexdigest(),
                               size=len(data))
    hub.store.publish("alice", desc, data)  # straight into storage: no archive check
    hub.signer.status["0.1.0"] = "passed"
    out = install(hub.start(), tmp_path, "alice/word-ladder")
    assert out.returncode == 2 and "sitecustomize.py" in out.stderr, out.stderr
    assert "may install only its own package" in out.stderr
    assert not (tmp_path / "site").exists() and not (tmp_path / "gymhub.lock").exists()


@pytest.mark.parametrize("status", ["failed", None])
def test_failed_or_unchecked_needs_trust_then_the_lock_remembers(hub, tmp_path, status):
    hub.publish("0.1.0")
    if status:
        hub.signer.status["0.1.0"] = status
    out = install(hub.start(), tmp_path, "alice/word-ladder")
    assert out.returncode == 2 and "--trust" in out.stderr, out.stderr
    assert not (tmp_path / "site").exists()
    out = install(hub, tmp_path, "alice/word-ladder", "--trust")
    assert out.returncode == 0, out.stderr
    entry = lock(tmp_path)["packages"]["alice/word-ladder"]
    assert entry["trusted"] is True and entry["check"] == (status or "unchecked")
    # From the lock, without --trust: the user already trusted these exact bytes.
    again = install(hub, tmp_path)
    assert again.returncode == 0, again.stderr
    assert installed(tmp_path) == ["gymhub_env_5_alice_word_ladder-0.1.0.dist-info"]


def test_other_bytes_than_the_digest_are_refused(hub, tmp_path, wheels):
    hub.publish("0.1.0")
    hub.signer.status["0.1.0"] = "passed"
    evil = APIRouter()

    @evil.get("/files/{sha256}/{filename}")
    def files(sha256: str, filename: str) -> Response:
        return Response(wheels["9.9.9"].read_bytes(), media_type="application/octet-stream")

    hub.before.append(evil)
    out = install(hub.start(), tmp_path, "alice/word-ladder")
    assert out.returncode == 2 and "hashes to" in out.stderr, out.stderr
    assert not (tmp_path / "site").exists() and not (tmp_path / "gymhub.lock").exists()


def test_a_higher_version_on_another_index_never_wins(hub, tmp_path, wheels):
    hub.publish("0.1.0")
    hub.signer.status["0.1.0"] = "passed"
    evil = wheels["9.9.9"]
    hits: list[str] = []

    class Index(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = (evil.read_bytes() if self.path.endswith(".whl") else
                    f'<a href="/{evil.name}">{evil.name}</a>'.encode())
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    index = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=index.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{index.server_address[1]}/simple/"
    try:
        out = install(hub.start(), tmp_path, "alice/word-ladder", PIP_INDEX_URL=url,
                      PIP_EXTRA_INDEX_URL=url, PIP_FIND_LINKS=url)
    finally:
        index.shutdown()
        index.server_close()
    assert out.returncode == 0, out.stderr
    assert installed(tmp_path) == ["gymhub_env_5_alice_word_ladder-0.1.0.dist-info"]
    assert hits == []


def test_env_digests_come_from_the_lock_else_the_installed_record(tmp_path, monkeypatch):
    from gymhub.hub.lock import Lock, env_digests

    lk = Lock(tmp_path / "gymhub.lock", {})
    lk.record({"hub": "http://h", "key_id": "k", "owner": "alice", "name": "word-ladder",
               "version": "0.1.0", "sha256": "a" * 64, "filename": "f.whl",
               "env_ids": ["alice/word-ladder-v0"], "trusted": True, "check": "failed"})
    lk.save()
    got = env_digests(["wordle-v0", "alice/word-ladder-v0", "bob/chess-v0"],
                      tmp_path / "gymhub.lock")
    assert set(got) == {"alice/word-ladder-v0", "bob/chess-v0"}
    assert got["alice/word-ladder-v0"] == {"source": "lock", "hub": "http://h", "key_id": "k",
                                           "version": "0.1.0", "sha256": "a" * 64,
                                           "filename": "f.whl", "trusted": True,
                                           "check": "failed"}
    assert got["bob/chess-v0"] == {"source": "unknown"}
    # No lock: the installed distribution's RECORD names its bytes.
    site = tmp_path / "site"
    di = site / "gymhub_env_3_bob_chess-1.0.dist-info"
    di.mkdir(parents=True)
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: gymhub-env-3-bob-chess\n"
                                 "Version: 1.0\n")
    (di / "RECORD").write_text("x.py,sha256=abc,1\n")
    monkeypatch.syspath_prepend(str(site))
    got = env_digests(["bob/chess-v0"], tmp_path / "none.lock")
    assert got == {"bob/chess-v0": {"source": "installed", "version": "1.0", "record_sha256":
                                    hashlib.sha256(b"x.py,sha256=abc,1\n").hexdigest()}}


def test_a_version_still_queued_for_its_check_is_refused_saying_so(hub, tmp_path):
    from gymhub.hub.check_queue import enqueue

    hub.publish("0.1.0")
    assert enqueue(hub.store.db, "alice", "word-ladder", "0.1.0")
    out = install(hub.start(), tmp_path, "alice/word-ladder")
    assert out.returncode == 2 and "waiting for the hub's check (queued" in out.stderr, out.stderr
    assert "--trust" in out.stderr and not (tmp_path / "site").exists()
