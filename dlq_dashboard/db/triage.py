"""A failure group's triage state as the writes change it (SPEC section 11), in the transaction
of the kept counts (counts.py): a resolved group that fails again is ``regressed``; an ignored
one counts its new failures and is ``open`` again when its ``until_count`` or its ``until`` is
reached (the time also without a failure: ``reopen_due``, a periodic pass on the mirror's
replica). People change the state with the version they saw (actions/triage.py); these changes
raise it too, so a change decided on what the group was gets a 409.

Each change is a row of group_activity with its time and actor; what it raises (group.regressed,
group.reopened) the alert outbox writes in the same transaction (alerts/outbox.py).

A failure an advisory reported before its DLQ copy is first an entry of the advisory's group; the
copy moves it to the group of its own error (ingest/merge.py). What it did to the group it only
passed through is undone then (:func:`undo_passing`): it no longer counts toward an ignore, and a
regression or a reopening it alone made, not announced yet (its alert is held), is taken back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable

from sqlalchemy import Connection, delete, exists, select, update

from ..actors import MIRROR as MIRROR_ACTOR  # who the activity log names for a change the mirror made
from ..times import format_time
from .models import Alert, Entry, FailureGroup, GroupActivity
from .rows import insert_rows

GROUPS, ACTIVITY, ALERTS, ENTRIES = FailureGroup.__table__, GroupActivity.__table__, Alert.__table__, Entry.__table__
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


def apply_arrivals(conn: Connection, arrived: dict[int, int], now: datetime,
                   failed: dict[int, datetime] | None = None) -> Transitions:
    """Change the state of the groups that received new entries (``arrived``: count_changes'
    answer) as their state says, in the write's transaction: resolved → regressed; ignored →
    counted, and open again once its count or time is reached. ``failed`` says when the latest
    of a group's new failures happened in NATS (its DLQ copy stored, its advisory sent): one from
    before the group was resolved, that the mirror reads late, regresses nothing (a group it
    does not name is judged by ``now``)."""
    done = Transitions()
    touched = sorted(g for g, n in arrived.items() if n > 0)
    if not touched:
        return done
    # One query by primary key for the batch's groups; only resolved and ignored ones change.
    rows = conn.execute(select(GROUPS.c.id, GROUPS.c.state, GROUPS.c.resolved_in, GROUPS.c.ignored_until,
                               GROUPS.c.ignored_until_count, GROUPS.c.ignored_seen, GROUPS.c.assignee,
                               GROUPS.c.state_changed_at)
                        .where(GROUPS.c.id.in_(touched), GROUPS.c.state.in_((RESOLVED, IGNORED)))
                        .with_for_update()).all()
    activity = []
    for row in rows:
        n = arrived[row.id]
        if row.state == RESOLVED:
            when = (failed or {}).get(row.id)
            if when is not None and row.state_changed_at is not None and when <= row.state_changed_at:
                continue  # it had failed before the group was resolved: not a failure again
            _set_state(conn, row.id, REGRESSED, now, keep_resolved_in=True)
            done.regressed.add(row.id)
            activity.append({"group_id": row.id, "at": now, "actor": MIRROR_ACTOR, "kind": "state",
                             "state": REGRESSED, "detail": {"from": RESOLVED, "resolved_in": row.resolved_in,
                                                             "failures": n}})
            continue
        if row.ignored_until is not None and row.ignored_until <= now:
            # Its time came before this batch: the ignore is over, and these failures were not
            # while it lasted (nor counted: an ignore is until a time or a count, not both).
            why, seen = "time", row.ignored_seen or 0
        else:
            seen = (row.ignored_seen or 0) + n
            why = "count" if row.ignored_until_count is not None and seen >= row.ignored_until_count else None
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


def undo_passing(conn: Connection, left: dict[int, list[datetime]], now: datetime, hold: timedelta) -> set[int]:
    """Undo what failures did to the groups they only passed through, in ``conn``'s transaction:
    ``left`` names each group entries made from an advisory moved out of (their DLQ copy's error
    is another group's) with when each of them arrived. An ignored group no longer counts those
    that arrived while it was ignored; a group the mirror made ``regressed``, or ``open`` again
    by its ignore's count, within ``hold`` (its alert not sent yet), goes back to what it was when
    no failure that made it so stays in it: the change's activity row and its unsent alert are
    withdrawn, and its version is raised (a decision taken on what it was gets a 409). Returns
    the groups put back."""
    restored: set[int] = set()
    rows = conn.execute(select(GROUPS.c.id, GROUPS.c.state, GROUPS.c.state_changed_at, GROUPS.c.ignored_seen)
                        .where(GROUPS.c.id.in_(sorted(left)), GROUPS.c.state.in_((IGNORED, REGRESSED, OPEN)))
                        .with_for_update()).all()
    for row in rows:
        times, changed = left[row.id], row.state_changed_at
        if row.state == IGNORED:
            counted = sum(1 for at in times if changed is not None and at >= changed)
            if counted and row.ignored_seen:
                conn.execute(update(GROUPS).where(GROUPS.c.id == row.id)
                             .values(ignored_seen=max(0, row.ignored_seen - counted)))
            continue
        if changed is None or now >= changed + hold or not any(at <= changed for at in times):
            continue
        back = _before_passing(conn, row, times)
        if back is not None:
            _put_back(conn, row, *back)
            restored.add(row.id)
    return restored


def _before_passing(conn: Connection, row, times: list[datetime]) -> tuple[Any, dict] | None:
    """(the mirror's change of ``row`` at its state_changed_at, the columns it had before) when
    no failure that made that change stays in the group; None otherwise."""
    change = conn.execute(select(ACTIVITY).where(
        ACTIVITY.c.group_id == row.id, ACTIVITY.c.at == row.state_changed_at, ACTIVITY.c.actor == MIRROR_ACTOR,
        ACTIVITY.c.kind == "state", ACTIVITY.c.state == row.state).order_by(ACTIVITY.c.id.desc()).limit(1)).first()
    before = conn.execute(select(ACTIVITY.c.at, ACTIVITY.c.state).where(
        ACTIVITY.c.group_id == row.id, ACTIVITY.c.kind == "state", ACTIVITY.c.at < row.state_changed_at)
        .order_by(ACTIVITY.c.at.desc(), ACTIVITY.c.id.desc()).limit(1)).first()
    if change is None or before is None:
        return None
    detail = json.loads(change.detail or "{}")
    if row.state == REGRESSED:
        # Any failure since the group was resolved, still in it, is a regression of its own.
        after = exists().where(ENTRIES.c.group_id == row.id, ENTRIES.c.received_at > before.at)
        if before.state != RESOLVED or conn.execute(select(after)).scalar():
            return None
        return change, {"state": RESOLVED, "state_changed_at": before.at}
    # Open again by the ignore's count: the failures counted, but those that moved out.
    seen = int(detail.get("failures_while_ignored") or 0) - sum(1 for at in times if before.at <= at <= change.at)
    until_count = detail.get("until_count")
    if before.state != IGNORED or detail.get("why") != "count" or until_count is None or seen >= until_count:
        return None
    return change, {"state": IGNORED, "state_changed_at": before.at, "ignored_until_count": until_count,
                    "ignored_seen": max(0, seen), "assignee": detail.get("assignee")}


def _put_back(conn: Connection, row, change, values: dict) -> None:
    conn.execute(update(GROUPS).where(GROUPS.c.id == row.id).values(version=GROUPS.c.version + 1, **values))
    conn.execute(delete(ACTIVITY).where(ACTIVITY.c.id == change.id))
    event = "group.regressed" if row.state == REGRESSED else "group.reopened"
    conn.execute(delete(ALERTS).where(ALERTS.c.group_id == row.id, ALERTS.c.event == event,
                                      ALERTS.c.created_at == change.at, ALERTS.c.sent_at.is_(None)))


def _reopened(row, now: datetime, why: str, seen: int) -> dict:
    detail = {"from": IGNORED, "why": why, "failures_while_ignored": seen}
    if getattr(row, "assignee", None) is not None:  # who had it while ignored (undo_passing puts it back)
        detail["assignee"] = row.assignee
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
