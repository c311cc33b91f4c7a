"""Alembic environment: runs on the connection handed over by :func:`services.store.migrate`."""

from __future__ import annotations

from alembic import context

from services.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
