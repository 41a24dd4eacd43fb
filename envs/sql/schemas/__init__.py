"""Fixture database schemas: SQLAlchemy tables plus seeded data generators.

``SCHEMAS`` maps a schema name to its :class:`SchemaDef`. Each schema has 3-8 related
tables with foreign keys, nullable columns that really hold NULLs, dates, text,
integers and 2-decimal reals, so that questions can exercise joins, NULL handling,
date functions and float rounding. Row counts grow linearly with ``scale`` (about
1,000 rows per unit), which is how benchmarks build 1k/10k/100k-row fixtures.
"""

from __future__ import annotations

from . import flights, hr, library, retail
from ._common import Generator, Rows, SchemaDef

__all__ = ["SCHEMAS", "Generator", "Rows", "SchemaDef"]

SCHEMAS: dict[str, SchemaDef] = {
    s.name: s for s in (retail.SCHEMA, hr.SCHEMA, flights.SCHEMA, library.SCHEMA)
}
