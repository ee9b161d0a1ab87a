"""Named leases in the database, so that one process at a time does a job: the mirror, each
bulk job. A holder renews its lease well before it expires; a crashed holder's lease is taken
over when it expires, or at once when the holder was a process on this host that is gone."""

from __future__ import annotations

import os
import socket
import uuid
from datetime import datetime, timedelta

from sqlalchemy import Engine, and_, select, update

from ..times import utcnow
from .engine import write_transaction
from .models import Lease
from .rows import insert_rows

LEASES = Lease.__table__
#: The expiry a lease given up is written with (release_lease): no holder, none ran out.
RELEASED = datetime(1970, 1, 1)


def new_holder() -> str:
    """A name for a lease holder: ``<host>:<pid>:<random>``, unique to one runtime."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def acquire_lease(engine: Engine, name: str, holder: str, seconds: float, report: str | None = None) -> bool:
    """Take or renew a named lease; False while another live holder has it. ``report``: what the
    holder tells the other processes while it holds the lease (the mirror's, db/mirror_reports.py).

    Every step is a compare-and-swap on the row, so two processes racing for an expired lease
    on PostgreSQL (where a transaction takes no table lock first) cannot both win.
    """
    now = utcnow()
    expires = now + timedelta(seconds=seconds)
    with write_transaction(engine) as conn:
        if insert_rows(conn, LEASES, [{"name": name, "holder": holder, "expires_at": expires, "report": report}],
                       skip_duplicates=True):
            return True
        row = conn.execute(select(LEASES.c.holder, LEASES.c.expires_at).where(LEASES.c.name == name)).first()
        if row is None:
            return False  # released and deleted meanwhile: try again at the next renewal
        if row.holder != holder and row.expires_at > now and holder_alive(row.holder):
            return False
        taken = conn.execute(update(LEASES).where(LEASES.c.name == name, LEASES.c.holder == row.holder,
                                                  LEASES.c.expires_at == row.expires_at)
                             .values(holder=holder, expires_at=expires, report=report))
        return taken.rowcount == 1


def holder_alive(holder: str) -> bool:
    """False when the holder was a process on this host that no longer exists (a crash):
    a restart then takes the lease at once instead of waiting for it to expire."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def held(engine: Engine, name: str) -> bool:
    """Whether a live holder has lease ``name`` (or one of ``name:<part>``) now: a dashboard that
    mirrors holds ``mirror``, so the command line can tell it runs."""
    with engine.connect() as conn:
        rows = conn.execute(select(LEASES.c.holder).where(
            (LEASES.c.name == name) | LEASES.c.name.startswith(f"{name}:"), LEASES.c.expires_at > utcnow())).all()
    return any(holder_alive(r.holder) for r in rows)


def release_lease(engine: Engine, name: str, holder: str) -> None:
    """Give a lease up so that another process can take it at once."""
    with write_transaction(engine) as conn:
        conn.execute(update(LEASES).where(and_(LEASES.c.name == name, LEASES.c.holder == holder))
                     .values(expires_at=RELEASED))
