"""The hub's HTTP API over a real store (SQLite and PostgreSQL): routes, auth, attacks."""

import threading
from datetime import timedelta

import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient

from gymhub.errors import LookalikeName, TokenOwnerError, VersionConflict
from gymhub.hub.audit import audit
from gymhub.hub.client import HubClient, hub_error_from_code
from gymhub.hub.service import create_hub_app
from gymhub.hub.tokens import create_token, revoke_token


@pytest.fixture
def hub(store):
    app = create_hub_app(store, max_upload_bytes=200_000)
    with TestClient(app) as client:
        yield client
    report = audit(store)  # whatever a test threw at it, storage and database agree
    assert report.ok, report.summary()


def _nothing_stored(store):
    assert store.search("") == []
    report = audit(store)
    assert report.blobs == 0 and report.versions == 0, report.summary()


@pytest.fixture
def tokens(store):
    out = {}
    out["alice"] = create_token(store.db, "alice", ["read", "publish", "yank"])[1]
    out["bob"] = create_token(store.db, "bob")[1]
    out["alice_ro"] = create_token(store.db, "alice", ["read"])[1]
    info, out["alice_revoked"] = create_token(store.db, "alice")
    revoke_token(store.db, info.id)
    clock = store.db.clock
    out["alice_expired"] = create_token(store.db, "alice", expires_in=timedelta(seconds=1))[1]
    store.db.clock = lambda: clock() + timedelta(hours=1)  # type: ignore[method-assign]
    try:
        yield out
    finally:
        store.db.clock = clock  # type: ignore[method-assign]


def _auth(token):
    return {"Authorization": f"Bearer {token}"} if token else {}


def _upload(hub, token, filename, data, **headers):
    return hub.post("/api/v1/upload", content=data,
                    headers={"X-Filename": filename, **_auth(token), **headers})


def _other_files(spec):
    return {f"{spec.module}/__init__.py": b"# other bytes\n",
            f"{spec.module}/env.py": b"class WordleEnv:\n    pass\n"}


def _error(resp, status, code):
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] == code, resp.text
    assert resp.json()["error"]["message"]


def test_upload_info_search_yank_whoami(hub, tokens, spec):
    spec.version = "0.1.0"
    filename, data = spec.build()
    first = _upload(hub, tokens["alice"], filename, data)
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["created"] and body["id"] == "alice/wordle" and body["version"] == "0.1.0"
    assert body["env_ids"] == ["alice/wordle-v0"] and len(body["sha256"]) == 64
    again = hub.post(f"/api/v1/upload?filename={filename}", content=data,
                     headers=_auth(tokens["alice"]))
    assert again.status_code == 200 and not again.json()["created"]
    spec.version = "0.2.0"
    assert _upload(hub, tokens["alice"], *spec.build()).status_code == 201
    page = hub.get("/api/v1/packages/alice/wordle").json()
    assert page["description"] == "A word game" and page["latest"] == "0.2.0"
    assert [v["version"] for v in page["versions"]] == ["0.2.0", "0.1.0"]
    assert page["versions"][1]["filename"] == filename and page["versions"][1]["check"] is None
    assert [r["id"] for r in hub.get("/api/v1/search", params={"q": "word"}).json()[
        "results"]] == ["alice/wordle"]
    yank = hub.post("/api/v1/yank", headers=_auth(tokens["alice"]), json={
        "owner": "alice", "name": "wordle", "version": "0.2.0", "reason": "broken verifier"})
    assert yank.status_code == 200 and yank.json()["yanked"]
    page = hub.get("/api/v1/packages/alice/wordle").json()
    assert page["latest"] == "0.1.0" and page["versions"][0]["yank_reason"] == "broken verifier"
    me = hub.get("/api/v1/whoami", headers=_auth(tokens["alice_ro"])).json()
    assert me["owner"] == "alice" and me["scopes"] == ["read"]
    assert hub.get("/healthz").json() == {"status": "ok"}


@pytest.mark.parametrize(("who", "status", "code"), [
    (None, 401, "token_invalid"), ("ghub_nonsense", 401, "token_invalid"),
    ("bob", 403, "token_owner"), ("alice_ro", 403, "token_scope"),
    ("alice_revoked", 401, "token_revoked"), ("alice_expired", 401, "token_expired")])
def test_unauthorised_uploads_are_refused_and_store_nothing(hub, store, tokens, spec, who,
                                                            status, code):
    _error(_upload(hub, tokens.get(who, who), *spec.build()), status, code)
    _nothing_stored(store)


def test_yank_needs_the_yank_scope_of_the_owner(hub, tokens, spec):
    _upload(hub, tokens["alice"], *spec.build())
    body = {"owner": "alice", "name": "wordle", "version": "0.1.0", "reason": "x"}
    _error(hub.post("/api/v1/yank", json=body, headers=_auth(tokens["bob"])), 403, "token_owner")
    _error(hub.post("/api/v1/yank", json=body, headers=_auth(tokens["alice_ro"])), 403,
           "token_scope")
    _error(hub.post("/api/v1/yank", json={**body, "version": "9"},
                    headers=_auth(tokens["alice"])), 404, "version_not_found")
    _error(hub.post("/api/v1/yank", json={"owner": "alice"}, headers=_auth(tokens["alice"])),
           422, "invalid_request")


def test_same_version_other_bytes_is_a_conflict(hub, store, tokens, spec):
    filename, data = spec.build()
    assert _upload(hub, tokens["alice"], filename, data).status_code == 201
    spec.files = _other_files(spec)
    filename2, other = spec.build()
    assert filename2 == filename and other != data
    _error(_upload(hub, tokens["alice"], filename, other), 409, "version_conflict")
    assert [v.sha256 for v in store.list_versions("alice", "wordle")] == [
        _upload(hub, tokens["alice"], filename, data).json()["sha256"]]


def test_too_large_uploads_are_refused_on_their_declared_length(hub, store, tokens, spec):
    filename, _ = spec.build()
    _error(_upload(hub, tokens["alice"], filename, b"x" * 200_001), 413, "payload_too_large")
    chunks = iter([b"x" * 150_000, b"x" * 150_000])  # no Content-Length: chunked
    _error(hub.post("/api/v1/upload", content=chunks,
                    headers={"X-Filename": filename, **_auth(tokens["alice"])}),
           413, "payload_too_large")
    _nothing_stored(store)


@pytest.mark.parametrize(("mutate", "status", "code"), [
    ({"owner": "bob"}, 403, "token_owner"),  # the file name claims bob's namespace
    ({"entry_points": "[gymhub.envs]\nbob/wordle-v0 = alice_wordle.env:WordleEnv\n"},
     422, "namespace_violation"),
    ({"filename": "wordle-0.1.0-py3-none-any.whl"}, 400, "invalid_name"),
])
def test_wheels_outside_the_namespace_are_refused(hub, store, tokens, spec, mutate, status,
                                                   code):
    for key, value in mutate.items():
        setattr(spec, key, value)
    _error(_upload(hub, tokens["alice"], *spec.build()), status, code)
    _nothing_stored(store)


def test_a_corrupt_archive_is_refused(hub, store, tokens, spec):
    filename, data = spec.build()
    _error(_upload(hub, tokens["alice"], filename, data[: len(data) // 2]), 422,
           "corrupt_archive")
    _error(_upload(hub, tokens["alice"], "", data), 422, "invalid_wheel_filename")
    _nothing_stored(store)


def test_a_lookalike_package_is_a_conflict(hub, store, tokens, spec):
    spec.name = "world"
    _upload(hub, tokens["alice"], *spec.build())
    spec.name = "wor1d"
    _error(_upload(hub, tokens["alice"], *spec.build()), 409, "lookalike_name")
    assert [p.name for p in store.search("")] == ["world"]


def test_concurrent_uploads_of_one_version_create_it_once(store, tokens, spec):
    app = create_hub_app(store)
    filename, a = spec.build()
    spec.files = _other_files(spec)
    _, b = spec.build()
    results: list[int] = []
    barrier = threading.Barrier(2)

    def push(data):
        with TestClient(app) as client:
            barrier.wait()
            results.append(_upload(client, tokens["alice"], filename, data).status_code)

    threads = [threading.Thread(target=push, args=(d,)) for d in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [201, 409]
    assert len(store.list_versions("alice", "wordle")) == 1


def test_the_client_raises_the_hub_errors(store, tokens, spec):
    client = HubClient("http://hub", tokens["bob"])
    client._http = TestClient(create_hub_app(store), base_url="http://hub",
                              headers=_auth(tokens["bob"]))
    with pytest.raises(TokenOwnerError):
        client.upload(spec.build()[1], spec.build()[0])
    assert client.whoami()["owner"] == "bob"
    assert isinstance(hub_error_from_code(409, "version_conflict", "m"), VersionConflict)
    err = hub_error_from_code(409, "lookalike_name", "too close")
    assert isinstance(err, LookalikeName) and str(err) == "too close"
    assert hub_error_from_code(418, "teapot", "m").code == "teapot"


def test_extra_routers_plug_in_and_unknown_routes_are_json(store):
    router = APIRouter()

    @router.get("/simple/")
    def simple() -> dict[str, str]:
        return {"index": "here"}

    with TestClient(create_hub_app(store, extra_routers=[router])) as client:
        assert client.get("/simple/").json() == {"index": "here"}
        _error(client.get("/nope"), 404, "not_found")
        _error(client.get("/api/v1/packages/alice/nothing"), 404, "package_not_found")
