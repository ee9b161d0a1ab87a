"""psycopg's connection with a client-side bound on bounded work's waits for the server.

PostgreSQL's statement_timeout is enforced by the server: a server stopped with SIGSTOP (or a
host that froze, or a network that drops packets silently) cancels nothing, and its kernel still
acknowledges what is sent, so neither TCP nor libpq notices. psycopg waits for every answer in
``Connection.wait``; under ``Bounds`` (a web request, the database probe) that wait ends after
``Bounds.wait`` seconds and the connection is closed (its state mid-protocol is unknown), which
SQLAlchemy sees as a disconnect: the pool drops it and the caller gets an OperationalError.
"""

from __future__ import annotations

import psycopg
from psycopg import errors

from .bounds import current_bounds

# psycopg 3.2+ raises this from wait(..., timeout=); an OperationalError.
_WaitTimeout = getattr(errors, "_WaitTimeout", psycopg.OperationalError)


class BoundedConnection(psycopg.Connection):
    """A psycopg connection whose waits are bounded while the caller's work is (engine.Bounds)."""

    def wait(self, gen, *args, **kwargs):
        bounds = current_bounds()
        if bounds is None or kwargs.get("timeout") is not None or len(args) > 1:
            return super().wait(gen, *args, **kwargs)
        try:
            return super().wait(gen, *args, timeout=bounds.wait, **kwargs)
        except _WaitTimeout:
            self.pgconn.finish()
            raise psycopg.OperationalError(
                f"the database server did not answer within {bounds.wait:g} s") from None
