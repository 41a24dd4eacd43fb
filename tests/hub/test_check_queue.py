"""The check queue lives in the database: it survives restarts, serves owners fairly,
never turns a version away, takes over dead workers' claims and never checks a job twice.

The check itself is replaced by a fake (recording ``passed``) except in the last test,
so these run in well under a second each.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from gymhub.hub import check_service
from gymhub.hub.blobs import FileBlobStore
from gymhub.hub.check_queue import (
    claim,
    enqueue,
    enqueue_unchecked,
    finish,
    pending_count,
    queued_versions,
)
from gymhub.hub.check_service import CheckWorker
from gymhub.hub.db import CheckJob, CheckResult, HubDB, utcnow
from gymhub.hub.service import create_hub_app
from gymhub.hub.signing import HubKey
from gymhub.hub.store import HubStore
from gymhub.hub.tokens import create_token

from .conftest import wheel


class FakeCheck:
    """Stands in for ``check_version``: records the call order and a ``passed`` result."""

    def __init__(self, delay: float = 0.0, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.delay = delay
        self.gate = gate
        self.lock = threading.Lock()

    def __call__(self, store, owner, name, version, *, timeout_s):
        with self.lock:
            self.calls.append((owner, name, version))
        if self.gate is not None:
            self.gate.wait(30)
        time.sleep(self.delay)
        return store.record_check(owner, name, version, "passed", {"summary": "fake"})


@pytest.fixture
def fake(monkeypatch) -> FakeCheck:
    check = FakeCheck()
    monkeypatch.setattr(check_service, "check_version", check)
    return check


def publish(store: HubStore, owner: str, name: str, version: str) -> None:
    desc, data = wheel(name, version, owner=owner)
    store.publish(owner, desc, data)


def owners(store: HubStore, *names: str) -> None:
    for name in names:
        create_token(store.db, name)


def statuses(store: HubStore) -> list[str]:
    with store.db.read() as s:
        return list(s.scalars(sa.select(CheckResult.status)))


def test_pending_checks_survive_a_restart(store, fake, tmp_path):
    owners(store, "alice")
    for v in ("1.0", "1.1", "1.2"):
        publish(store, "alice", "wordle", v)
        assert enqueue(store.db, "alice", "wordle", v)  # queued; the hub then "stops"
    assert queued_versions(store.db, "alice", "wordle") == {"1.0", "1.1", "1.2"}
    store.db.close()

    again = HubStore(HubDB(store.db.url), FileBlobStore(tmp_path / "blobs"))
    worker = CheckWorker(again, poll_s=0.05)
    worker.start()  # no submit: the jobs are found in the database
    assert worker.wait(20)
    worker.close()
    assert sorted(v for _, _, v in fake.calls) == ["1.0", "1.1", "1.2"]
    assert statuses(again) == ["passed"] * 3
    assert queued_versions(again.db, "alice", "wordle") == set()
    again.db.close()


def test_a_worker_that_dies_mid_check_leaves_its_queue_to_the_next(store, monkeypatch,
                                                                   tmp_path):
    owners(store, "alice")
    gate = threading.Event()
    stuck = FakeCheck(gate=gate)
    monkeypatch.setattr(check_service, "check_version", stuck)
    first = CheckWorker(store, poll_s=0.05)
    for v in ("1.0", "1.1", "1.2"):
        publish(store, "alice", "wordle", v)
        assert first.submit("alice", "wordle", v)
    deadline = time.monotonic() + 10
    while not stuck.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    hung = first._thread
    first.close(timeout=0.1)  # its thread hangs in a check: as good as dead

    done = FakeCheck()
    monkeypatch.setattr(check_service, "check_version", done)
    again = HubStore(HubDB(store.db.url), FileBlobStore(tmp_path / "blobs"))
    second = CheckWorker(again, poll_s=0.05, stale_after_s=0.5)
    assert second.wait(20)
    second.close()
    # The two waiting jobs, then the dead worker's once its claim went stale.
    assert sorted(v for _, _, v in done.calls) == ["1.0", "1.1", "1.2"]
    assert done.calls[-1] == stuck.calls[0]
    gate.set()  # the hung check ends late: its result is recorded, the new claim kept
    hung.join(10)
    assert not hung.is_alive()
    again.db.close()


def test_one_owners_burst_does_not_starve_another(store, fake):
    owners(store, "alice", "bob")
    fake.gate = threading.Event()  # the first check lasts until every version is queued
    worker = CheckWorker(store, poll_s=0.05)
    for i in range(20):
        publish(store, "alice", "wordle", f"1.{i}")
        worker.submit("alice", "wordle", f"1.{i}")
    publish(store, "bob", "chess", "1.0")
    worker.submit("bob", "chess", "1.0")
    fake.gate.set()
    assert worker.wait(30)
    worker.close()
    assert len(fake.calls) == 21
    assert fake.calls.index(("bob", "chess", "1.0")) <= 1


def test_claims_serve_owners_round_robin(store):
    owners(store, "alice", "bob", "carol")
    for i in range(5):
        publish(store, "alice", "wordle", f"1.{i}")
        enqueue(store.db, "alice", "wordle", f"1.{i}")
    for owner, name in (("bob", "chess"), ("carol", "go")):
        for v in ("1.0", "2.0"):
            publish(store, owner, name, v)
            enqueue(store.db, owner, name, v)
    order = []
    while (job := claim(store.db, "w", stale_after_s=60)) is not None:
        order.append(job.owner)
        store.record_check(job.owner, job.name, job.version, "passed", {})
        assert finish(store.db, job.id, "w")
    assert order == ["alice", "bob", "carol"] * 2 + ["alice"] * 3


def test_a_full_queue_never_records_unchecked(store, monkeypatch):
    owners(store, "alice")
    gate = threading.Event()
    held = FakeCheck(gate=gate)
    monkeypatch.setattr(check_service, "check_version", held)
    worker = CheckWorker(store, maxsize=1, poll_s=0.05)  # maxsize no longer bounds anything
    for i in range(40):
        publish(store, "alice", "wordle", f"1.{i}")
        assert worker.submit("alice", "wordle", f"1.{i}")
    assert "unchecked" not in statuses(store)
    assert pending_count(store.db) == 40
    gate.set()
    assert worker.wait(30)
    worker.close()
    assert statuses(store) == ["passed"] * 40


def test_a_stale_claim_is_reclaimed_and_the_late_worker_cannot_finish_it(db_url, tmp_path):
    now = [utcnow()]
    db = HubDB(db_url, clock=lambda: now[0])
    store = HubStore(db, FileBlobStore(tmp_path / "blobs"))
    owners(store, "alice")
    publish(store, "alice", "wordle", "1.0")
    enqueue(db, "alice", "wordle", "1.0")
    first = claim(db, "dead", stale_after_s=60)
    assert first is not None and first.attempts == 1
    assert claim(db, "live", stale_after_s=60) is None  # held, not yet stale
    now[0] += timedelta(seconds=61)
    second = claim(db, "live", stale_after_s=60)
    assert second is not None and second.id == first.id and second.attempts == 2
    assert not finish(db, first.id, "dead")  # the late worker leaves the new claim alone
    assert finish(db, second.id, "live") and pending_count(db) == 0
    db.close()


def test_a_version_that_keeps_killing_workers_is_given_up_as_unchecked(db_url, tmp_path,
                                                                      fake):
    now = [utcnow()]
    db = HubDB(db_url, clock=lambda: now[0])
    store = HubStore(db, FileBlobStore(tmp_path / "blobs"))
    owners(store, "alice")
    publish(store, "alice", "wordle", "1.0")
    enqueue(db, "alice", "wordle", "1.0")
    for _ in range(3):
        assert claim(db, "dies", stale_after_s=10) is not None
        now[0] += timedelta(seconds=11)
    worker = CheckWorker(store, poll_s=0.05, stale_after_s=10, max_attempts=3)
    assert worker.wait(10)
    worker.close()
    assert fake.calls == []
    check = store.latest_check("alice", "wordle", "1.0")
    assert check is not None and check.status == "unchecked"
    assert "abandoned" in check.details["reason"]
    db.close()


def test_two_workers_never_check_the_same_job_twice(store, fake, tmp_path):
    owners(store, "alice", "bob")
    fake.delay = 0.005
    versions = []
    for i in range(15):
        for owner in ("alice", "bob"):
            publish(store, owner, "wordle", f"1.{i}")
            enqueue(store.db, owner, "wordle", f"1.{i}")
            versions.append((owner, "wordle", f"1.{i}"))
    other = HubStore(HubDB(store.db.url), FileBlobStore(tmp_path / "blobs"))
    workers = [CheckWorker(store, poll_s=0.05), CheckWorker(other, poll_s=0.05)]
    for w in workers:
        w.start()
    assert all(w.wait(30) for w in workers)
    for w in workers:
        w.close()
    assert sorted(fake.calls) == sorted(versions)  # each exactly once
    other.db.close()


def test_versions_without_a_result_or_a_job_are_recovered_on_start(store, fake):
    owners(store, "alice")
    publish(store, "alice", "wordle", "1.0")  # published, but the process died before queueing
    publish(store, "alice", "wordle", "1.1")
    store.record_check("alice", "wordle", "1.1", "passed", {})
    worker = CheckWorker(store, poll_s=0.05)
    worker.start()
    assert worker.wait(10)
    worker.close()
    assert fake.calls == [("alice", "wordle", "1.0")]
    assert enqueue_unchecked(store.db) == 0


def test_submit_of_a_missing_version_is_refused_without_a_record(store, fake):
    owners(store, "alice")
    worker = CheckWorker(store, poll_s=0.05, recover=False)
    assert not worker.submit("alice", "nothing", "1.0")
    assert not worker.submit("alice", "nothing", "not a version")
    assert worker.wait(5)
    worker.close()
    assert fake.calls == [] and statuses(store) == []


def test_a_queued_version_shows_as_queued_in_its_attestation(store):
    owners(store, "alice")
    publish(store, "alice", "wordle", "1.0")
    publish(store, "alice", "wordle", "2.0")
    enqueue(store.db, "alice", "wordle", "1.0")
    assert enqueue(store.db, "alice", "wordle", "1.0")  # twice is once
    with store.db.read() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(CheckJob)) == 1
    from gymhub.hub.pages import pages_router

    app = create_hub_app(store, key=HubKey.generate(), extra_routers=[pages_router(store)])
    with TestClient(app) as client:
        queued = client.get("/api/v1/packages/alice/wordle/1.0/attestation")
        assert queued.status_code == 404 and queued.json()["check"] == {"status": "queued"}
        never = client.get("/api/v1/packages/alice/wordle/2.0/attestation")
        assert never.status_code == 404 and "check" not in never.json()
        # The package API and the page say the same of each version.
        rows = {r["version"]: r["check"] for r in
                client.get("/api/v1/packages/alice/wordle").json()["versions"]}
        assert rows == {"1.0": {"status": "queued"}, "2.0": None}
        page = client.get("/alice/wordle/1.0").text
        assert '<span class="badge queued">queued</span>' in page
        assert "waiting for the hub&#39;s check" in page or "waiting for the hub's check" in page


def test_a_restarted_app_starts_its_worker_on_the_queue_it_left(store, fake):
    owners(store, "alice")
    publish(store, "alice", "wordle", "1.0")
    enqueue(store.db, "alice", "wordle", "1.0")  # queued by a hub that then stopped
    worker = CheckWorker(store, poll_s=0.05)
    with TestClient(create_hub_app(store, key=HubKey.generate(), checker=worker)):
        assert worker.wait(30)  # no upload needed: the app started the worker
    assert fake.calls == [("alice", "wordle", "1.0")]


def test_the_real_checker_path_records_a_crash_as_unchecked(store):
    owners(store, "alice")
    publish(store, "alice", "wordle", "1.0")
    info = store.resolve("alice", "wordle", "==1.0")
    store.blobs.path(info.sha256).unlink()  # the checker fails reading the wheel
    worker = CheckWorker(store, poll_s=0.05)
    assert worker.submit("alice", "wordle", "1.0")
    assert worker.wait(30)
    worker.close()
    check = store.latest_check("alice", "wordle", "1.0")
    assert check is not None and check.status == "unchecked"
    assert "the checker failed" in check.details["reason"]
    assert pending_count(store.db) == 0
