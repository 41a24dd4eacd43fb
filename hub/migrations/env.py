"""Alembic's entry point: migrate the connection :mod:`gymhub.hub.migrations` passes in."""

from __future__ import annotations

from alembic import context

from gymhub.hub.db import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
