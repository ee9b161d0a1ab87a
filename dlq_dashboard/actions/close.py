"""Closing (acknowledging with a note) and reopening one entry, each with its audit record."""

from __future__ import annotations

import json
from typing import Any, Mapping

import nats.js.errors
from sqlalchemy import insert, update

from ..db.counts import Change, count_changes
from ..db.engine import write_transaction
from ..db.models import Action, Entry
from ..errors import InvalidRequest
from ..nats.bridge import NatsUnavailable
from ..nats.streams import NotDeleted, delete_message, stream_epoch
from ..times import utcnow
from .context import ActionContext
from .decisions import (Outcome, close_values, decide_close, decide_reopen, load_entry, pending_intents,
                        reopen_values, source_of)
from .errors import NatsDown
from .publishing import nats_unreachable, of_source

ENTRIES, ACTIONS = Entry.__table__, Action.__table__
#: The longest note a close (or a bulk job) keeps: one of 200,000 characters made the audit and
#: the entry page take 40 s to render.
NOTE_MAX = 2000


def close_note(note: Any) -> str | None:
    """A note as it is kept: trimmed, None when empty; InvalidRequest (a 400) when it is not
    text or longer than NOTE_MAX characters."""
    if note is None:
        return None
    if not isinstance(note, str):
        raise InvalidRequest("note must be text.")
    note = note.strip()
    if len(note) > NOTE_MAX:
        raise InvalidRequest(f"The note is {len(note):,} characters long; a note holds at most {NOTE_MAX:,}.")
    return note or None


def close_entry(rt: ActionContext, entry_id: int, version: int, *, actor: str, note: str | None = None) -> Outcome:
    """Acknowledge and close an entry with a note; with DLQ_DELETE_ON_CLOSE also delete its DLQ message.

    The delete happens inside the transaction: if NATS cannot delete it, nothing changes.
    """
    note = close_note(note)
    with write_transaction(rt.engine) as conn:
        entry = load_entry(conn, entry_id)
        decide_close(entry, version, pending_intents(conn, [entry_id]).get(entry_id, []))
        detail: dict[str, Any] = {}
        if rt.settings.delete_on_close and entry["dlq_stream"] and entry["dlq_seq"]:
            detail["dlq_delete"] = delete_from_dlq(rt, [entry])[entry_id]
        now = utcnow()
        conn.execute(update(ENTRIES).where(ENTRIES.c.id == entry_id, ENTRIES.c.version == version)
                     .values(version=version + 1, **close_values(actor, note, now)))
        count_changes(conn, [_moved(entry, "closed")])
        conn.execute(insert(ACTIONS).values(entry_id=entry_id, action="close", actor=actor, at=now, note=note,
                                            version=version, detail=json.dumps(detail)))
    return Outcome(rt.store.get_entry(entry_id))


def delete_from_dlq(rt: ActionContext, entries: list[Mapping]) -> dict[int, str]:
    """Delete entries' messages from their source's DLQ stream; {entry id: what happened}.
    NatsDown if a source's NATS is unreachable (then nothing is deleted of that source's)."""
    results: dict[int, str] = {}
    by_source: dict[str, list[Mapping]] = {}
    for entry in entries:
        by_source.setdefault(source_of(entry), []).append(entry)
    for source in by_source:  # every source asked first, so that one away deletes nothing at all
        down = nats_unreachable(rt, source)
        if down:
            raise NatsDown(f"{down}; DLQ_DELETE_ON_CLOSE needs NATS to delete the message, so nothing was closed.")
    for source, some in by_source.items():
        results.update(_delete_in(rt, source, some))
    return results


def _delete_in(rt: ActionContext, source: str, entries: list[Mapping]) -> dict[int, str]:
    bridge = rt.bridge_for(source)

    async def delete_all():
        results: dict[int, str] = {}
        epochs: dict[str, str] = {}
        for entry in entries:
            stream = entry["dlq_stream"]
            if stream not in epochs:
                epochs[stream] = stream_epoch(await bridge.js.stream_info(stream))
            if epochs[stream] != entry["dlq_epoch"]:
                # Sequences restart in a recreated stream: this seq is another message now.
                results[entry["id"]] = "not deleted: the DLQ stream was recreated since"
                continue
            gone = not await delete_message(bridge.nc, bridge.js, stream, entry["dlq_seq"],
                                            rt.settings.request_timeout)
            results[entry["id"]] = "already gone" if gone else "deleted"
        return results

    try:
        return bridge.call(delete_all, rt.settings.request_timeout + 0.05 * len(entries))
    except NatsUnavailable as exc:
        raise NatsDown(f"{of_source(rt, source, str(exc))}; the DLQ message could not be deleted, "
                       "so nothing was closed.") from None
    except nats.js.errors.NotFoundError:
        raise NatsDown(of_source(rt, source, "The DLQ stream does not exist now, so nothing was closed.")) from None
    except NotDeleted as exc:
        raise NatsDown(of_source(rt, source, f"JetStream did not delete the DLQ message ({exc}), "
                                             "so nothing was closed.")) from None


def reopen_entry(rt: ActionContext, entry_id: int, version: int, *, actor: str) -> Outcome:
    """Reopen a closed or republished entry."""
    with write_transaction(rt.engine) as conn:
        entry = load_entry(conn, entry_id)
        decide_reopen(entry, version, pending_intents(conn, [entry_id]).get(entry_id, []))
        now = utcnow()
        conn.execute(update(ENTRIES).where(ENTRIES.c.id == entry_id, ENTRIES.c.version == version).values(
            version=version + 1, **reopen_values(now)))
        count_changes(conn, [_moved(entry, "open")])
        conn.execute(insert(ACTIONS).values(entry_id=entry_id, action="reopen", actor=actor, at=now,
                                            version=version, detail=json.dumps({"was": entry["status"]})))
    return Outcome(rt.store.get_entry(entry_id))


def _moved(entry: Mapping, status: str) -> Change:
    """The change of the counts when ``entry`` (as loaded) takes ``status``."""
    return Change(entry["group_id"], entry["group_id"], entry["received_at"], entry["status"], status)
