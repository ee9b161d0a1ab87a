"""This database's installation id: random, made once for the database (revision 0030), and
named by every msgId the dashboard makes (actions/intents.py republish_msg_id). Entry ids and
versions are this database's own: without it two dashboards on one NATS (or a database made
again from nothing) made the same msgId for two different messages, and the broker dropped the
second as a duplicate within its window."""

from __future__ import annotations

import secrets
import weakref

from sqlalchemy import Connection, Engine, Integer, String, insert, select
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base

#: The random bytes of an installation id (written as hex).
ID_BYTES = 8


class Installation(Base):
    """The one row holding this database's installation id."""

    __tablename__ = "installation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    installation_id: Mapped[str] = mapped_column(String(64))


INSTALLATION = Installation.__table__

# Read once an engine: it never changes once made.
_KNOWN: "weakref.WeakKeyDictionary[Engine, str]" = weakref.WeakKeyDictionary()


def new_installation_id() -> str:
    """A fresh random installation id."""
    return secrets.token_hex(ID_BYTES)


def installation_id(conn: Connection, *, make: bool = True) -> str | None:
    """The installation id of the database ``conn`` is connected to. A database whose row is
    missing (deleted by hand) gets a new one, written in ``conn``'s write transaction (``make``;
    else None: a reader writes nothing)."""
    known = _KNOWN.get(conn.engine)
    if known is not None:
        return known
    found = conn.execute(select(INSTALLATION.c.installation_id).order_by(INSTALLATION.c.id).limit(1)).scalar()
    if found is None:
        if not make:
            return None
        found = new_installation_id()
        conn.execute(insert(INSTALLATION).values(id=1, installation_id=found))
    _KNOWN[conn.engine] = found
    return found
