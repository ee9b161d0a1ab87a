"""The bounds a piece of database work runs under: a web request's statements are cut short, the
mirror's writes, bulk jobs, purges and migrations are not (docs/deploy.md, "Timeouts")."""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator


@dataclass(frozen=True)
class Bounds:
    """How long one statement of bounded work may take: PostgreSQL cancels it after
    ``statement`` seconds (statement_timeout); SQLite waits at most that long for the write lock
    (busy timeout). A server that does not answer at all (frozen: nothing cancels) is given up
    on by the client ``grace`` seconds later, and the connection closed."""

    statement: float
    grace: float = 1.0

    @property
    def wait(self) -> float:
        """The longest a bounded caller waits for any one answer of the server."""
        return self.statement + self.grace


# The bounds of the work this thread does now: set around a web request (web/errors.py) and the
# database probe, None elsewhere, so that purges, bulk jobs, migrations and the mirror's writes
# are never cut short.
_bounds: ContextVar[Bounds | None] = ContextVar("dlq_database_bounds", default=None)


def current_bounds() -> Bounds | None:
    """The bounds set for this thread's database work, or None (unbounded)."""
    return _bounds.get()


def set_bounds(bounds: Bounds | None) -> None:
    """Bound (or with None, unbound) this thread's database work from now on."""
    _bounds.set(bounds)


@contextmanager
def bounded(bounds: Bounds) -> Iterator[None]:
    """Run the block's database work under ``bounds``."""
    token = _bounds.set(bounds)
    try:
        yield
    finally:
        _bounds.reset(token)
