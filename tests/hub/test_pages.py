"""The hub's web pages: plain HTTP over the app, then a real browser on a real hub.

The HTTP tests run the app in process on the ``store`` fixture (SQLite; PostgreSQL when
configured). The browser tests start ``gymhub hub serve`` as a subprocess, push the
scaffold environment through the CLI, and drive headless Chromium with selenium, the way
a person would find and read an environment. They skip only when Chromium or its driver
is missing (``scripts/setup-system.sh`` installs both as root).
"""

from __future__ import annotations

import io
import os
import shutil
import time
import uuid
import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gymhub.hub.index import index_router
from gymhub.hub.markdown import render_markdown
from gymhub.hub.pages import pages_router
from gymhub.hub.service import create_hub_app
from gymhub.hub.store import HubStore
from gymhub.hub.tokens import create_token

TOOLS = [{"type": "function", "function": {
    "name": "guess", "description": "Guess a five-letter word",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}},
                   "required": ["word"]}}}]
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _wheel_bytes(meta_body: str) -> bytes:
    """A zip holding just the METADATA the README is read from (pages read nothing else)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("x-1.dist-info/METADATA",
                    f"Metadata-Version: 2.4\nName: x\nVersion: 1\n\n{meta_body}")
    return buf.getvalue() + uuid.uuid4().bytes  # distinct bytes per call


@pytest.fixture
def hub(store: HubStore, make_wheel) -> tuple[TestClient, HubStore, dict[str, str]]:
    create_token(store.db, "alice")
    create_token(store.db, "bob")
    shas = {}
    for version, readme in [("1.0.0", "# Wordle\n\nGuess **the** word.\n"),
                            ("1.1.0", f"# Wordle\n\n{HOSTILE}\n\n- one `<b>`\n"
                                      "[click](javascript:alert(1)) [ok](https://x.org)\n")]:
        desc, _ = make_wheel(version=version, description=f"A word game {HOSTILE}")
        data = _wheel_bytes(readme)
        desc = type(desc)(**{**desc.__dict__, "sha256": __import__("hashlib").sha256(
            data).hexdigest(), "size": len(data), "filename": "x-1-py3-none-any.whl",
            "metadata": {"summary": f"A word game {HOSTILE}", "requires_python": ">=3.11"}})
        shas[version] = store.publish("alice", desc, data).version.sha256
    desc, data = make_wheel(name="sudoku", version="0.1.0", owner="bob")
    store.publish("bob", desc, data)
    store.yank("alice", "wordle", "1.0.0", "wrong answers in task 7")
    store.record_check("alice", "wordle", "1.1.0", "passed", {
        "summary": "all checks passed", "reason": "",
        "checks": [{"name": "import", "ok": True, "ms": 12, "detail": ""},
                   {"name": "gold_episode", "ok": True, "ms": 80, "detail": "score 1.0"}],
        "envs": {"alice/wordle-v0": {"tools": TOOLS, "verifier": "wordle.exact_match@1",
                                     "task_count": 137, "max_turns": 6}},
        "gold_score": 1.0, "noop_score": 0.0})
    store.record_check("alice", "wordle", "1.0.0", "failed", {
        "summary": "gold episode failed", "reason": f"task 7 {HOSTILE}", "checks": [
            {"name": "gold_episode", "ok": False, "ms": 50, "detail": "score 0.0"}]})
    app = create_hub_app(store, extra_routers=[index_router(store), pages_router(store)],
                         public_url="https://hub.example.org/")
    return TestClient(app), store, shas


def test_environment_page_shows_what_a_reader_needs(hub):
    client, _, shas = hub
    r = client.get("/alice/wordle")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert shas["1.0.0"] in page and shas["1.1.0"] in page  # every version's digest
    assert "wrong answers in task 7" in page and "yanked" in page
    assert "gymhub install alice/wordle" in page
    assert ("pip install --index-url https://hub.example.org/simple/ "
            "gymhub-env-5-alice-wordle") in page
    assert "alice/wordle-v0" in page and "wordle.exact_match@1" in page
    assert ">137<" in page and "at most 6 turns" in page
    assert "<code>guess</code>" in page and "Guess a five-letter word" in page
    assert "&#34;required&#34;" in page or '"required"' in page  # the JSON schema
    assert "passed" in page and "failed" in page and "all checks passed" in page
    assert "gold_episode" in page and ">=3.11" not in page  # escaped: &gt;=3.11
    assert "&gt;=3.11" in page
    assert "<h2>Wordle</h2>" in page  # the README, rendered from the stored wheel


def test_publisher_text_is_never_markup(hub):
    client, _, _ = hub
    for url in ["/alice/wordle", "/alice/wordle/1.0.0", "/alice", "/search?q=word", "/"]:
        page = client.get(url).text
        assert "<script>" not in page and "<img" not in page, url
        assert "javascript:" not in page, url
    page = client.get("/alice/wordle").text
    assert "&lt;script&gt;" in page  # shown as text, not dropped
    assert '<a href="https://x.org" rel="nofollow noopener">ok</a>' in page
    assert "<code>&lt;b&gt;</code>" in page


def test_markdown_subset_escapes_before_it_adds_tags():
    out = str(render_markdown(
        '# T\n\n```\n<script>x</script>\n```\n\n**b** *i* [a](data:text/html,1) '
        '![p](https://e.org/p.png)\n\n<div onclick="x">raw</div>\n\n'
        '| a | b |\n|---|---|\n| `<i>` | <u>x</u> |\n'))
    assert "<h2>T</h2>" in out and "&lt;script&gt;x&lt;/script&gt;" in out
    assert "<strong>b</strong>" in out and "<em>i</em>" in out
    assert "data:" not in out and "<img" not in out and "<div" not in out
    assert "<th>a</th>" in out and "<td><code>&lt;i&gt;</code></td>" in out
    assert "<u>" not in out and "&lt;u&gt;x&lt;/u&gt;" in out


def test_unchecked_version_says_so(hub):
    client, store, _ = hub
    page = client.get("/bob/sudoku").text
    assert "not checked yet" in page and "bob/sudoku-v0" in page


def test_version_page_pins_the_install(hub):
    client, _, shas = hub
    page = client.get("/alice/wordle/1.0.0").text
    assert "Version 1.0.0 is yanked" in page and shas["1.0.0"] in page
    assert "gymhub install alice/wordle@1.0.0" in page
    assert "gymhub-env-5-alice-wordle==1.0.0" in page
    assert "gold episode failed" in page


def test_home_search_and_owner_pages(hub):
    client, _, _ = hub
    home = client.get("/").text
    assert 'action="/search"' in home and "alice/wordle" in home and "bob/sudoku" in home
    found = client.get("/search", params={"q": "sudo"}).text
    assert 'href="/bob/sudoku"' in found and "alice/wordle" not in found
    assert "0 results" in client.get("/search", params={"q": "nothing-like-it"}).text
    owner = client.get("/alice").text
    assert 'href="/alice/wordle"' in owner and "sudoku" not in owner


def test_not_found_suggests_near_names_and_never_redirects(hub):
    client, _, _ = hub
    r = client.get("/alice/wrodle", follow_redirects=False)
    assert r.status_code == 404 and "text/html" in r.headers["content-type"]
    assert 'href="/alice/wordle"' in r.text and "Did you mean" in r.text
    r = client.get("/alcie", follow_redirects=False)
    assert r.status_code == 404 and 'href="/alice"' in r.text
    r = client.get("/alice/wordle/9.9.9", follow_redirects=False)
    assert r.status_code == 404 and "1.1.0" in r.text
    assert client.get("/alice/wordle/not-a-version").status_code == 404


def test_pages_do_not_shadow_the_api_or_the_index(hub):
    client, _, _ = hub
    assert client.get("/healthz").json() == {"status": "ok"}
    api = client.get("/api/v1/packages/alice/wordle")
    assert api.status_code == 200 and api.json()["name"] == "wordle"
    assert client.get("/api/v1/search", params={"q": "word"}).json()["results"]
    assert client.get("/api/v1/nothing").headers["content-type"] == "application/json"
    assert client.get("/api").headers["content-type"] == "application/json"
    assert "Links for" in client.get("/simple/gymhub-env-5-alice-wordle/").text
    r = client.get("/simple/gymhub-env-5-alice-wordle", follow_redirects=False)
    assert r.status_code in (307, 308)  # Starlette's trailing-slash redirect, as before
    assert client.get("/simple").status_code != 200 or "Simple index" in client.get(
        "/simple").text
    assert client.get("/files/abc").headers["content-type"] == "application/json"
    assert client.get("/.well-known/security.txt").status_code == 404
    assert client.get("/.well-known/security.txt").headers["content-type"] == (
        "application/json")
    for word in ["API", "Simple", "healthz", "files"]:  # reserved in any case
        assert "text/html" not in client.get(f"/{word}/x").headers["content-type"], word


# ----------------------------------------------------------------------------- browser
CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (CHROMIUM.exists() and DRIVER.exists()):
        pytest.skip("headless Chromium is not installed (/usr/bin/chromium, "
                    "/usr/bin/chromedriver): run scripts/setup-system.sh as root")
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--no-first-run", "--disable-component-update", "--disable-sync",
                "--window-size=1280,2600",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def live_hub(tmp_path_factory):
    """A real ``gymhub hub serve`` with the scaffold word-ladder pushed through the CLI."""
    from tests.hub.test_push import Hub, gymhub

    root = tmp_path_factory.mktemp("live-hub")
    hub = Hub(root).start()
    try:
        store = hub.store()
        token = create_token(store.db, "alice", ["read", "publish", "yank"])[1]
        store.db.close()
        assert gymhub("env", "init", "word-ladder", "--owner", "alice", "--dir",
                      str(root)).returncode == 0
        out = gymhub("push", str(root / "word-ladder"), GYMHUB_HUB_URL=hub.url,
                     GYMHUB_HUB_TOKEN=token)
        assert out.returncode == 0, out.stdout + out.stderr
        store = hub.store()
        # The hub checks the push itself in the background; its result must land before
        # the fixed one below, or the newest result shown would depend on the machine's load.
        deadline = time.monotonic() + 600
        while store.latest_check("alice", "word-ladder", "0.1.0") is None:
            assert time.monotonic() < deadline, "the hub's own check never finished"
            time.sleep(0.5)
        # what these tests expect the page to show
        store.record_check("alice", "word-ladder", "0.1.0", "passed", {
            "summary": "4 checks passed", "reason": "", "gold_score": 1.0, "noop_score": 0.0,
            "checks": [{"name": n, "ok": True, "ms": ms, "detail": ""} for n, ms in
                       [("import", 41), ("gold_episodes", 230), ("determinism", 120),
                        ("noop_scores_zero", 35)]],
            "envs": {"alice/word-ladder-v0": {"tools": TOOLS, "verifier": "word_ladder.exact@1",
                                              "task_count": 24, "max_turns": 8}}})
        store.db.close()
        yield hub, out.stdout.split()[-1]
    finally:
        hub.kill()


def _arrives(browser, where):
    """Wait until the browser's address satisfies ``where``.

    A form's submit or a link's click returns before the next page has loaded, so the
    address read at once may still be the last page's (seen: a search that had not left
    the front page).
    """
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(browser, 30).until(lambda driver: where(driver.current_url))
    except TimeoutException:
        pytest.fail(f"the browser stayed at {browser.current_url}")


def test_a_person_finds_and_reads_an_environment(browser, live_hub, tmp_path):
    from selenium.webdriver.common.by import By

    hub, sha = live_hub
    browser.get(hub.url + "/")
    box = browser.find_element(By.NAME, "q")
    box.send_keys("ladder")
    box.submit()
    _arrives(browser, lambda url: "/search?q=ladder" in url)
    browser.find_element(By.LINK_TEXT, "alice/word-ladder").click()
    _arrives(browser, lambda url: url == hub.url + "/alice/word-ladder")
    title = browser.find_element(By.ID, "title").text
    assert title.startswith("alice/word-ladder")
    assert browser.find_element(By.ID, "current-sha").text == sha
    install = browser.find_element(By.ID, "install").text
    assert "gymhub install alice/word-ladder" in install
    assert (f"pip install --index-url {hub.url}/simple/ gymhub-env-5-alice-word-ladder"
            in install)
    assert sha in browser.find_element(By.ID, "versions").text
    env = browser.find_element(By.CSS_SELECTOR, ".env").text
    assert "word_ladder.exact@1" in env and "24 tasks" in env and "guess" in env
    assert "passed" in browser.find_element(By.ID, "check").text
    assert browser.find_element(By.ID, "readme").text.strip()  # the scaffold's README
    shot = tmp_path / "environment-page.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if keep := os.environ.get("GYMHUB_SCREENSHOT_DIR"):  # to look at it by eye
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)


def test_browser_shows_the_404_with_a_suggestion(browser, live_hub):
    from selenium.webdriver.common.by import By

    hub, _ = live_hub
    browser.get(hub.url + "/alice/word-laddr")
    assert "Not found" in browser.find_element(By.TAG_NAME, "h1").text
    browser.find_element(By.LINK_TEXT, "alice/word-ladder").click()
    _arrives(browser, lambda url: url == hub.url + "/alice/word-ladder")
