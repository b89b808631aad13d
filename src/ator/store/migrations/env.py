"""Alembic environment (layer: store). Runs on the connection handed in by store/database.py."""

from __future__ import annotations

from alembic import context

from ator.store.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
