"""A message the database refuses (or the parse cannot read), kept apart instead of holding its
batch for ever.

The parse foresees what it can (numbers past their column, a NUL, values longer than their
column: parse.py). Whatever it does not foresee would fail the write of its whole batch, and
every retry of it, every later dead letter waiting behind ("mirroring DLQ is stuck" until the
message is deleted from the stream). So when a batch fails for a reason of its own (not the
database gone or busy, ``transient``), writes.py writes it again a message at a time, each in a
savepoint, and a message that still fails is stored kept apart: as what the DLQ stream holds
(its sequence, headers and payload) without the columns read from its headers, which are the
likely cause, and with a note saying why (``kept_apart``). Should that fail too, the headers and
the payload are left in the stream and the note says where (the second step). Only a message
even that cannot store holds the batch, as before. A message whose headers the parse itself
cannot read (an error it did not foresee) is kept apart the same way, before any write.
"""

from __future__ import annotations

import json

from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError

from .grouping import group_key

#: The column values read from a dead letter's headers: what a kept-apart entry goes without.
FROM_HEADERS = ("original_subject", "original_stream", "original_seq", "consumer", "original_msg_id", "reason",
                "error", "schema_errors", "deliveries", "replay_of")

# SQLSTATE classes of errors that are the database's state, not the message's (PostgreSQL):
# connection, transaction rollback (a deadlock, a serialisation failure), insufficient resources,
# operator intervention, system error.
_TRANSIENT_CLASSES = frozenset({"08", "40", "53", "57", "58"})


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` comes from the database's state (gone, busy, full) rather than from what
    was written: a batch that failed so is written again as it is, later, not message by message."""
    if isinstance(exc, DisconnectionError):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        code = getattr(exc.orig, "sqlstate", None)
        if code:
            return code[:2] in _TRANSIENT_CLASSES
        return isinstance(exc, OperationalError)  # SQLite: locked, I/O, disk full
    return isinstance(exc, (MemoryError, OSError))


def reason_of(exc: BaseException) -> str:
    """The refusal in one line, as a note quotes it (a database error's first line)."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(getattr(exc, 'orig', None) or exc).__name__}: {first}"[:500]


def kept_apart(row: dict, exc: BaseException, *, bare: bool = False, unread: bool = False,
               headers_lost: bool = False) -> dict:
    """``row`` (an entry's column values, parse.py) as the entry of a message the database refused
    (``unread``: that the parse could not read, writes.dlq_rows): the columns read from its headers
    left empty, a note saying why. ``bare``: its headers and payload left in the stream too (the
    second step; ``headers_lost``: its headers could not be written out, its payload is kept)."""
    kept = dict(row)
    for name in FROM_HEADERS:
        kept[name] = None
    kept["failed_at"], kept["failed_at_given"] = row["received_at"], False
    kept["group_key"] = group_key(None, None)
    where = f"{row['dlq_stream']} sequence {row['dlq_seq']}"
    who = "The dashboard could not read" if unread else "The database refused"
    notes = [f"{who} this message as it came ({reason_of(exc)}): it is stored without the "
             "fields read from its headers (subject, reason, error, ...), so it cannot be republished from here."]
    if bare:
        kept["headers"] = "{}"
        kept["payload"] = b""
        kept["payload_available"] = False
        kept["payload_opaque"] = False
        notes.append(f"Its headers and payload could not be stored either: they are in the DLQ stream, {where}.")
    elif headers_lost:
        kept["headers"] = "{}"
        notes.append(f"Its headers could not be stored: they are in the DLQ stream, {where}.")
    else:
        notes.append(f"Its headers, as stored below, are as it came; the DLQ stream holds it at {where}.")
    kept["notes"] = json.dumps(notes, ensure_ascii=False)
    return kept
