"""People changing a failure group's triage state (SPEC section 11): assign, resolve (in a
release), ignore (until a time, until N more failures, for good), reopen; and notes. Each change
takes the group's version as seen (a stale one is a 409 and changes nothing) and writes its
activity row and its audit record in the same transaction. What the mirror changes by itself
(regressed, open again) is db/triage.py; the periodic pass that ends ignores whose time has come
runs here (ReopenSchedule), on the replica that holds the mirror.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from sqlalchemy import Connection, Engine, insert, select, update

from ..alerts.outbox import AlertRule, raise_state_alerts
from ..db.failing import FailureLog
from ..db.engine import write_transaction
from ..db.models import Action, FailureGroup, Job
from ..db.triage import IGNORED, INVESTIGATING, OPEN, REGRESSED, RESOLVED, STATE_COLUMNS, record_activity, reopen_due
from ..errors import InvalidRequest, NotFound
from ..numbers import whole_number
from ..times import LONGEST, format_time, parse_duration, parse_time, utcnow
from .close import close_note
from .errors import Conflict

log = logging.getLogger(__name__)
GROUPS, ACTIONS = FailureGroup.__table__, Action.__table__
#: The states a person may set (``regressed`` is the dashboard's verdict, never chosen).
SETTABLE = (OPEN, INVESTIGATING, RESOLVED, IGNORED)
NAME_MAX = 255
COUNT_MAX = 10**12


class GroupNotFound(NotFound):
    """No failure group has this id (or the reader may not see it)."""

    def __init__(self, group_id: int):
        super().__init__(f"No failure group {group_id}.")
        self.group_id = group_id


class GroupConflict(Conflict):
    """The group changed since the version the person saw (``group_id``: which)."""

    def __init__(self, message: str, *, group_id: int, seen_version: int):
        super().__init__(message, seen_version=seen_version)
        self.group_id = group_id


@dataclass(frozen=True)
class StateChange:
    """A state to set, checked (``parse_state_change``): the columns it writes and its words."""

    state: str
    values: dict[str, Any]
    note: str | None


def _text(raw: Any, name: str, *, required: bool = False) -> str | None:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        if required:
            raise InvalidRequest(f"{name} is required for this state.")
        return None
    if not isinstance(raw, str):
        raise InvalidRequest(f"{name} must be text.")
    value = " ".join(raw.split())
    if len(value) > NAME_MAX:
        raise InvalidRequest(f"{name} is {len(value):,} characters long; it holds at most {NAME_MAX}.")
    return value


def parse_until(raw: Any, now: datetime) -> datetime:
    """``until`` as a stored time: an RFC 3339 time or a duration from now (``2h``, ``30m``, ``7d``),
    in the future; InvalidRequest (a 400) otherwise."""
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidRequest("until must be an RFC 3339 time or a duration such as 2h.")
    seconds = parse_duration(raw)
    if seconds is not None and seconds > LONGEST:  # past what a date holds, or meant "for good"
        raise InvalidRequest(f"until {raw[:40]!r} is more than 100 years away: ignore it for good instead "
                             "(no until), or give a shorter duration.")
    at = now + timedelta(seconds=seconds) if seconds is not None else parse_time(raw)
    if at is None:
        raise InvalidRequest(f"until {raw[:40]!r} is not valid: use an RFC 3339 time "
                             "(2026-12-01T18:00:00Z) or a duration (90m, 2h, 7d).")
    if at <= now:
        raise InvalidRequest(f"until {raw[:40]!r} has passed: give a time in the future.")
    return at


#: The fields a change of state takes besides the version (parse_state_change reads them).
STATE_FIELDS = ("state", "assignee", "note", "until", "until_count", "resolved_in")


def parse_state_change(body: dict[str, Any], now: datetime, me: str | None = None) -> StateChange:
    """The change a request asks for (``state`` and what goes with it); InvalidRequest, a 400 with
    a sentence, for a state that is not one, a field that does not go with it, or a bad value.
    ``assignee`` ``me`` is the caller, ``me`` (as the groups' filter ``assignee=me`` reads it)."""
    state = body.get("state")
    if state == REGRESSED:
        raise InvalidRequest("regressed is not set by hand: a resolved group that fails again becomes regressed.")
    if state not in SETTABLE:
        raise InvalidRequest(f"state {str(state)[:40]!r} is not valid: use one of {', '.join(SETTABLE)}.")
    for name, only in (("until", IGNORED), ("until_count", IGNORED), ("resolved_in", RESOLVED)):
        if body.get(name) not in (None, "") and state != only:
            raise InvalidRequest(f"{name} goes with state {only} only.")
    values: dict[str, Any] = {k: v for k, v in STATE_COLUMNS.items() if k != "assignee"}
    # Investigating without an assignee keeps the group's own: change_state refuses it when there is none.
    assignee = _text(body.get("assignee"), "assignee")
    if assignee == "me":
        if not me:
            raise InvalidRequest("assignee me names the caller, and nobody is signed in: give a name.")
        assignee = me
    if assignee is not None or state == OPEN:
        values["assignee"] = assignee
    if state == RESOLVED:
        values["resolved_in"] = _text(body.get("resolved_in"), "resolved_in")
    if state == IGNORED:
        until, count = body.get("until"), body.get("until_count")
        if until not in (None, "") and count not in (None, ""):
            raise InvalidRequest("Ignore until a time or until a count, not both.")
        if until not in (None, ""):
            values["ignored_until"] = parse_until(until, now)
        if count not in (None, ""):
            values["ignored_until_count"] = whole_number(count, "until_count", low=1, high=COUNT_MAX,
                                                         what="how many more failures end the ignore")
    return StateChange(state, values, close_note(body.get("note")))


def _locked_group(conn: Connection, group_id: int):
    row = conn.execute(select(GROUPS).where(GROUPS.c.id == group_id).with_for_update()).first()
    if row is None:
        raise GroupNotFound(group_id)
    return row


def change_state(engine: Engine, group_id: int, version: int, change: StateChange, *, actor: str,
                 now: datetime | None = None) -> str | None:
    """Set a group's state as ``change`` says if it is still at ``version`` (GroupConflict, a 409,
    otherwise), with its activity row and audit record, in one transaction; returns the group's
    assignee after it. Investigating without an assignee keeps the group's, and is InvalidRequest,
    a 400, when it has none."""
    now = now or utcnow()
    with write_transaction(engine) as conn:
        row = _locked_group(conn, group_id)
        if row.version != version:
            raise GroupConflict(f"The group changed since you saw it (version {version}; it is at {row.version}, "
                                f"{row.state}). Reload it and decide again.", group_id=group_id, seen_version=version)
        assignee = change.values["assignee"] if "assignee" in change.values else row.assignee
        if change.state == INVESTIGATING and assignee is None:
            raise InvalidRequest("assignee is required for this state: the group has none to keep.")
        conn.execute(update(GROUPS).where(GROUPS.c.id == group_id, GROUPS.c.version == version).values(
            state=change.state, version=version + 1, state_changed_at=now,
            note_count=GROUPS.c.note_count + (1 if change.note else 0), **change.values))
        detail = {"from": row.state, **{k: (format_time(v) if isinstance(v, datetime) else v)
                                        for k, v in change.values.items() if v is not None and k != "ignored_seen"}}
        if change.state == INVESTIGATING:  # the activity names who is on it, kept or given
            detail["assignee"] = assignee
        record_activity(conn, [{"group_id": group_id, "at": now, "actor": actor, "kind": "state",
                                "state": change.state, "text": change.note, "detail": detail}])
        _audit(conn, group_id, "group_state", actor, now, change.note, version, {"state": change.state, **detail})
    return assignee


def add_note(engine: Engine, group_id: int, text: Any, *, actor: str, now: datetime | None = None) -> dict:
    """Add a note to a group's activity (its version stays: a note changes no decision); returns it."""
    note = close_note(text)
    if note is None:
        raise InvalidRequest("text is required: the note's words.")
    now = now or utcnow()
    with write_transaction(engine) as conn:
        _locked_group(conn, group_id)
        conn.execute(update(GROUPS).where(GROUPS.c.id == group_id).values(note_count=GROUPS.c.note_count + 1))
        record_activity(conn, [{"group_id": group_id, "at": now, "actor": actor, "kind": "note", "text": note}])
        _audit(conn, group_id, "group_note", actor, now, note, None, {})
    return {"group_id": group_id, "at": format_time(now), "actor": actor, "kind": "note", "text": note}


def _audit(conn: Connection, group_id: int, action: str, actor: str, now: datetime, note: str | None,
           version: int | None, detail: dict) -> None:
    conn.execute(insert(ACTIONS).values(entry_id=None, job_id=None, action=action, actor=actor, at=now, note=note,
                                        version=version, detail=json.dumps({"group": group_id, **detail})))


#: How many jobs back a job's group is looked for through their ``job`` filters (_job_group).
JOB_CHAIN = 20


def record_job(conn: Connection, filter_args: dict | None, job_id: int, action: str, total: int, actor: str,
               now: datetime) -> None:
    """A bulk job over a group's entries in the group's activity, in the job's transaction: its
    filter names the group, or names the items of a job over the group (``job=N:done``: "Reopen
    what it closed" of a group's close job)."""
    group = _job_group(conn, filter_args)
    if group is not None:
        record_activity(conn, [{"group_id": group, "at": now, "actor": actor, "kind": "job",
                                "detail": {"job": job_id, "action": action, "total": total}}])


def _job_group(conn: Connection, filter_args: dict | None) -> int | None:
    """The group a job's filter takes the entries of: the one it names, else the one of the job its
    ``job`` filter names (that job's items are of its group), and so on back (up to JOB_CHAIN)."""
    for _ in range(JOB_CHAIN):
        group = str((filter_args or {}).get("group") or "").strip()
        if group.isdigit():
            return int(group)
        job = str((filter_args or {}).get("job") or "").strip().partition(":")[0]
        if not job.isdigit():
            return None
        selection = conn.execute(select(Job.selection).where(Job.id == int(job))).scalar()
        filter_args = json.loads(selection or "{}").get("filter")
    return None


def reopen_expired(engine: Engine, rule: AlertRule | None, now: datetime | None = None) -> set[int]:
    """End the ignores whose time has come, with their group.reopened alerts, in one transaction."""
    now = now or utcnow()
    with write_transaction(engine) as conn:
        reopened = reopen_due(conn, now)
        if reopened and rule is not None:
            raise_state_alerts(conn, rule, reopened, now)
    return reopened


class ReopenSchedule:
    """Every ``interval`` seconds while ``leading()`` (this process holds the mirror lease), open
    again the ignored groups whose ``until`` has come, though no failure arrives."""

    def __init__(self, engine: Engine, rule: AlertRule | None, leading: Callable[[], bool], interval: float = 5.0):
        self.engine, self.rule, self.leading, self.interval = engine, rule, leading, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "ReopenSchedule":
        """Start the thread (returns at once)."""
        self._thread = threading.Thread(target=self._run, name="triage-reopen", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the pass in progress."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        failures = FailureLog(log, "the pass over ignored groups", f"it runs again every {self.interval:.0f} s")
        while not self._stop.wait(self.interval):
            if not self.leading():
                continue
            try:
                reopened = reopen_expired(self.engine, self.rule)
                if reopened:
                    log.info("ignored groups open again, their time come: %s", sorted(reopened))
                failures.worked()
            except Exception as exc:  # the database away: tried again at the next pass
                failures.failed(exc)

