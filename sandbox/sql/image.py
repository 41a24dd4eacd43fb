"""Serialized SQLite images: build a database once, hand every episode its own copy.

Both ``sql-v0`` (read-only fixtures) and ``tools-v0`` (a writable world per episode)
rest on the same trick: rows are inserted once into an in-memory database whose bytes
(``Connection.serialize()``) are cached, and each episode restores those bytes into a
private ``:memory:`` connection with ``deserialize``. The copy costs microseconds, and
nothing done to it can reach the image or another episode's copy.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy.pool import StaticPool

from gymhub.errors import BackendError

__all__ = ["ImageCache", "build_image", "restore_image"]

K = TypeVar("K", bound=Hashable)


def build_image(metadata: sa.MetaData, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> bytes:
    """Create ``metadata``'s tables in memory, insert ``rows`` (in order) and serialize.

    Args:
        metadata: the SQLAlchemy tables.
        rows: ``{table: rows}`` in foreign-key-safe insertion order.
    """
    con = sqlite3.connect(":memory:", check_same_thread=False)
    engine = sa.create_engine("sqlite://", creator=lambda: con, poolclass=StaticPool)
    try:
        with engine.begin() as conn:
            metadata.create_all(conn)
            for name, table_rows in rows.items():
                if table_rows:
                    conn.execute(metadata.tables[name].insert(), list(table_rows))
        return con.serialize()
    finally:
        engine.dispose()
        con.close()


def restore_image(conn: sqlite3.Connection, image: bytes, label: str = "") -> None:
    """Replace ``conn``'s main database with a private copy of ``image``.

    Raises:
        BackendError: the bytes are not a SQLite database.
    """
    data = bytes(image)
    if data[18:20] == b"\x02\x02":  # WAL-mode headers cannot be deserialized: use rollback
        data = data[:18] + b"\x01\x01" + data[20:]
    try:
        conn.deserialize(data)
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()  # bad bytes fail here
    except sqlite3.DatabaseError as exc:
        raise BackendError(f"{label or 'sqlite'}: cannot load database image: {exc}") from exc


class ImageCache(Generic[K]):
    """Images built once per process and key; concurrent callers wait for one build."""

    def __init__(self) -> None:
        self._images: dict[K, bytes] = {}
        self._locks: dict[K, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, key: K, build: Callable[[], bytes]) -> bytes:
        """The image for ``key``, calling ``build()`` the first time only."""
        image = self._images.get(key)
        if image is not None:
            return image
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            image = self._images.get(key)
            if image is None:
                image = build()
                self._images[key] = image
        return image
