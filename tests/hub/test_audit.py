"""Storage against the database: an audit that reports damage, a sweep that only takes
what nothing references (and nothing young), on SQLite and PostgreSQL."""

import json
import os
import subprocess
import sys
import time

import pytest

from gymhub.errors import LookalikeName
from gymhub.hub.archive import validate_wheel
from gymhub.hub.audit import audit, sweep
from gymhub.hub.tokens import create_token

from .conftest import WheelSpec


def _publish(store, spec):
    filename, data = spec.build()
    info = validate_wheel(data, owner=spec.owner, filename=filename)
    return store.publish(spec.owner, info.describe(), data).version


@pytest.fixture
def published(store):
    create_token(store.db, "alice")
    return [_publish(store, WheelSpec(version=v)) for v in ("0.1.0", "0.2.0")]


def _age(store, sha, seconds):
    path = store.blobs.path(sha)
    old = time.time() - seconds
    os.utime(path, (old, old))


def test_a_clean_hub_audits_clean(store, published):
    report = audit(store)
    assert report.ok and report.versions == 2 and report.blobs == 2 and not report.orphans
    assert report.summary().endswith("consistent: 2 versions, 2 blobs, 0 unreferenced")


def test_missing_and_altered_blobs_are_damage(store, published):
    a, b = published
    store.blobs.path(a.sha256).unlink()
    path = store.blobs.path(b.sha256)
    data = path.read_bytes()
    path.chmod(0o644)
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, other bytes
    report = audit(store)
    assert not report.ok
    assert report.missing == [f"alice/wordle 0.1.0 {a.sha256}"]
    assert report.damaged == [f"alice/wordle 0.2.0 {b.sha256}"]
    assert audit(store, verify=False).damaged == []  # sizes alone cannot see it


def test_a_refused_publish_leaves_no_orphan_and_a_crash_one_that_the_sweep_takes(
        store, published):
    with pytest.raises(LookalikeName):
        _publish(store, WheelSpec(name="word1e"))  # refused: its blob is taken back
    assert audit(store).ok and not audit(store).orphans
    filename, data = WheelSpec(version="0.9.0").build()
    info = validate_wheel(data, owner="alice", filename=filename).describe()
    store.blobs.put(info.sha256, data)               # a publish that crashed before its row
    report = audit(store)
    assert report.ok and len(report.orphans) == 1
    [orphan] = report.orphans
    assert sweep(store) == []                        # young: a publish may own it
    _age(store, orphan, 7200)
    assert sweep(store) == [orphan]
    after = audit(store)
    assert after.ok and not after.orphans and after.versions == 2
    assert [store.read_file(v) for v in published]   # the published bytes are untouched


def test_the_sweep_spares_an_old_blob_that_is_put_again(store, published):
    spec = WheelSpec(version="0.3.0")
    filename, data = spec.build()
    info = validate_wheel(data, owner="alice", filename=filename).describe()
    store.blobs.put(info.sha256, data)               # a publish that crashed before its row
    _age(store, info.sha256, 7200)
    store.blobs.put(info.sha256, data)               # a new publish of the same bytes ...
    assert sweep(store) == []                         # ... makes it young again
    store.publish("alice", info, data)
    _age(store, info.sha256, 7200)
    assert sweep(store, grace_s=0) == [] and audit(store).ok


def test_stale_partial_writes_are_swept(store, published):
    tmp = store.blobs.root / "ab" / "cd" / ".tmp-crashed"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_bytes(b"half a wheel")
    sweep(store)
    assert tmp.exists()
    old = time.time() - 7200
    os.utime(tmp, (old, old))
    sweep(store)
    assert not tmp.exists()


def test_fsck_command(tmp_path):
    from gymhub.hub.store import HubStore

    db, files = f"sqlite:///{tmp_path / 'hub.db'}", tmp_path / "files"
    store = HubStore.open(db, files)
    try:
        create_token(store.db, "alice")
        v = _publish(store, WheelSpec())
    finally:
        store.db.close()

    def fsck(*extra):
        return subprocess.run([sys.executable, "-m", "gymhub.cli", "hub", "fsck", "--db", db,
                               "--storage", str(files), *extra], capture_output=True,
                              text=True, timeout=120)

    ok = fsck("--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["ok"] is True
    (files / v.sha256[:2] / v.sha256[2:4] / v.sha256).unlink()
    bad = fsck()
    assert bad.returncode == 1 and "missing blob: alice/wordle 0.1.0" in bad.stdout
    assert fsck("--sweep", "--grace", "soon").returncode != 0  # a bad duration is refused
