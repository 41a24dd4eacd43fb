"""The hub as a PEP 503/691 package index: page shapes, negotiation, files, and real pip.

The shape tests run on both database backends over a store holding two real (validated)
wheels of one package, the older one yanked. The last tests start a real server on a
loopback port and install the real scaffold wheel with ``pip --index-url``.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin

import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gymhub.hub.archive import validate_wheel
from gymhub.hub.build import build_wheel
from gymhub.hub.index import SIMPLE_HTML, SIMPLE_JSON, index_router, negotiate
from gymhub.hub.store import HubStore
from gymhub.hub.tokens import create_token

PROJECT = "gymhub-env-5-alice-wordle"
REASON = 'broken <script>alert("x")</script> & more'


def publish(store: HubStore, spec, version: str, meta_extra: str = "") -> tuple[str, bytes]:
    spec.version = version
    spec.metadata = (f"Metadata-Version: 2.4\nName: {spec.dist}\nVersion: {version}\n"
                     f"Summary: A word game\nRequires-Python: >=3.11\n{meta_extra}\n"
                     "# Wordle\n")
    filename, data = spec.build()
    info = validate_wheel(data, owner=spec.owner, filename=filename)
    store.publish(spec.owner, info.describe(), data)
    return filename, data


@pytest.fixture
def hub(store: HubStore, zt) -> dict[str, tuple[str, bytes]]:
    """Two versions of alice/wordle, 0.1.0 yanked with a reason full of markup."""
    create_token(store.db, "alice")
    spec = zt.WheelSpec()
    old = publish(store, spec, "0.1.0")
    new = publish(store, spec, "0.2.0")
    store.yank("alice", "wordle", "0.1.0", REASON)
    return {"0.1.0": old, "0.2.0": new}


@pytest.fixture
def client(store: HubStore) -> TestClient:
    app = FastAPI()
    app.include_router(index_router(store))
    return TestClient(app)


def metadata_of(data: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return zf.read(name)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------- negotiation
@pytest.mark.parametrize(("accept", "fmt", "want"), [
    (None, None, "text/html"),
    ("", None, "text/html"),
    ("*/*", None, "text/html"),
    (SIMPLE_JSON, None, SIMPLE_JSON),
    ("application/vnd.pypi.simple.latest+json", None, SIMPLE_JSON),
    (f"{SIMPLE_HTML};q=0.2, {SIMPLE_JSON};q=0.9, text/html;q=0.01", None, SIMPLE_JSON),
    (f"{SIMPLE_JSON};q=0.1, {SIMPLE_HTML}", None, SIMPLE_HTML),
    ("image/png", None, None),
    (f"{SIMPLE_JSON};q=0", None, None),
    ("text/html", SIMPLE_JSON, SIMPLE_JSON),
    (SIMPLE_JSON, "html", "text/html"),
    (None, "application/x-unknown", None),
])
def test_negotiate(accept, fmt, want):
    assert negotiate(accept, fmt) == want


# ------------------------------------------------------------------------- /simple/
def test_root_lists_every_project_in_html_and_json(hub, client):
    html = client.get("/simple/")
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    assert html.headers["vary"] == "Accept"
    assert f'<a href="{PROJECT}/">{PROJECT}</a>' in html.text
    assert '<meta name="pypi:repository-version" content="1.1">' in html.text
    js = client.get("/simple/", headers={"Accept": SIMPLE_JSON})
    assert js.headers["content-type"] == SIMPLE_JSON and js.headers["vary"] == "Accept"
    assert js.json() == {"meta": {"api-version": "1.1"}, "projects": [{"name": PROJECT}]}
    assert client.get("/simple/?format=json").json()["projects"] == [{"name": PROJECT}]
    assert client.get("/simple/", headers={"Accept": "image/png"}).status_code == 406


# ------------------------------------------------------------------------- project page
def test_project_json(hub, client):
    r = client.get(f"/simple/{PROJECT}/", headers={"Accept": SIMPLE_JSON})
    assert r.status_code == 200 and r.headers["content-type"] == SIMPLE_JSON
    assert r.headers["vary"] == "Accept"
    body = r.json()
    assert body["meta"] == {"api-version": "1.1"} and body["name"] == PROJECT
    assert body["versions"] == ["0.1.0", "0.2.0"]
    by_version = dict(zip(body["versions"], body["files"], strict=True))
    for version, (filename, data) in hub.items():
        f = by_version[version]
        assert f["filename"] == filename
        assert urljoin(str(r.url), f["url"]) == f"http://testserver/files/{sha(data)}/{filename}"
        assert f["hashes"] == {"sha256": sha(data)} and f["size"] == len(data)
        assert f["requires-python"] == ">=3.11"
        assert f["core-metadata"] == f["dist-info-metadata"] == {
            "sha256": sha(metadata_of(data))}
        assert f["upload-time"].endswith("Z") and "T" in f["upload-time"]
    assert by_version["0.1.0"]["yanked"] == REASON
    assert by_version["0.2.0"]["yanked"] is False


def test_project_html_escapes_and_carries_every_attribute(hub, client):
    r = client.get(f"/simple/{PROJECT}/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert "<script>" not in page
    assert 'data-yanked="broken &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; more"' \
        in page
    assert page.count("data-yanked=") == 1  # 0.2.0 is not yanked
    assert page.count('data-requires-python="&gt;=3.11"') == 2
    for filename, data in hub.values():
        digest, meta = sha(data), sha(metadata_of(data))
        assert (f'href="/files/{digest}/{filename}#sha256={digest}"') in page
        assert f'data-core-metadata="sha256={meta}"' in page
        assert f'data-dist-info-metadata="sha256={meta}"' in page
        assert f">{filename}</a>" in page
    v1 = client.get(f"/simple/{PROJECT}/", headers={"Accept": SIMPLE_HTML})
    assert v1.headers["content-type"].startswith(SIMPLE_HTML) and v1.text == page


def test_non_normalised_names_redirect_to_the_normalised_url(hub, client):
    for spelling in ["GymHub_Env_5_Alice_Wordle", "gymhub.env.5.alice.wordle"]:
        r = client.get(f"/simple/{spelling}/?format=json", follow_redirects=False)
        assert r.status_code == 301
        assert r.headers["location"] == f"/simple/{PROJECT}/?format=json"
    followed = client.get("/simple/GymHub_Env_5_Alice_Wordle/",
                          headers={"Accept": SIMPLE_JSON})
    assert followed.json()["name"] == PROJECT


def test_unknown_projects_are_404_with_a_suggestion_and_no_redirect(hub, client):
    typo = "gymhub-env-5-alice-wordel"
    r = client.get(f"/simple/{typo}/", headers={"Accept": SIMPLE_JSON},
                   follow_redirects=False)
    assert r.status_code == 404 and "location" not in r.headers
    assert PROJECT in r.json()["detail"] and "Did you mean" in r.json()["detail"]
    r = client.get("/simple/numpy/", follow_redirects=False)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert "numpy" in r.text
    r = client.get("/simple/gymhub-env-5-alice-%3Cb%3E/")
    assert r.status_code == 404 and "<b>" not in r.text


# ------------------------------------------------------------------------- files
def test_metadata_file_is_the_wheels_metadata_with_the_advertised_hash(hub, client):
    body = client.get(f"/simple/{PROJECT}/?format=json").json()
    for f in body["files"]:
        r = client.get(f["url"] + ".metadata")
        assert r.status_code == 200
        data = next(d for fn, d in hub.values() if fn == f["filename"])
        assert r.content == metadata_of(data)
        assert sha(r.content) == f["core-metadata"]["sha256"]


def test_download_bytes_and_headers(hub, client):
    filename, data = hub["0.1.0"]  # yanked files stay downloadable (PEP 592)
    r = client.get(f"/files/{sha(data)}/{filename}")
    assert r.status_code == 200 and r.content == data
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["content-length"] == str(len(data))
    assert r.headers["etag"] == f'"{sha(data)}"'
    assert "immutable" in r.headers["cache-control"]
    again = client.get(f"/files/{sha(data)}/{filename}", headers={"If-None-Match": r.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


def test_files_404_unless_digest_and_filename_both_match(hub, client):
    (f1, d1), (f2, _) = hub["0.1.0"], hub["0.2.0"]
    assert client.get(f"/files/{sha(d1)}/{f2}").status_code == 404  # other version's name
    assert client.get(f"/files/{sha(d1)}/evil.whl").status_code == 404
    assert client.get(f"/files/{'0' * 64}/{f1}").status_code == 404
    assert client.get(f"/files/{sha(d1)}/{f1}.metadata.metadata").status_code == 404
    assert client.get(f"/files/not-a-digest/{f1}").status_code == 404


# ------------------------------------------------------------------------- real pip
def gymhub_cli(*args):
    return subprocess.run([sys.executable, "-m", "gymhub.cli", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """The scaffold, built through the CLI as in test_build.py; (package dir, wheel)."""
    root = tmp_path_factory.mktemp("built")
    init = gymhub_cli("env", "init", "word-ladder", "--owner", "alice", "--dir", str(root))
    assert init.returncode == 0, init.stderr
    path = root / "word-ladder"
    out = gymhub_cli("env", "build", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    return path, Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def server(tmp_path) -> Iterator[tuple[str, HubStore, list[str]]]:
    """A real uvicorn on a free loopback port serving only the index; (url, store, paths)."""
    store = HubStore.open(f"sqlite:///{tmp_path / 'hub.db'}", tmp_path / "blobs")
    create_token(store.db, "alice")
    app = FastAPI()
    app.include_router(index_router(store))
    seen: list[str] = []

    @app.middleware("http")
    async def record(request, call_next):
        seen.append(request.url.path)
        return await call_next(request)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started
    try:
        yield f"http://127.0.0.1:{port}", store, seen
    finally:
        srv.should_exit = True
        thread.join(10)
        sock.close()
        store.db.close()


def pip_install(url: str, requirement: str, target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--no-deps", "--no-cache-dir",
         "--disable-pip-version-check", "--index-url", f"{url}/simple/", "--target",
         str(target), requirement],
        capture_output=True, text=True, timeout=300)


def installed(target: Path) -> tuple[str, bytes]:
    (info,) = target.glob("*.dist-info")
    return info.name, (info / "METADATA").read_bytes()


def test_pip_installs_the_real_scaffold_from_the_index(built, server, tmp_path):
    url, store, seen = server
    path, wheel = built
    data = wheel.read_bytes()
    store.publish("alice", validate_wheel(wheel, owner="alice").describe(), data)

    r = pip_install(url, "gymhub-env-5-alice-word-ladder", tmp_path / "a")
    assert r.returncode == 0, r.stdout + r.stderr
    name, meta = installed(tmp_path / "a")
    assert name == "gymhub_env_5_alice_word_ladder-0.1.0.dist-info"
    assert meta == metadata_of(data)
    assert f"/files/{sha(data)}/{wheel.name}" in seen  # that exact file, by digest
    assert f"/files/{sha(data)}/{wheel.name}.metadata" in seen  # PEP 658: pip read it first

    # A 0.2.0, then yank 0.1.0: unpinned skips it, an exact pin still gets it (PEP 592).
    copy = tmp_path / "word-ladder"
    shutil.copytree(path, copy, ignore=shutil.ignore_patterns("dist"))
    toml = copy / "pyproject.toml"
    toml.write_text(toml.read_text().replace('version = "0.1.0"', 'version = "0.2.0"', 1))
    wheel2 = build_wheel(copy, out_dir=tmp_path / "dist2")
    data2 = wheel2.read_bytes()
    store.publish("alice", validate_wheel(wheel2, owner="alice").describe(), data2)
    store.yank("alice", "word-ladder", "0.1.0", "superseded")

    r = pip_install(url, "gymhub-env-5-alice-word-ladder", tmp_path / "b")
    assert r.returncode == 0, r.stdout + r.stderr
    assert installed(tmp_path / "b")[0] == "gymhub_env_5_alice_word_ladder-0.2.0.dist-info"
    r = pip_install(url, "gymhub-env-5-alice-word-ladder==0.1.0", tmp_path / "c")
    assert r.returncode == 0, r.stdout + r.stderr
    assert installed(tmp_path / "c") == (name, meta)
    assert "yanked" in (r.stdout + r.stderr).lower()  # pip warns, with the reason
    assert "superseded" in r.stdout + r.stderr

    r = pip_install(url, "gymhub-env-5-alice-word-ladde", tmp_path / "d")  # a typo
    assert r.returncode != 0 and not list((tmp_path / "d").glob("*.dist-info"))


def test_a_damaged_blob_keeps_its_listing_and_serves_nothing(hub, store, client):
    filename, data = hub["0.2.0"]
    store.blobs.path(sha(data)).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size
    r = client.get(f"/simple/{PROJECT}/?format=json")
    assert r.status_code == 200
    files = {f["filename"]: f for f in r.json()["files"]}
    # The hash was measured at publish, so the listing never reads a blob; what the damaged
    # blob would serve is refused at the read instead.
    assert files[filename]["core-metadata"]["sha256"] == sha(metadata_of(data))
    assert client.get(f"/files/{sha(data)}/{filename}.metadata").status_code == 404
    # The file itself is streamed as stored; every installer pins the listed sha256, which
    # the damaged bytes no longer have.
    served = client.get(f"/files/{sha(data)}/{filename}").content
    assert sha(served) != files[filename]["hashes"]["sha256"]


def test_listings_do_not_open_wheels(hub, store, client, monkeypatch):
    opened = []
    real = type(store).read_file
    monkeypatch.setattr(type(store), "read_file",
                        lambda self, info: opened.append(info.filename) or real(self, info))
    body = client.get(f"/simple/{PROJECT}/?format=json").json()
    assert body["files"] and all("core-metadata" in f for f in body["files"])
    assert client.get(f"/simple/{PROJECT}/").status_code == 200
    assert opened == []
