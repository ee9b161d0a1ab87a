"""Which entry a republished message that failed again (a replay) was the republish of.

A replay names what it republished twice. ``Dlq-Original-Msg-Id`` is the republish's own msgId,
the dashboard's (``dlq-dashboard:<installation id>:<dlq ref>:e<entry id>:v<version>``), stored
with its intent; ``Dlq-Replay-Of`` is ``<dlq stream>:<seq>``, which does not tell apart the
entries of a DLQ stream made again (each of its epochs may have a seq 7). The msgId decides
first: the intent stored with it names its entry. One of this installation's whose intent is
gone was purged with its entry: no entry here is its original. Otherwise (another
installation's msgId, or none) ``Dlq-Replay-Of`` decides, among the entries of its source it
names that were republished (an intent that may have been sent) before the replay arrived, the
one republished last: an entry never republished is never the original of a replay, nor is one
republished only after it arrived (the entry of that seq in the stream made again, newer than
the replay, whose own republish came later).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

from sqlalchemy import Connection, and_, or_, select

from ..db.installation import installation_id
from ..db.models import Entry, Republish
from ..numbers import ID_MAX

ENTRIES, INTENTS = Entry.__table__, Republish.__table__
#: How every msgId the dashboard makes starts (actions/intents.py republish_msg_id).
OURS = "dlq-dashboard:"
#: The states of an intent that may have been sent (a failed one never was).
SENT = ("published", "pending")
#: What a replay is looked up by.
COLUMNS = (ENTRIES.c.id, ENTRIES.c.source, ENTRIES.c.replay_of, ENTRIES.c.original_msg_id, ENTRIES.c.received_at)


@dataclass(frozen=True)
class Replay:
    """What links a dead letter to the entry it may be a republish of."""

    id: int
    source: str
    replay_of: str | None
    original_msg_id: str | None
    received_at: datetime | None = None  # when it arrived (None: any republish is before it)

    @property
    def may_be_one(self) -> bool:
        """Whether it names a republish at all."""
        return bool(self.replay_of) or bool(self.original_msg_id and self.original_msg_id.startswith(OURS))


def parse_ref(ref: str | None) -> tuple[str, int] | None:
    """(stream, seq) of a ``<dlq stream>:<seq>`` reference, None when it names no message a
    stream can hold (Dlq-Replay-Of is a header anyone writes)."""
    stream, _, seq = (ref or "").rpartition(":")
    if not stream or not (seq.isascii() and seq.isdigit()) or int(seq) > ID_MAX:
        return None
    return stream, int(seq)


def originals(conn: Connection, replays: Iterable[Replay]) -> dict[int, int]:
    """{replay id: the id of the entry it is a republish of}, for those of ``replays`` that are one."""
    replays = [r for r in replays if r.may_be_one]
    msg_ids = sorted({r.original_msg_id for r in replays if r.original_msg_id and r.original_msg_id.startswith(OURS)})
    by_msg_id = dict(conn.execute(select(INTENTS.c.msg_id, INTENTS.c.entry_id)
                                  .where(INTENTS.c.msg_id.in_(msg_ids))).all()) if msg_ids else {}
    mine = f"{OURS}{installation_id(conn, make=False)}:"
    named: dict[int, int] = {}
    by_ref: dict[tuple[str, str, int], list[int]] = {}
    for replay in replays:
        if replay.original_msg_id in by_msg_id:
            named[replay.id] = by_msg_id[replay.original_msg_id]
        elif not (replay.original_msg_id or "").startswith(mine) and (ref := parse_ref(replay.replay_of)):
            by_ref.setdefault((replay.source, *ref), []).append(replay.id)
    found: dict[int, int] = {}
    if named:  # a republish goes out through its entry's source, and fails again there
        sources = dict(conn.execute(select(ENTRIES.c.id, ENTRIES.c.source)
                                    .where(ENTRIES.c.id.in_(sorted(set(named.values()))))).all())
        source_of = {r.id: r.source for r in replays}
        found.update({rid: eid for rid, eid in named.items() if sources.get(eid) == source_of[rid]})
    if by_ref:
        found.update(by_reference(conn, by_ref, {r.id: r.received_at for r in replays}))
    return found


def by_reference(conn: Connection, by_ref: dict[tuple[str, str, int], list[int]],
                 arrived: dict[int, datetime | None]) -> dict[int, int]:
    """{replay id: its original} for replays known by their Dlq-Replay-Of alone (``by_ref``: by
    (source, stream, seq)): of the entries of that reference republished by an intent that may
    have been sent, the one whose latest republish went out before the replay ``arrived``
    (received_at; an intent's created_at is the time it was decided, before it was sent), the
    newer entry when two were republished at once; none republished before it, none."""
    named_by = or_(*(and_(ENTRIES.c.source == source, ENTRIES.c.dlq_stream == stream, ENTRIES.c.dlq_seq == seq)
                     for source, stream, seq in sorted(by_ref)))
    # Each republished entry's intents (an entry is republished a few times at most).
    rows = conn.execute(select(ENTRIES.c.source, ENTRIES.c.dlq_stream, ENTRIES.c.dlq_seq, ENTRIES.c.id,
                               INTENTS.c.created_at)
                        .join(INTENTS, INTENTS.c.entry_id == ENTRIES.c.id)
                        .where(named_by, INTENTS.c.state.in_(SENT))).all()
    sent: dict[tuple[str, str, int], list[tuple[datetime, int]]] = {}
    for source, stream, seq, entry_id, at in rows:
        sent.setdefault((source, stream, seq), []).append((at, entry_id))
    found: dict[int, int] = {}
    for key, replay_ids in by_ref.items():
        for replay_id in replay_ids:
            before = [(at, entry_id) for at, entry_id in sent.get(key, ())
                      if entry_id != replay_id and (arrived.get(replay_id) is None or at <= arrived[replay_id])]
            if before:
                found[replay_id] = max(before)[1]
    return found


def candidates(conn: Connection, entries: Iterable[tuple[int, str | None]], condition=None) -> list[Replay]:
    """The dead letters that may be a republish of one of ``entries`` ((id, ``<dlq stream>:<seq>``)):
    those whose Dlq-Replay-Of names its reference, or whose Dlq-Original-Msg-Id is the msgId of
    one of its intents; ``condition`` narrows them (a reader's scopes)."""
    entries = list(entries)
    refs = sorted({ref for _, ref in entries if ref})
    msg_ids = list(conn.execute(select(INTENTS.c.msg_id).where(
        INTENTS.c.entry_id.in_(sorted({i for i, _ in entries})), INTENTS.c.state.in_(SENT))).scalars())
    found: dict[int, Replay] = {}
    for column, values in ((ENTRIES.c.replay_of, refs), (ENTRIES.c.original_msg_id, msg_ids)):
        if not values:
            continue
        query = select(*COLUMNS).where(column.in_(values))
        for row in conn.execute(query if condition is None else query.where(condition)):
            found[row[0]] = Replay(*row)
    return [found[i] for i in sorted(found)]


def replays_of(conn: Connection, entries: Iterable[tuple[int, str | None]], condition=None) -> dict[int, list[int]]:
    """{entry id: the ids of the dead letters that are a republish of it, oldest first}, for
    ``entries`` ((id, ``<dlq stream>:<seq>``)) that have any."""
    entries = list(entries)
    if not entries:
        return {}
    wanted = {i for i, _ in entries}
    found: dict[int, list[int]] = {}
    for replay, original in sorted(originals(conn, candidates(conn, entries, condition)).items()):
        if original in wanted:
            found.setdefault(original, []).append(replay)
    return found
