"""The hub checks what it publishes: real scaffold wheels, checked in the bwrap sandbox.

Three wheels built by ``gymhub env build`` from ``gymhub env init``'s scaffold: as made
(passed), with a verifier that accepts anything (failed: the golden cases catch it), and
with a dependency no one can install offline (unchecked, never passed). Then the service:
an upload is checked in the background and its result served signed.
"""

import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gymhub.hub.archive import validate_wheel
from gymhub.hub.check_service import CheckWorker
from gymhub.hub.checker import check_version
from gymhub.hub.service import create_hub_app
from gymhub.hub.signing import HubKey, verify_statement
from gymhub.hub.tokens import create_token

from .conftest import CHECK_SANDBOX_PROBLEM

pytestmark = pytest.mark.skipif(CHECK_SANDBOX_PROBLEM is not None,
                                reason=f"no sandbox for the check: {CHECK_SANDBOX_PROBLEM}")

ENV_PY = "gymhub_env_5_alice_word_ladder/env.py"


def _gymhub(*args):
    return subprocess.run([sys.executable, "-m", "gymhub.cli", *args], capture_output=True,
                          text=True, timeout=300)


def _build(root: Path, edit=None) -> tuple[str, bytes]:
    assert _gymhub("env", "init", "word-ladder", "--owner", "alice", "--dir", str(root)) \
        .returncode == 0
    path = root / "word-ladder"
    if edit:
        edit(path)
    out = _gymhub("env", "build", str(path), "--no-check")
    assert out.returncode == 0, out.stdout + out.stderr
    wheel = Path(out.stdout.strip().splitlines()[-1])
    return wheel.name, wheel.read_bytes()


def _accept_anything(path: Path) -> None:
    env = path / ENV_PY
    text = env.read_text()
    assert "return self.verifier(submission, task)" in text
    env.write_text(text.replace("return self.verifier(submission, task)",
                                "return self.verifier(task.gold, task)"))


def _needs_missing_dep(path: Path) -> None:
    project = path / "pyproject.toml"
    text = project.read_text()
    project.write_text(text.replace('dependencies = ["', 'dependencies = ["numpy-nonexistent>=1", "'))


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    return {kind: _build(tmp_path_factory.mktemp(kind), edit)
            for kind, edit in [("good", None), ("always1", _accept_anything),
                               ("baddep", _needs_missing_dep)]}


def _publish(store, wheel):
    filename, data = wheel
    create_token(store.db, "alice")  # creates the owner
    info = validate_wheel(data, owner="alice", filename=filename)
    return store.publish("alice", info.describe(), data).version


def test_the_scaffold_passes(store, wheels):
    v = _publish(store, wheels["good"])
    result = check_version(store, "alice", v.name, v.version, timeout_s=120)
    d = result.details
    assert result.status == "passed", d
    assert result.sha256 == v.sha256
    assert set(d) == {"summary", "checks", "envs", "gold_score", "noop_score", "reason"}
    assert d["gold_score"] == 1.0 and d["noop_score"] < 1.0
    assert all(set(c) == {"name", "ok", "ms", "detail"} and c["ok"] for c in d["checks"])
    env = d["envs"]["alice/word-ladder-v0"]
    assert [t["function"]["name"] for t in env["tools"]] == ["hint", "submit"]
    assert env["task_count"] > 0 and env["max_turns"] == 6 and env["verifier"]
    assert store.latest_check("alice", v.name, v.version).status == "passed"


def test_a_verifier_that_accepts_anything_fails(store, wheels):
    v = _publish(store, wheels["always1"])
    result = check_version(store, "alice", v.name, v.version, timeout_s=120)
    assert result.status == "failed"
    bad = [c["name"] for c in result.details["checks"] if not c["ok"]]
    # Every gate catches it: doing nothing passes (the hub's own mean and check_env's
    # per-task check), and the golden "fail" cases pass.
    assert bad == ["alice/word-ladder-v0: do-nothing policy scores below 1.0",
                   "alice/word-ladder-v0: noop policy does not pass",
                   "alice/word-ladder-v0: verifier golden cases"], result.details
    assert "noop policy" in result.details["reason"] and "golden cases" in result.details["reason"]


def test_a_dependency_missing_offline_is_unchecked_not_passed(store, wheels):
    v = _publish(store, wheels["baddep"])
    result = check_version(store, "alice", v.name, v.version, timeout_s=120)
    assert result.status == "unchecked"
    assert "numpy-nonexistent" in result.details["reason"]
    assert result.details["gold_score"] is None


def test_upload_is_checked_in_the_background_and_attested(store, wheels):
    key = HubKey.generate()
    worker = CheckWorker(store, timeout_s=120)
    token = create_token(store.db, "alice")[1]
    filename, data = wheels["good"]
    with TestClient(create_hub_app(store, key=key, checker=worker)) as client:
        assert client.get("/.well-known/gymhub-hub-key").json() == key.public_json()
        r = client.post("/api/v1/upload", content=data, headers={
            "authorization": f"Bearer {token}", "x-filename": filename})
        assert r.status_code == 201, r.text
        url = "/api/v1/packages/alice/word-ladder/0.1.0/attestation"
        assert worker.wait(180)
        body = client.get(url).json()
        assert body["key_id"] == key.key_id and body["statement"]["status"] == "passed"
        assert body["statement"]["sha256"] == r.json()["sha256"]
        assert body["details"]["gold_score"] == 1.0
        verify_statement(key.public_json()["public_key"], body["statement"], body["signature"])
        missing = client.get("/api/v1/packages/alice/word-ladder/9.9.9/attestation")
        assert missing.status_code == 404 and "error" in missing.json()


def test_attestation_of_an_unchecked_version_is_404(store, wheels):
    v = _publish(store, wheels["good"])
    with TestClient(create_hub_app(store, key=HubKey.generate())) as client:
        r = client.get(f"/api/v1/packages/alice/{v.name}/{v.version}/attestation")
        assert r.status_code == 404 and r.json()["error"]["code"] == "version_not_found"


def test_a_check_over_its_time_is_unchecked_with_the_reason(store, wheels):
    v = _publish(store, wheels["good"])
    result = check_version(store, "alice", v.name, v.version, timeout_s=0.5)
    assert result.status == "unchecked"
    assert "timeout" in result.details["reason"] or "limit" in result.details["reason"]
