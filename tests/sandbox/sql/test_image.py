"""Serialized SQLite images: built once, restored as private copies."""

from __future__ import annotations

import sqlite3
import threading

import pytest
import sqlalchemy as sa

from gymhub.errors import BackendError
from gymhub.sandbox.sql.image import ImageCache, build_image, restore_image

MD = sa.MetaData()
sa.Table("t", MD, sa.Column("id", sa.Integer, primary_key=True), sa.Column("name", sa.Text))


def test_restored_copies_are_private() -> None:
    image = build_image(MD, {"t": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]})
    a, b = sqlite3.connect(":memory:"), sqlite3.connect(":memory:")
    restore_image(a, image)
    restore_image(b, image)
    a.execute("DELETE FROM t")
    a.commit()
    assert b.execute("SELECT name FROM t ORDER BY id").fetchall() == [("a",), ("b",)]
    restore_image(a, image)  # restoring again resets the same connection
    assert a.execute("SELECT count(*) FROM t").fetchone() == (2,)


def test_garbage_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="cannot load database image"):
        restore_image(sqlite3.connect(":memory:"), b"not a database" * 100, "junk")


def test_cache_builds_once_under_concurrency() -> None:
    cache: ImageCache[str] = ImageCache()
    builds = []

    def build() -> bytes:
        builds.append(1)
        return build_image(MD, {})

    threads = [threading.Thread(target=cache.get, args=("k", build)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and cache.get("k", build) == cache.get("k", build)
