"""Shared hub test helpers: wheels built in memory with ``zipfile`` (a correct one, then
variants to attack with), and a fresh hub database on SQLite (a file) and PostgreSQL.

PostgreSQL cases skip, with the reason, unless GYMHUB_TEST_POSTGRES_URL names a reachable
server; each test gets its own schema there, dropped afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
import types
import uuid
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from io import BytesIO

import pytest

from gymhub.hub.blobs import FileBlobStore
from gymhub.hub.db import HubDB
from gymhub.hub.names import distribution_name
from gymhub.hub.records import WheelDescription
from gymhub.hub.store import HubStore


def _check_sandbox_problem() -> str | None:
    """Why the hub's sandboxed check cannot run here (``None`` when it can)."""
    from gymhub.errors import BackendError
    from gymhub.hub.checker import check_sandbox

    try:
        check_sandbox().close()
    except BackendError as exc:
        return str(exc)
    return None


#: Why the hub cannot run its check in the sandbox on this machine, or ``None``: no
#: bubblewrap, or a checkout the sandbox user cannot read (e.g. cloned into mktemp -d).
CHECK_SANDBOX_PROBLEM = _check_sandbox_problem()


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@dataclass
class WheelSpec:
    owner: str = "alice"
    name: str = "wordle"
    version: str = "0.1.0"
    files: dict[str, bytes] | None = None
    entry_points: str | None = None
    metadata: str | None = None
    wheel: str | None = None
    filename: str | None = None
    extra: list[tuple[zipfile.ZipInfo | str, bytes]] = field(default_factory=list)
    unrecorded: list[tuple[zipfile.ZipInfo | str, bytes]] = field(default_factory=list)
    record: Callable[[list[list[str]]], list[list[str]]] | None = None
    compression: int = zipfile.ZIP_DEFLATED

    @property
    def dist(self) -> str:
        return distribution_name(self.owner, self.name)

    @property
    def module(self) -> str:
        return self.dist.replace("-", "_")

    @property
    def dist_info(self) -> str:
        return f"{self.dist.replace('-', '_')}-{self.version}.dist-info"

    def build(self) -> tuple[str, bytes]:
        mod, di = self.module, self.dist_info
        files = self.files if self.files is not None else {
            f"{mod}/__init__.py": b"",
            f"{mod}/env.py": b"class WordleEnv:\n    pass\n" * 20,
            f"{mod}/tasks.jsonl": b'{"id": "t1", "prompt": "guess"}\n' * 50,
        }
        meta = self.metadata if self.metadata is not None else (
            f"Metadata-Version: 2.4\nName: {self.dist}\nVersion: {self.version}\n"
            "Summary: A word game\nRequires-Dist: gymhub>=0.1\n"
            "Description-Content-Type: text/markdown\n\n# Wordle\n\nGuess the word.\n")
        wheel = self.wheel if self.wheel is not None else (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        eps = self.entry_points if self.entry_points is not None else (
            f"[gymhub.envs]\n{self.owner}/{self.name}-v0 = {mod}.env:WordleEnv\n")
        members: list[tuple[zipfile.ZipInfo | str, bytes]] = [
            *files.items(), *self.extra,
            (f"{di}/METADATA", meta.encode()), (f"{di}/WHEEL", wheel.encode()),
            (f"{di}/entry_points.txt", eps.encode())]
        rows = [[i if isinstance(i, str) else i.filename, record_hash(b), str(len(b))]
                for i, b in members if not (i if isinstance(i, str) else i.filename).endswith("/")]
        rows.append([f"{di}/RECORD", "", ""])
        if self.record is not None:
            rows = self.record(rows)
        record = "".join(",".join(r) + "\n" for r in rows).encode()
        buf = BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # duplicate names on purpose
            with zipfile.ZipFile(buf, "w", self.compression) as zf:
                for info, body in [*members, *self.unrecorded, (f"{di}/RECORD", record)]:
                    zf.writestr(info, body)
        filename = self.filename or f"{self.dist.replace('-', '_')}-{self.version}-py3-none-any.whl"
        return filename, buf.getvalue()


@pytest.fixture
def spec() -> WheelSpec:
    return WheelSpec()


def central_offset(data: bytes, name: str) -> int:
    """Offset of ``name``'s central directory header."""
    pos = struct.unpack_from("<I", data, len(data) - 6)[0]  # the end record's cd offset
    while True:
        nlen = struct.unpack_from("<H", data, pos + 28)[0]
        xlen, clen = struct.unpack_from("<HH", data, pos + 30)
        if data[pos + 46:pos + 46 + nlen] == name.encode():
            return pos
        pos += 46 + nlen + xlen + clen


def local_offset(data: bytes, name: str) -> int:
    return struct.unpack_from("<I", data, central_offset(data, name) + 42)[0]


def patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


@pytest.fixture
def zt() -> types.SimpleNamespace:
    """Byte-level tools for crafting broken archives."""
    return types.SimpleNamespace(central=central_offset, local=local_offset, patch=patch,
                                 record_hash=record_hash, WheelSpec=WheelSpec)


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
