"""Alembic's environment: run the migrations on the connection ``migrate()`` hands over.

``migrate()`` passes its connection, already inside a write transaction, as
``config.attributes["connection"]``; Alembic then runs inside that transaction and begins none
of its own. Batch mode lets a revision alter SQLite tables (copy and move, as SQLite requires).
"""

from __future__ import annotations

from alembic import context

from dlq_dashboard.db.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run the migrations through dlq_dashboard.db.migrate.migrate(engine)")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
