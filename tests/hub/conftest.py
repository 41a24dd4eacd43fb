"""Fixtures for the hub's storage tests: a fresh database on SQLite (a file) and PostgreSQL.

PostgreSQL cases skip, with the reason, unless GYMHUB_TEST_POSTGRES_URL names a reachable
server; each test gets its own schema there, dropped afterwards.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator

import pytest

from gymhub.hub.blobs import FileBlobStore
from gymhub.hub.db import HubDB
from gymhub.hub.records import WheelDescription
from gymhub.hub.store import HubStore

PG_URL = os.environ.get("GYMHUB_TEST_POSTGRES_URL", "")


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A SQLAlchemy URL whose connections use a private, fresh schema."""
    if not PG_URL:
        pytest.skip("GYMHUB_TEST_POSTGRES_URL is not set")
    psycopg = pytest.importorskip("psycopg")
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    schema = f"gymhub_hubtest_{uuid.uuid4().hex[:10]}"
    admin.execute(f"CREATE SCHEMA {schema}")
    base = PG_URL.replace("postgresql://", "postgresql+psycopg://", 1)
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}options=-csearch_path%3D{schema}"
    finally:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'hub.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


@pytest.fixture
def db(db_url: str) -> Iterator[HubDB]:
    hub_db = HubDB(db_url)
    yield hub_db
    hub_db.close()


@pytest.fixture
def store(db: HubDB, tmp_path) -> HubStore:
    return HubStore(db, FileBlobStore(tmp_path / "blobs"))


def wheel(name: str = "wordle", version: str = "1.0.0", data: bytes | None = None,
          owner: str = "alice", **kw) -> tuple[WheelDescription, bytes]:
    """A description and bytes standing in for a validated wheel."""
    data = data if data is not None else f"{owner}/{name} {version} {uuid.uuid4()}".encode()
    dist = f"gymhub_env__{owner}__{name}".replace("-", "_")
    desc = WheelDescription(
        name=name, version=version, sha256=hashlib.sha256(data).hexdigest(), size=len(data),
        filename=f"{dist}-{version}-py3-none-any.whl",
        env_ids=(f"{owner}/{name}-v0",), metadata={"Name": dist, "Version": version},
        description=kw.pop("description", f"the {name} environment"), **kw)
    return desc, data


@pytest.fixture
def make_wheel():
    return wheel
