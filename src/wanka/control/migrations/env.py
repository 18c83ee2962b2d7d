"""Alembic environment: run programmatically by `wanka.control.db.migrate` with a live connection."""

from alembic import context

from wanka.control.db import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
