"""A failure group's triage state as the writes change it (SPEC section 11), in the transaction
of the kept counts (counts.py): a resolved group that fails again is ``regressed``; an ignored
one counts its new failures and is ``open`` again when its ``until_count`` or its ``until`` is
reached (the time also without a failure: ``reopen_due``, a periodic pass on the mirror's
replica). People change the state with the version they saw (actions/triage.py); these changes
raise it too, so a change decided on what the group was gets a 409.

Each change is a row of group_activity with its time and actor; what it raises (group.regressed,
group.reopened) the alert outbox writes in the same transaction (alerts/outbox.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable

from sqlalchemy import Connection, select, update

from ..actors import MIRROR as MIRROR_ACTOR  # who the activity log names for a change the mirror made
from ..times import format_time
from .models import FailureGroup, GroupActivity
from .rows import insert_rows

GROUPS, ACTIVITY = FailureGroup.__table__, GroupActivity.__table__
OPEN, INVESTIGATING, RESOLVED, IGNORED, REGRESSED = "open", "investigating", "resolved", "ignored", "regressed"
STATES = (OPEN, INVESTIGATING, RESOLVED, IGNORED, REGRESSED)
#: The columns a group's state is made of, cleared when it changes to another state.
STATE_COLUMNS = {"assignee": None, "resolved_in": None, "ignored_until": None, "ignored_until_count": None,
                 "ignored_seen": 0}


@dataclass
class Transitions:
    """What a write did to the groups' states: ``regressed`` and ``reopened`` (each raises its
    alert), and ``silenced``: groups still ignored, which raise no alert."""

    regressed: set[int] = field(default_factory=set)
    reopened: set[int] = field(default_factory=set)
    silenced: set[int] = field(default_factory=set)


def record_activity(conn: Connection, rows: Iterable[dict[str, Any]]) -> None:
    """Write activity rows ({group_id, at, actor, kind, state?, text?, detail?}) in ``conn``'s transaction."""
    made = [{"state": None, "text": None, **row, "detail": json.dumps(row.get("detail") or {}, ensure_ascii=False)}
            for row in rows]
    if made:
        insert_rows(conn, ACTIVITY, made)


def apply_arrivals(conn: Connection, arrived: dict[int, int], now: datetime) -> Transitions:
    """Change the state of the groups that received new entries (``arrived``: count_changes'
    answer) as their state says, in the write's transaction: resolved → regressed; ignored →
    counted, and open again once its count or time is reached."""
    done = Transitions()
    touched = sorted(g for g, n in arrived.items() if n > 0)
    if not touched:
        return done
    # One query by primary key for the batch's groups; only resolved and ignored ones change.
    rows = conn.execute(select(GROUPS.c.id, GROUPS.c.state, GROUPS.c.resolved_in, GROUPS.c.ignored_until,
                               GROUPS.c.ignored_until_count, GROUPS.c.ignored_seen)
                        .where(GROUPS.c.id.in_(touched), GROUPS.c.state.in_((RESOLVED, IGNORED)))
                        .with_for_update()).all()
    activity = []
    for row in rows:
        n = arrived[row.id]
        if row.state == RESOLVED:
            _set_state(conn, row.id, REGRESSED, now, keep_resolved_in=True)
            done.regressed.add(row.id)
            activity.append({"group_id": row.id, "at": now, "actor": MIRROR_ACTOR, "kind": "state",
                             "state": REGRESSED, "detail": {"from": RESOLVED, "resolved_in": row.resolved_in,
                                                             "failures": n}})
            continue
        seen = (row.ignored_seen or 0) + n
        why = ("count" if row.ignored_until_count is not None and seen >= row.ignored_until_count else
               "time" if row.ignored_until is not None and row.ignored_until <= now else None)
        if why is None:
            conn.execute(update(GROUPS).where(GROUPS.c.id == row.id).values(ignored_seen=seen))
            done.silenced.add(row.id)
            continue
        _set_state(conn, row.id, OPEN, now)
        done.reopened.add(row.id)
        activity.append(_reopened(row, now, why, seen))
    record_activity(conn, activity)
    return done


def reopen_due(conn: Connection, now: datetime) -> set[int]:
    """Open again the ignored groups whose ``until`` has come, in ``conn``'s transaction (no
    failure need arrive); returns them. The caller raises their group.reopened alerts."""
    rows = conn.execute(select(GROUPS.c.id, GROUPS.c.ignored_until, GROUPS.c.ignored_until_count,
                               GROUPS.c.ignored_seen)
                        .where(GROUPS.c.state == IGNORED, GROUPS.c.ignored_until.is_not(None),
                               GROUPS.c.ignored_until <= now).with_for_update()).all()
    for row in rows:
        _set_state(conn, row.id, OPEN, now)
    record_activity(conn, [_reopened(row, now, "time", row.ignored_seen or 0) for row in rows])
    return {row.id for row in rows}


def _reopened(row, now: datetime, why: str, seen: int) -> dict:
    detail = {"from": IGNORED, "why": why, "failures_while_ignored": seen}
    if why == "time":
        detail["until"] = format_time(row.ignored_until)
    else:
        detail["until_count"] = row.ignored_until_count
    return {"group_id": row.id, "at": now, "actor": MIRROR_ACTOR, "kind": "state", "state": OPEN, "detail": detail}


def _set_state(conn: Connection, group_id: int, state: str, now: datetime, *, keep_resolved_in: bool = False) -> None:
    values = dict(STATE_COLUMNS)
    if keep_resolved_in:
        values.pop("resolved_in")  # a regressed group says which release it was resolved in
        values.pop("assignee")  # and who had it
    conn.execute(update(GROUPS).where(GROUPS.c.id == group_id)
                 .values(state=state, version=GROUPS.c.version + 1, state_changed_at=now, **values))
