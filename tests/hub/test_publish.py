"""Publishing: atomic, immutable, race-safe; yanks; resolution; search; check results."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from gymhub.errors import (
    DigestMismatch,
    InvalidHubInput,
    LookalikeName,
    OwnerNotFound,
    PackageNotFound,
    VersionConflict,
    VersionNotFound,
)
from gymhub.hub.db import LedgerEntry, Package, Version
from gymhub.hub.tokens import create_token

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hub(store):
    create_token(store.db, "alice")
    create_token(store.db, "bob")
    return store


def _rows(store, table):
    with store.db.read() as s:
        return s.scalar(sa.select(sa.func.count()).select_from(table))


def test_publish_makes_a_version_visible_and_its_bytes_readable(hub, make_wheel):
    desc, data = make_wheel()
    result = hub.publish("alice", desc, data, uploaded_by="tok1")
    assert result.created and result.version.sha256 == desc.sha256
    assert result.version.env_ids == ("alice/wordle-v0",) and not result.version.yanked
    assert hub.read_file(result.version) == data
    pkg = hub.get_package("alice", "Wordle")
    assert (pkg.name, pkg.latest, pkg.description) == ("wordle", "1.0.0", "the wordle environment")
    assert hub.resolve("alice", "wordle") == result.version


def test_the_same_bytes_again_are_a_no_op(hub, make_wheel):
    desc, data = make_wheel()
    first = hub.publish("alice", desc, data)
    again = hub.publish("alice", desc, data)
    assert not again.created and again.version == first.version
    assert _rows(hub, Version) == 1


def test_pushing_the_same_bytes_again_repairs_a_damaged_blob(hub, make_wheel):
    desc, data = make_wheel()
    info = hub.publish("alice", desc, data).version
    hub.blobs.path(desc.sha256).chmod(0o644)
    hub.blobs.path(desc.sha256).write_bytes(b"rot")
    assert not hub.publish("alice", desc, data).created
    assert hub.read_file(info) == data


@pytest.mark.parametrize("other_version", ["1.0.0", "1.0", "1", "v1.0.0"])
def test_other_bytes_for_a_published_version_are_refused(hub, make_wheel, other_version):
    desc, data = make_wheel(version="1.0.0")
    hub.publish("alice", desc, data)
    other, other_data = make_wheel(version=other_version)
    with pytest.raises(VersionConflict, match="immutable"):
        hub.publish("alice", other, other_data)
    assert [v.sha256 for v in hub.list_versions("alice", "wordle")] == [desc.sha256]
    assert not hub.blobs.exists(other.sha256)  # refused before the blob was written


def test_names_are_one_package_after_normalisation(hub, make_wheel):
    hub.publish("alice", *make_wheel(name="my_env", version="1.0"))
    hub.publish("alice", *make_wheel(name="My.Env", version="2.0"))
    assert [v.version for v in hub.list_versions("alice", "my-env")] == ["2.0", "1.0"]
    assert _rows(hub, Package) == 1


def test_owners_do_not_collide(hub, make_wheel):
    a = hub.publish("alice", *make_wheel(owner="alice")).version
    b = hub.publish("bob", *make_wheel(owner="bob")).version
    assert a.sha256 != b.sha256
    assert hub.resolve("bob", "wordle").sha256 == b.sha256


def test_a_digest_or_size_mismatch_stores_nothing(hub, make_wheel):
    desc, data = make_wheel()
    for bad in (data + b"x", data[:-1] + b"x"):
        with pytest.raises(DigestMismatch):
            hub.publish("alice", desc, bad)
    assert _rows(hub, Version) == 0 and not hub.blobs.exists(desc.sha256)


@pytest.mark.parametrize("field", [{"version": "1.0+local"}, {"version": "one"},
                                   {"name": "../x"}, {"name": "wörd"}, {"filename": "a/b.whl"},
                                   {"sha256": "A" * 64}])
def test_malformed_descriptions_are_refused(hub, make_wheel, field):
    from dataclasses import replace

    desc, data = make_wheel()
    with pytest.raises(InvalidHubInput):
        hub.publish("alice", replace(desc, **field), data)


def test_an_unknown_owner_is_refused_before_anything_is_stored(hub, make_wheel):
    desc, data = make_wheel(owner="nobody")
    with pytest.raises(OwnerNotFound):
        hub.publish("nobody", desc, data)
    assert not hub.blobs.exists(desc.sha256)


def test_yank_hides_from_ranges_but_not_from_exact_pins(hub, make_wheel):
    for v in ("1.0.0", "1.1.0", "2.0.0rc1"):
        hub.publish("alice", *make_wheel(version=v))
    assert hub.resolve("alice", "wordle").version == "1.1.0"  # no pre-release by default
    yanked = hub.yank("alice", "wordle", "1.1", "broken verifier")
    assert yanked.yanked and yanked.yank_reason == "broken verifier"
    assert hub.yank("alice", "wordle", "1.1.0", "again").yank_reason == "broken verifier"
    assert hub.resolve("alice", "wordle").version == "1.0.0"
    assert hub.resolve("alice", "wordle", ">=1.0,<2").version == "1.0.0"
    assert hub.resolve("alice", "wordle", "1.1.0").yanked
    assert hub.resolve("alice", "wordle", "==1.1").version == "1.1.0"
    assert hub.resolve("alice", "wordle", ">=2.0.0rc1").version == "2.0.0rc1"
    assert hub.get_package("alice", "wordle").latest == "1.0.0"
    flags = {v.version: v.yanked for v in hub.list_versions("alice", "wordle")}
    assert flags == {"2.0.0rc1": False, "1.1.0": True, "1.0.0": False}
    with pytest.raises(VersionNotFound, match="yanked"):
        hub.resolve("alice", "wordle", ">1.0,<2")
    with pytest.raises(VersionNotFound):
        hub.resolve("alice", "wordle", "3.0")
    with pytest.raises(InvalidHubInput):
        hub.resolve("alice", "wordle", "~~1")
    with pytest.raises(InvalidHubInput):
        hub.yank("alice", "wordle", "1.0.0", "  ")


def test_a_yanked_version_keeps_its_bytes(hub, make_wheel):
    desc, data = make_wheel()
    hub.publish("alice", desc, data)
    hub.yank("alice", "wordle", "1.0.0", "bad")
    again = hub.publish("alice", desc, data)
    assert not again.created and again.version.yanked
    with pytest.raises(VersionConflict):
        hub.publish("alice", *make_wheel())


def test_a_deleted_version_is_never_reused(hub, make_wheel):
    desc, data = make_wheel()
    hub.publish("alice", desc, data)
    hub.record_check("alice", "wordle", "1.0.0", "passed", {})
    hub.delete_version("alice", "wordle", "1.0.0", "malware")
    assert hub.list_versions("alice", "wordle") == []
    for attempt in ((desc, data), make_wheel()):
        with pytest.raises(VersionConflict, match="malware"):
            hub.publish("alice", *attempt)
    assert hub.publish("alice", *make_wheel(version="1.0.1")).created


def test_the_ledger_holds_even_when_rows_vanish_behind_the_api(hub, make_wheel):
    desc, data = make_wheel()
    hub.publish("alice", desc, data)
    with hub.db.write() as s:  # an administrator's hand in the database
        s.execute(sa.delete(Version))
        s.execute(sa.delete(Package))
    with pytest.raises(VersionConflict):
        hub.publish("alice", *make_wheel())
    with pytest.raises(VersionConflict):
        hub.publish("alice", desc, data)
    assert _rows(hub, LedgerEntry) == 1


def test_unknown_packages_suggest_near_names_and_never_resolve_to_them(hub, make_wheel):
    hub.publish("alice", *make_wheel())
    with pytest.raises(PackageNotFound, match="did you mean alice/wordle"):
        hub.resolve("alice", "wrodle")
    with pytest.raises(PackageNotFound):
        hub.get_package("bob", "wordle")
    with pytest.raises(VersionNotFound):
        hub.yank("alice", "wordle", "9.9", "x")


def test_search_ranks_exact_names_first_and_escapes_wildcards(hub, make_wheel):
    hub.publish("alice", *make_wheel(name="wordle-pro", description="harder words"))
    hub.publish("alice", *make_wheel(name="wordle"))
    hub.publish("bob", *make_wheel(name="chess", owner="bob", description="plays wordle too"))
    hub.publish("bob", *make_wheel(name="sql_100", owner="bob"))
    names = [f"{p.owner}/{p.name}" for p in hub.search("Wordle")]
    assert names == ["alice/wordle", "alice/wordle-pro", "bob/chess"]
    assert [p.name for p in hub.search("bob")] == ["chess", "sql_100"]
    assert [p.name for p in hub.search("%")] == [] and [p.name for p in hub.search("_1")] == [
        "sql_100"]
    assert hub.search("wordle", limit=1)[0].latest == "1.0.0"


def test_check_results_are_bound_to_the_digest(hub, make_wheel):
    desc, data = make_wheel()
    hub.publish("alice", desc, data)
    assert hub.latest_check("alice", "wordle", "1.0.0") is None
    hub.record_check("alice", "wordle", "1.0.0", "unchecked", {"reason": "deps"})
    hub.record_check("alice", "wordle", "1.0.0", "passed", {"gold": 1.0})
    got = hub.latest_check("alice", "wordle", "1.0.0")
    assert (got.status, got.sha256, got.details) == ("passed", desc.sha256, {"gold": 1.0})
    with pytest.raises(InvalidHubInput):
        hub.record_check("alice", "wordle", "1.0.0", "ok", {})


def test_a_failure_before_commit_leaves_no_visible_version(hub, make_wheel):
    desc, data = make_wheel()

    def boom(session):
        raise RuntimeError("injected failure after the rows were flushed")

    event.listen(hub.db._write, "before_commit", boom)
    try:
        with pytest.raises(RuntimeError, match="injected"):
            hub.publish("alice", desc, data)
    finally:
        event.remove(hub.db._write, "before_commit", boom)
    assert not hub.blobs.exists(desc.sha256)  # the failed transaction took its blob back
    assert _rows(hub, Version) == 0 and _rows(hub, LedgerEntry) == 0 and _rows(hub, Package) == 0
    assert hub.publish("alice", desc, data).created


KILL_MID_PUBLISH = """
import os, sys
from sqlalchemy import event
from gymhub.hub.store import HubStore, WheelDescription
url, storage, name, sha, size = sys.argv[1:]
store = HubStore.open(url, storage)
event.listen(store.db._write, "before_commit", lambda s: os._exit(17))  # killed mid-publish
data = sys.stdin.buffer.read()
store.publish("alice", WheelDescription(name, "1.0.0", sha, int(size), "w-1.0.0-py3-none-any.whl"),
              data)
"""


def test_a_hub_killed_mid_publish_leaves_nothing_half_visible(hub, make_wheel, db_url):
    desc, data = make_wheel()
    storage = str(hub.blobs.root)
    proc = subprocess.run([sys.executable, "-c", KILL_MID_PUBLISH, db_url, storage, desc.name,
                           desc.sha256, str(desc.size)], input=data, capture_output=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert proc.returncode == 17, proc.stderr.decode()
    assert _rows(hub, Version) == 0 and _rows(hub, LedgerEntry) == 0
    with pytest.raises(PackageNotFound):
        hub.list_versions("alice", "wordle")
    assert hub.publish("alice", desc, data).created


def _race(n, target):
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def run(i):
        barrier.wait()
        try:
            results[i] = target(i)
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_of_concurrent_publishes_of_one_version_with_different_bytes_exactly_one_wins(
        hub, make_wheel):
    wheels = [make_wheel() for _ in range(8)]
    results = _race(8, lambda i: hub.publish("alice", *wheels[i]))
    winners = [r for r in results if not isinstance(r, Exception)]
    assert len(winners) == 1 and winners[0].created, results
    assert all(isinstance(r, VersionConflict) for r in results if r is not winners[0])
    assert [v.sha256 for v in hub.list_versions("alice", "wordle")] == [
        winners[0].version.sha256]


def test_concurrent_publishes_of_the_same_bytes_create_once(hub, make_wheel):
    desc, data = make_wheel()
    results = _race(8, lambda i: hub.publish("alice", desc, data))
    assert not any(isinstance(r, Exception) for r in results), results
    assert sum(r.created for r in results) == 1
    assert len({r.version for r in results}) == 1


def test_concurrent_first_versions_share_one_new_package(hub, make_wheel):
    wheels = [make_wheel(version=f"1.{i}") for i in range(6)]
    results = _race(6, lambda i: hub.publish("alice", *wheels[i]))
    assert all(r.created for r in results), results
    assert _rows(hub, Package) == 1 and len(hub.list_versions("alice", "wordle")) == 6
    assert hub.get_package("alice", "wordle").latest == "1.5"


def test_a_new_package_that_looks_like_an_owned_one_is_refused(hub, make_wheel):
    hub.publish("alice", *make_wheel(name="world"))
    desc, data = make_wheel(name="wor1d")
    with pytest.raises(LookalikeName, match="world"):
        hub.publish("alice", desc, data)
    assert _rows(hub, Package) == 1
    hub.publish("alice", *make_wheel(name="world", version="2.0.0"))  # its own name: fine
    desc, data = make_wheel(name="wor1d", owner="bob")
    with pytest.raises(LookalikeName, match="alice/world"):  # in any namespace
        hub.publish("bob", desc, data)
    assert not hub.blobs.exists(desc.sha256)  # refused: no orphan blob
    assert [(p.owner, p.name) for p in hub.search("wor")] == [("alice", "world")]


def test_latest_checks_gives_each_versions_newest_check_in_one_call(hub, make_wheel):
    for version in ("1.0.0", "1.1.0", "2.0.0"):
        desc, data = make_wheel(version=version)
        hub.publish("alice", desc, data)
    hub.record_check("alice", "wordle", "1.0.0", "failed", {"reason": "first"})
    hub.record_check("alice", "wordle", "1.0.0", "passed", {"reason": ""})
    hub.record_check("alice", "wordle", "2.0.0", "unchecked", {"reason": "timeout"})
    checks = hub.latest_checks("alice", "wordle")
    assert {v: c.status for v, c in checks.items()} == {"1.0.0": "passed", "2.0.0": "unchecked"}
    assert checks["1.0.0"] == hub.latest_check("alice", "wordle", "1.0.0")
