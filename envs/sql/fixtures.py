"""Fixture databases for ``sql-v0``: seeded SQLite images and their PostgreSQL twins.

A fixture is named by a :class:`FixtureRef` ``(schema, seed, scale)``. Its rows come
from the schema's seeded generator, so the same ref always yields the same rows; the
SQLite form is a serialized in-memory database (:func:`sqlite_image`) that an episode
restores with ``sqlite3.Connection.deserialize`` in microseconds, and the PostgreSQL
form is a schema loaded once per server (:func:`ensure_postgres`). Verifiers run gold
and candidate queries on the fixture *and* on :func:`perturbed` copies (same schema,
other seeds): a query that hard-codes the fixture's answer fails there.

User task files point at their own SQLite files instead; those are :class:`UserDb`.
"""

from __future__ import annotations

import hashlib
import random
import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from gymhub.errors import BackendError, ConfigError
from gymhub.sandbox.sql import normalize_url
from gymhub.sandbox.sql.image import ImageCache, build_image

from .schemas import SCHEMAS, Rows, SchemaDef

__all__ = [
    "FixtureRef",
    "UserDb",
    "ensure_postgres",
    "perturbed",
    "pg_schema_name",
    "sqlite_image",
    "table_row_counts",
]

#: Bump when generators or DDL change, so stale PostgreSQL copies are rebuilt.
FIXTURE_FORMAT = 1
_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_MARKER = "gymhub fixture complete"


@dataclass(frozen=True, order=True)
class FixtureRef:
    """A built-in fixture database: schema, data seed and size multiplier.

    Attributes:
        schema: a key of :data:`~gymhub.envs.sql.schemas.SCHEMAS`.
        seed: data seed; seed 0 is the fixture the questions were written against.
        scale: multiplies row counts (scale 1 is about 1,000 rows).
    """

    schema: str
    seed: int = 0
    scale: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.schema, str) or not _IDENT.match(self.schema):
            raise ConfigError(f"fixture schema must be a lowercase identifier, got {self.schema!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"fixture seed must be an int >= 0, got {self.seed!r}")
        if not isinstance(self.scale, int) or self.scale < 1:
            raise ConfigError(f"fixture scale must be an int >= 1, got {self.scale!r}")

    @property
    def key(self) -> str:
        """Stable text form, e.g. ``retail/seed=0/scale=1`` (cache keys, logs)."""
        return f"{self.schema}/seed={self.seed}/scale={self.scale}"


@dataclass(frozen=True)
class UserDb:
    """A user-supplied SQLite database (from a task file) and its perturbed copies.

    Attributes:
        path: absolute path of the database the question is about.
        test_dbs: absolute paths of extra databases with the same schema, used like
            :func:`perturbed` copies when verifying.
    """

    path: Path
    test_dbs: tuple[Path, ...] = ()

    @property
    def key(self) -> str:
        """Stable text form (the absolute path)."""
        return str(self.path)


def _schema_def(ref: FixtureRef) -> SchemaDef:
    try:
        return SCHEMAS[ref.schema]
    except KeyError:
        raise ConfigError(
            f"unknown fixture schema {ref.schema!r}; known: {', '.join(sorted(SCHEMAS))}"
        ) from None


def _rows(ref: FixtureRef) -> Rows:
    """The fixture's rows.

    The RNG is seeded with a string, which :class:`random.Random` digests with SHA-512
    (not ``hash()``), so the data is identical in every process.
    """
    rng = random.Random(f"gymhub-sql/{ref.schema}/seed={ref.seed}/scale={ref.scale}")
    return _schema_def(ref).generate(rng, ref.scale)


_images: ImageCache[FixtureRef] = ImageCache()


def _build_image(ref: FixtureRef) -> bytes:
    return build_image(_schema_def(ref).metadata, _rows(ref))


def sqlite_image(ref: FixtureRef) -> bytes:
    """The fixture as a serialized SQLite database.

    Restore it per episode with ``con.deserialize(image)`` on a fresh ``:memory:``
    connection. The bytes are deterministic for a given ref (and SQLite version).
    Images are built once per process and cached; concurrent callers for the same ref
    wait for one build instead of each building their own.

    Raises:
        ConfigError: the ref names an unknown schema.
    """
    return _images.get(ref, lambda: _build_image(ref))


def perturbed(ref: FixtureRef, n: int = 2) -> list[FixtureRef]:
    """``n`` copies of ``ref``'s schema and scale with other data seeds.

    Seeds are ``1000 + 10 * seed + i``: deterministic, never equal to ``ref.seed`` and
    distinct for distinct base seeds (for ``n <= 10``).
    """
    if n < 0 or n > 10:
        raise ConfigError(f"perturbed copies: n must be in 0..10, got {n}")
    return [FixtureRef(ref.schema, 1000 + ref.seed * 10 + i, ref.scale) for i in range(n)]


def table_row_counts(ref: FixtureRef) -> dict[str, int]:
    """Rows per table of the fixture, in insertion order."""
    con = sqlite3.connect(":memory:")
    try:
        con.deserialize(sqlite_image(ref))
        names = list(_schema_def(ref).metadata.tables)
        return {t: int(con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]) for t in names}
    finally:
        con.close()


# --------------------------------------------------------------------------- PostgreSQL

_engines: dict[str, sa.Engine] = {}
_engines_guard = threading.Lock()


def pg_schema_name(ref: FixtureRef) -> str:
    """The PostgreSQL schema that holds ``ref``: ``gymhub_{schema}_s{seed}_x{scale}``."""
    return f"gymhub_{ref.schema}_s{ref.seed}_x{ref.scale}"


def _engine(admin_url: str) -> sa.Engine:
    """One engine per URL.

    ``NullPool``: loads are rare, and no idle connection is left open for the garbage
    collector to complain about at exit.
    """
    url = normalize_url(admin_url)
    with _engines_guard:
        engine = _engines.get(url)
        if engine is None:
            engine = sa.create_engine(url, poolclass=NullPool)
            _engines[url] = engine
        return engine


def _lock_key(text: str) -> int:
    """A signed 64-bit advisory-lock key derived from ``text`` (stable across processes)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def _marker(ref: FixtureRef) -> str:
    return f"{_MARKER}: {ref.key} format={FIXTURE_FORMAT}"


def _is_complete(conn: sa.Connection, schema: str, ref: FixtureRef) -> bool:
    comment = conn.execute(
        sa.text(
            "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = :s"
        ),
        {"s": schema},
    ).scalar()
    return comment == _marker(ref)


def _reader_ready(conn: sa.Connection, schema: str, role: str) -> bool:
    exists = conn.execute(sa.text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role})
    if not exists.scalar():
        return False
    granted = conn.execute(
        sa.text("SELECT has_schema_privilege(:r, :s, 'USAGE')"), {"r": role, "s": schema}
    )
    return bool(granted.scalar())


def _ensure_role(engine: sa.Engine, role: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key("gymhub-role")})
        exists = conn.execute(
            sa.text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}
        ).scalar()
        if not exists:
            conn.execute(sa.text(f'CREATE ROLE "{role}" LOGIN'))
            # Defence in depth: even a grant mistake cannot let the reader write.
            conn.execute(sa.text(f'ALTER ROLE "{role}" SET default_transaction_read_only = on'))


def _load(conn: sa.Connection, ref: FixtureRef, schema: str, role: str) -> None:
    sdef = _schema_def(ref)
    conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    md = sa.MetaData()
    for table in sdef.metadata.sorted_tables:
        table.to_metadata(md, schema=schema)
    md.create_all(conn)
    for name, table_rows in _rows(ref).items():
        if table_rows:
            conn.execute(md.tables[f"{schema}.{name}"].insert(), table_rows)
    for name in sdef.metadata.tables:
        conn.execute(sa.text(f'ANALYZE "{schema}"."{name}"'))
    conn.execute(sa.text(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"'))
    conn.execute(sa.text(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"'))
    conn.execute(sa.text(f"COMMENT ON SCHEMA \"{schema}\" IS '{_marker(ref)}'"))


def ensure_postgres(ref: FixtureRef, admin_url: str, reader_role: str = "gymhub_reader") -> str:
    """Load ``ref`` into PostgreSQL once and return the schema that holds it.

    The schema is ``gymhub_{schema}_s{seed}_x{scale}``; text columns use
    ``COLLATE "C"`` so text ordering matches SQLite's binary ordering, and the rows
    are exactly those of :func:`sqlite_image`. A schema comment marks a completed
    load, so later calls cost one query. Loading runs in one transaction under
    ``pg_advisory_xact_lock``: concurrent callers (threads or processes) wait for the
    first and then see its marker; a crashed load leaves no marker and is redone.

    ``reader_role`` is created if missing as a ``LOGIN`` role without password
    (trust authentication on loopback is assumed) whose sessions default to
    read-only transactions; it gets only ``USAGE`` on the schema and ``SELECT`` on
    its tables. Agents' queries should run as this role with ``search_path`` set to
    the returned schema.

    Args:
        ref: the fixture.
        admin_url: a SQLAlchemy or libpq-style URL of a role that may create schemas
            and roles; ``postgresql://`` is driven with psycopg 3.
        reader_role: the role agents' queries run as.

    Raises:
        ConfigError: unknown schema or an invalid role name.
        BackendError: PostgreSQL is unreachable or the load failed.
    """
    if not _IDENT.match(reader_role):
        raise ConfigError(f"reader_role must be a lowercase identifier, got {reader_role!r}")
    _schema_def(ref)
    schema = pg_schema_name(ref)
    engine = _engine(admin_url)
    try:
        with engine.connect() as conn:
            if _is_complete(conn, schema, ref) and _reader_ready(conn, schema, reader_role):
                return schema
        _ensure_role(engine, reader_role)
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key(schema)})
            if not _is_complete(conn, schema, ref):
                _load(conn, ref, schema, reader_role)
            else:  # loaded by someone else, perhaps for another reader role
                conn.execute(sa.text(f'GRANT USAGE ON SCHEMA "{schema}" TO "{reader_role}"'))
                conn.execute(
                    sa.text(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{reader_role}"')
                )
    except sa.exc.SQLAlchemyError as exc:
        raise BackendError(f"could not load fixture {ref.key} into PostgreSQL: {exc}") from exc
    return schema
