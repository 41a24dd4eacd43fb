"""What an anonymous request may cost: body caps on every route, rate limits, lengths,
quotas, headers, bounded search and suggestions (SQLite, and PostgreSQL when configured).
"""

from __future__ import annotations

import hashlib
import re
import statistics
import threading
import time

import pytest
import sqlalchemy as sa
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from gymhub.errors import ConfigError, LookalikeName, QuotaExceeded
from gymhub.hub import service
from gymhub.hub.audit import audit
from gymhub.hub.index import index_router
from gymhub.hub.limits import RateLimit, TokenBuckets
from gymhub.hub.pages import pages_router
from gymhub.hub.service import SECURITY_HEADERS, create_hub_app
from gymhub.hub.signing import HubKey
from gymhub.hub.tokens import create_token
from tests.hub.test_markdown import assert_safe, hostile_readme

UPLOAD_CAP = 100_000
BODY_CAP = 4_096
SAMPLE = {"owner": "alice", "name": "wordle", "version": "1.0.0", "project": "x",
          "sha256": "a" * 64, "filename": "x.whl"}


def full_app(store, **kw):
    return create_hub_app(store, extra_routers=[index_router(store), pages_router(store)],
                          key=HubKey.generate(), max_upload_bytes=UPLOAD_CAP,
                          max_body_bytes=BODY_CAP, public_url="https://hub.example.org", **kw)


def _api_routes(routes):
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif (inner := getattr(route, "original_router", None)) is not None:
            yield from _api_routes(inner.routes)  # an included router (FastAPI >= 0.165)


def _routes():
    out = []
    for route in _api_routes(full_app(_NoStore()).routes):
        path = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: SAMPLE[m[1]], route.path)
        out += [(method, path) for method in sorted(route.methods - {"HEAD"})]
    return out


class _NoStore:
    """Enough of a store to build the app and list its routes."""

    db = None


def _error(resp, status, code):
    assert resp.status_code == status, resp.text
    assert resp.json()["error"]["code"] == code, resp.text


def _headers_present(resp):
    for name, value in SECURITY_HEADERS.items():
        assert resp.headers.get(name) == value, (name, resp.headers)


ROUTES = _routes()


def test_every_route_is_covered():
    paths = {p for _, p in ROUTES}
    assert {"/api/v1/upload", "/api/v1/yank", "/search", "/alice", "/alice/wordle",
            "/simple/", "/.well-known/gymhub-hub-key"} <= paths, paths


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_refuses_a_declared_body_over_its_cap(store, method, path):
    cap = UPLOAD_CAP if path == "/api/v1/upload" else BODY_CAP
    with TestClient(full_app(store)) as client:
        r = client.request(method, path, content=b"x" * (cap + 1),
                           headers={"X-Filename": "x.whl"})
    _error(r, 413, "payload_too_large")
    _headers_present(r)


@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if r[0] == "POST"])
def test_chunked_bodies_are_counted_while_they_stream(store, spec, method, path):
    token = create_token(store.db, "alice", ["publish", "yank"])[1]
    cap = UPLOAD_CAP if path == "/api/v1/upload" else BODY_CAP
    chunks = iter([b"x" * (cap // 2 + 1)] * 2)  # no Content-Length: chunked
    filename, _ = spec.build()
    with TestClient(full_app(store)) as client:
        r = client.request(method, path, content=chunks, headers={
            "X-Filename": filename, "Authorization": f"Bearer {token}",
            "Content-Type": "application/json"})
    _error(r, 413, "payload_too_large")
    assert audit(store).versions == 0 and not list(store.blobs.entries())


def test_an_upload_authenticates_before_it_reads_a_chunked_body(store, spec):
    read = []

    def chunks():
        read.append(1)
        yield b"x" * 10

    with TestClient(full_app(store)) as client:
        r = client.post("/api/v1/upload", content=chunks(),
                        headers={"X-Filename": spec.build()[0]})
    _error(r, 401, "token_invalid")


def test_the_upload_cap_is_the_archive_cap(store, spec, monkeypatch):
    seen = {}
    real = service.validate_wheel

    def spy(data, **kw):
        seen.update(kw)
        return real(data, **kw)

    monkeypatch.setattr(service, "validate_wheel", spy)
    token = create_token(store.db, "alice")[1]
    app = create_hub_app(store, max_upload_bytes=300 << 20)
    with TestClient(app) as client:
        filename, data = spec.build()
        r = client.post("/api/v1/upload", content=data,
                        headers={"X-Filename": filename, "Authorization": f"Bearer {token}"})
    assert r.status_code == 201, r.text
    assert seen["limits"].max_archive_bytes == 300 << 20


# ------------------------------------------------------------------------ rate limits
def test_rate_limit_parse():
    assert RateLimit.parse("off") is None and RateLimit.parse("0") is None
    assert RateLimit.parse("20/s") == RateLimit(20.0, 200)
    assert RateLimit.parse("60/m:5") == RateLimit(1.0, 5)
    assert RateLimit.parse("1/h") == RateLimit(1 / 3600, 10)
    for bad in ["20", "x/s", "20/d", "-1/s"]:
        with pytest.raises(ConfigError):
            RateLimit.parse(bad)


def test_token_buckets_refill_at_their_rate():
    now = [0.0]
    buckets = TokenBuckets(RateLimit(2.0, 3), clock=lambda: now[0], max_keys=2)
    assert [buckets.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("a") == pytest.approx(0.5)
    now[0] += 0.5
    assert buckets.take("a") == 0.0 and buckets.take("b") == 0.0
    buckets.take("c")  # "a" is forgotten (the least recently used of three keys)
    assert buckets.take("a") == 0.0


def test_429_with_retry_after_per_address_and_per_token(store):
    token = create_token(store.db, "alice", ["read"])[1]
    app = full_app(store, rate_limit=RateLimit(0.01, 3))
    one = TestClient(app, client=("10.0.0.1", 1))
    other = TestClient(app, client=("10.0.0.2", 1))
    assert [one.get("/api/v1/search?q=x").status_code for _ in range(3)] == [200] * 3
    r = one.get("/api/v1/search?q=x")
    _error(r, 429, "rate_limited")
    assert int(r.headers["Retry-After"]) >= 1
    _headers_present(r)
    assert one.get("/healthz").status_code == 200  # health checks are never limited
    # another address has its own bucket...
    auth = {"Authorization": f"Bearer {token}"}
    assert [other.get("/api/v1/whoami", headers=auth).status_code for _ in range(2)] == [200] * 2
    # ...but a token is limited wherever it comes from
    third = TestClient(app, client=("10.0.0.3", 1))
    assert third.get("/api/v1/whoami", headers=auth).status_code == 200
    _error(third.get("/api/v1/whoami", headers=auth), 429, "rate_limited")
    assert third.get("/api/v1/search?q=x").status_code == 200  # the address still had room


def test_rate_limits_are_off_unless_asked_for(store):
    with TestClient(full_app(store)) as client:
        assert {client.get("/api/v1/search?q=x").status_code for _ in range(50)} == {200}


# ------------------------------------------------------------------------ lengths
LONG = {"owner": "o" * 65, "name": "n" * 101, "version": "1." + "0" * 70}


@pytest.mark.parametrize("url", [
    f"/api/v1/packages/{LONG['owner']}/wordle", f"/api/v1/packages/alice/{LONG['name']}",
    f"/api/v1/packages/alice/wordle/{LONG['version']}/attestation",
    f"/alice/{LONG['name']}", f"/alice/wordle/{LONG['version']}", f"/{'o' * 65}/wordle",
    f"/simple/{'p' * 201}/", f"/files/{'a' * 65}/x.whl"])
def test_over_long_path_parameters_are_422_on_every_route(store, url):
    with TestClient(full_app(store)) as client:
        _error(client.get(url), 422, "invalid_request")


def test_over_long_names_in_bodies_and_uploads_are_422(store, spec):
    token = create_token(store.db, "alice", ["publish", "yank"])[1]
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(full_app(store)) as client:
        for field, value in LONG.items():
            body = {"owner": "alice", "name": "wordle", "version": "1.0", "reason": "r",
                    field: value}
            _error(client.post("/api/v1/yank", json=body, headers=auth), 422,
                   "invalid_request")
        spec.version = "1." + "0" * 70
        filename, data = spec.build()
        _error(client.post("/api/v1/upload", content=data,
                           headers={**auth, "X-Filename": filename}), 422, "invalid_request")
        _error(client.post("/api/v1/upload", content=b"x",
                           headers={**auth, "X-Filename": "a" * 300 + ".whl"}), 422,
               "invalid_request")
    assert audit(store).versions == 0 and not list(store.blobs.entries())


# ------------------------------------------------------------------------ quota, orphans
def test_the_owner_quota_is_checked_at_publish(store, make_wheel):
    create_token(store.db, "alice")
    create_token(store.db, "bob")
    store.owner_quota_bytes = 100
    store.publish("alice", *make_wheel(data=b"a" * 60))
    desc, data = make_wheel(version="2.0", data=b"b" * 60)
    with pytest.raises(QuotaExceeded, match="alice stores 60 bytes of 100"):
        store.publish("alice", desc, data)
    assert not store.blobs.exists(desc.sha256)  # refused before the blob was written
    store.publish("bob", *make_wheel(owner="bob", data=b"c" * 60))  # a quota per owner
    store.publish("alice", *make_wheel(data=b"a" * 60))  # the same bytes again: a no-op


def test_a_quota_refusal_over_http_is_413(store, spec):
    token = create_token(store.db, "alice")[1]
    store.owner_quota_bytes = 1000
    with TestClient(full_app(store)) as client:
        filename, data = spec.build()
        r = client.post("/api/v1/upload", content=data,
                        headers={"X-Filename": filename, "Authorization": f"Bearer {token}"})
    _error(r, 413, "quota_exceeded")
    assert not list(store.blobs.entries())


def test_a_refusal_inside_the_transaction_leaves_no_blob(store, make_wheel, monkeypatch):
    create_token(store.db, "alice")
    store.publish("alice", *make_wheel(name="world"))
    desc, data = make_wheel(name="wor1d")
    with pytest.raises(LookalikeName):
        store.publish("alice", desc, data)
    assert not store.blobs.exists(desc.sha256)
    # the quota checked again inside the transaction (another publish got in between)
    desc, data = make_wheel(name="chess")
    monkeypatch.setattr(type(store), "_check_quota", _fail_second_call())
    with pytest.raises(QuotaExceeded):
        store.publish("alice", desc, data)
    assert not store.blobs.exists(desc.sha256)
    assert audit(store).ok


def _fail_second_call():
    calls = []

    def check(self, session, owner, size):
        calls.append(1)
        if len(calls) > 1:
            raise QuotaExceeded("full by now")

    return check


def test_a_blob_shared_with_a_published_version_survives_a_refusal(store, make_wheel):
    create_token(store.db, "alice")
    store.publish("alice", *make_wheel(name="world"))
    same_bytes = b"shared"
    store.publish("alice", *make_wheel(name="chess", data=same_bytes))
    desc, data = make_wheel(name="wor1d", data=same_bytes)
    with pytest.raises(LookalikeName):
        store.publish("alice", desc, data)
    assert store.blobs.exists(desc.sha256)  # chess 1.0.0 still needs it
    assert audit(store).ok


# ------------------------------------------------------------------------ headers
def test_csp_and_nosniff_on_pages_api_index_and_errors(store, make_wheel):
    create_token(store.db, "alice")
    store.publish("alice", *make_wheel())
    with TestClient(full_app(store), raise_server_exceptions=False) as client:
        for url in ["/", "/alice", "/alice/wordle", "/search?q=w", "/nope/nothing",
                    "/api/v1/packages/alice/wordle", "/api/v1/nothing", "/simple/",
                    "/healthz", "/.well-known/gymhub-hub-key"]:
            _headers_present(client.get(url))
    csp = SECURITY_HEADERS["Content-Security-Policy"]
    for part in ["default-src 'none'", "img-src 'self' data:", "form-action 'self'",
                 "frame-ancestors 'none'", "base-uri 'none'"]:
        assert part in csp
    assert "unsafe-inline" not in csp and "script-src" not in csp


def test_the_style_hash_matches_the_pages_stylesheet(store):
    import base64

    with TestClient(full_app(store)) as client:
        page = client.get("/").text
    css = re.search(r"<style>(.*?)</style>", page, re.DOTALL)[1]
    digest = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
    assert f"'sha256-{digest}'" in SECURITY_HEADERS["Content-Security-Policy"]
    assert " style=" not in page


def test_install_commands_use_the_public_url_never_the_host_header(store, make_wheel):
    create_token(store.db, "alice")
    store.publish("alice", *make_wheel())
    with TestClient(full_app(store)) as client:
        for url in ["/alice/wordle", "/"]:
            page = client.get(url, headers={"Host": "evil.example"}).text
            assert "https://hub.example.org/simple/" in page and "evil.example" not in page
    with pytest.raises(ConfigError):
        create_hub_app(store, public_url="javascript:alert(1)")


# ------------------------------------------------------------------------ search
def test_search_is_paged_and_an_empty_query_refused(store, make_wheel):
    create_token(store.db, "alice")
    names = sorted(f"game-{hashlib.sha256(str(i).encode()).hexdigest()[:10]}"
                   for i in range(120))  # far apart: near names are refused as look-alikes
    for name in names:
        store.publish("alice", *make_wheel(name=name, description="a game"))
    with TestClient(full_app(store)) as client:
        _error(client.get("/api/v1/search", params={"q": ""}), 422, "invalid_request")
        _error(client.get("/api/v1/search", params={"q": "   "}), 422, "invalid_request")
        _error(client.get("/api/v1/search"), 422, "invalid_request")
        pages = [client.get("/api/v1/search", params={"q": "game", "page": p}).json()
                 for p in (1, 2, 3)]
        assert [len(p["results"]) for p in pages] == [50, 50, 20]
        assert [p["next_page"] for p in pages] == [2, 3, None]
        assert [r["name"] for p in pages for r in p["results"]] == names
        assert client.get("/api/v1/search", params={"q": "game", "page": 1001}).status_code \
            == 422
        html = client.get("/search", params={"q": "game", "page": 2}).text
        assert f"alice/{names[50]}" in html and f"alice/{names[49]}" not in html
        assert 'rel="next" href="/search?q=game&amp;page=3"' in html
        assert 'rel="prev"' in html


def test_suggestions_read_a_bounded_candidate_set(store, make_wheel):
    create_token(store.db, "alice")
    create_token(store.db, "bob")
    store.publish("alice", *make_wheel(name="wordle"))
    store.publish("bob", *make_wheel(name="chess", owner="bob"))
    statements: list[str] = []

    def capture(conn, cursor, statement, *args):
        statements.append(statement)

    with TestClient(full_app(store)) as client:
        sa.event.listen(store.db.engine, "before_cursor_execute", capture)
        try:
            assert 'href="/alice/wordle"' in client.get("/alice/wrodle").text
            assert 'href="/alice/wordle"' in client.get("/alcie/wordle").text
            assert 'href="/alice"' in client.get("/alcie").text
            r = client.get("/simple/gymhub-env-5-alice-wordel/")
            assert "gymhub-env-5-alice-wordle" in r.text
        finally:
            sa.event.remove(store.db.engine, "before_cursor_execute", capture)
    for stmt in statements:
        flat = " ".join(stmt.split())
        if re.search(r"\b(FROM|JOIN) (packages|owners)\b", flat):
            assert ("LIMIT" in flat or "packages.normalized_name =" in flat
                    or "owners.name =" in flat), flat


# ------------------------------------------------------------------------ hostile README
def test_a_hostile_readme_page_is_fast_and_does_not_delay_others(store, make_wheel):
    create_token(store.db, "alice")
    store.publish("alice", *make_wheel(name="warmup"))
    desc, data = make_wheel(name="hostile")
    readme = hostile_readme(200_000)
    store.publish("alice", desc, data, readme=readme)  # rendered here, once
    with TestClient(full_app(store)) as client:
        assert client.get("/alice/warmup").status_code == 200  # templates compiled
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            r = client.get("/alice/hostile")
            times.append(time.perf_counter() - t0)
            assert r.status_code == 200
        readme_html = r.text.split('id="readme">', 1)[1].rsplit("</div>", 1)[0]
        assert_safe(readme_html)
        assert statistics.median(times) < 0.05, times  # no rendering on a request

        simple_times: list[float] = []
        done = threading.Event()

        def pages() -> None:
            with TestClient(client.app) as other:
                while not done.is_set():
                    other.get("/alice/hostile")

        worker = threading.Thread(target=pages)
        worker.start()
        try:
            for _ in range(10):
                t0 = time.perf_counter()
                assert client.get("/simple/").status_code == 200
                simple_times.append(time.perf_counter() - t0)
        finally:
            done.set()
            worker.join(30)
        assert statistics.median(simple_times) < 0.05, simple_times


def test_versions_published_before_rendering_show_a_note_until_rendered(store, spec):
    from gymhub.hub.archive import validate_wheel
    from gymhub.hub.db import Version

    create_token(store.db, "alice")
    filename, data = spec.build()
    store.publish("alice", validate_wheel(data, owner="alice", filename=filename).describe(),
                  data)
    with store.db.write() as session:  # as schema 0001 left it
        session.execute(sa.update(Version).values(readme_html=None))
    with TestClient(full_app(store)) as client:
        assert 'id="readme-pending"' in client.get("/alice/wordle").text
        assert store.render_missing_readmes() == 1 and store.render_missing_readmes() == 0
        page = client.get("/alice/wordle").text
    assert '<div class="readme" id="readme"><h2>Wordle</h2>' in page
    assert hashlib.sha256(data).hexdigest() in page
