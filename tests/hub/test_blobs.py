"""Content-addressed blobs: idempotent, verified, atomic, and never outside the store."""

import hashlib
import os

import pytest

from gymhub.errors import BlobCorrupted, DigestMismatch, InvalidHubInput
from gymhub.hub.blobs import BlobStore, FileBlobStore

DATA = b"a wheel's bytes" * 1000
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def blobs(tmp_path):
    return FileBlobStore(tmp_path / "blobs")


def _leftovers(blobs):
    return [p for p in blobs.root.rglob("*") if p.is_file() and p.name.startswith(".tmp-")]


def test_put_then_read_round_trips_under_its_digest(blobs):
    assert isinstance(blobs, BlobStore)
    blobs.put(SHA, DATA)
    assert blobs.path(SHA) == blobs.root / SHA[:2] / SHA[2:4] / SHA
    assert blobs.exists(SHA) and blobs.read(SHA, len(DATA)) == DATA
    with blobs.open(SHA, len(DATA)) as f:
        assert f.read() == DATA
    assert not os.access(blobs.path(SHA), os.W_OK) or os.geteuid() == 0  # stored read-only


def test_put_is_idempotent(blobs):
    blobs.put(SHA, DATA)
    path = blobs.path(SHA)
    os.utime(path, (1_000_000, 1_000_000))
    inode = path.stat().st_ino
    blobs.put(SHA, DATA)
    assert path.stat().st_ino == inode          # not written again ...
    assert path.stat().st_mtime > 1_000_000     # ... but young again, for the sweep
    assert _leftovers(blobs) == []


def test_bytes_that_do_not_hash_to_the_name_are_refused(blobs):
    with pytest.raises(DigestMismatch):
        blobs.put(SHA, DATA + b"!")
    assert not blobs.exists(SHA)


@pytest.mark.parametrize("bad", ["../../etc/passwd", SHA.upper(), SHA[:-1], SHA + "0", ""])
def test_only_hex_digests_become_paths(blobs, bad):
    with pytest.raises(InvalidHubInput):
        blobs.path(bad)
    with pytest.raises(InvalidHubInput):
        blobs.read(bad, 1)


def test_a_missing_blob_is_corruption(blobs):
    with pytest.raises(BlobCorrupted, match="missing"):
        blobs.read(SHA, len(DATA))


def _tamper(blobs, data):
    path = blobs.path(SHA)
    path.chmod(0o644)
    path.write_bytes(data)


def test_a_truncated_blob_is_caught_by_its_size(blobs):
    blobs.put(SHA, DATA)
    _tamper(blobs, DATA[:-1])
    with pytest.raises(BlobCorrupted, match="bytes"):
        blobs.read(SHA, len(DATA), verify=False)
    with pytest.raises(BlobCorrupted):
        blobs.open(SHA, len(DATA))


def test_an_altered_blob_of_the_same_size_is_caught_by_its_digest(blobs):
    blobs.put(SHA, DATA)
    _tamper(blobs, b"X" + DATA[1:])
    assert blobs.read(SHA, len(DATA), verify=False) != DATA
    with pytest.raises(BlobCorrupted, match="hash"):
        blobs.read(SHA, len(DATA))


def test_putting_again_repairs_a_damaged_blob(blobs):
    blobs.put(SHA, DATA)
    _tamper(blobs, b"junk")
    blobs.put(SHA, DATA)
    assert blobs.read(SHA, len(DATA)) == DATA


def test_a_failed_write_leaves_neither_the_blob_nor_a_temporary_file(blobs, monkeypatch):
    def crash(*_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        blobs.put(SHA, DATA)
    assert not blobs.exists(SHA) and _leftovers(blobs) == []


def test_delete(blobs):
    blobs.put(SHA, DATA)
    assert blobs.delete(SHA) and not blobs.exists(SHA)
    assert not blobs.delete(SHA)
