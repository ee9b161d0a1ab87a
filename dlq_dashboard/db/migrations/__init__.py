"""Alembic migrations, applied at every start by :func:`dlq_dashboard.db.migrate.migrate`."""
