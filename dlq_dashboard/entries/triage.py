"""A failure group's triage as the pages and the API read it (SPEC section 11): the groups'
filters by state, assignee and team; one group with its state; its activity log (state changes,
notes, bulk jobs over it, and the alerts sent about it); the consumers and streams involved; the
state of the groups of a page of entries. The states themselves and what the mirror does to them
are db/triage.py; changing them is actions/triage.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from sqlalchemy import Engine, bindparam, func, select

from ..actors import ALERTS as ALERTS_ACTOR
from ..db.engine import read_transaction
from ..db.models import Alert, Entry, GroupActivity
from ..db.triage import STATES
from ..db.counts import GROUPS
from ..times import format_time
from .filters import FilterError
from .groups import Group
from .tallies import group_from_row

ACTIVITY, ALERTS, ENTRIES = GroupActivity.__table__, Alert.__table__, Entry.__table__
#: The parameters of GroupStateFilter (beside the entries' filters on /groups and /api/groups).
PARAMS = ("state", "assignee", "team")
#: The newest entries of a group read for the consumers and streams involved (a group of a million
#: entries is not read whole for them: the page says "among the newest").
INVOLVED_SCAN = 2_000
#: The newest entries of a group whose masked values a viewer's notes hide (access/visible.py).
NOTE_MASK_SCAN = 200


@dataclass(frozen=True)
class GroupStateFilter:
    """The groups by their own columns: ``states`` (any of them), ``assignee`` (``me`` is the
    caller, resolved by the web layer), ``team``."""

    states: tuple[str, ...] = ()
    assignee: str | None = None
    team: str | None = None
    #: The query parameters it reads.
    PARAMETERS: ClassVar[tuple[str, ...]] = ("state", "assignee", "team")

    @classmethod
    def from_args(cls, args: Mapping[str, str], me: str | None = None) -> "GroupStateFilter":
        """The filter of a request; FilterError (a 400) for a state that is not one, or ``me``
        without a signed-in caller."""
        states = tuple(dict.fromkeys(s.strip() for s in (args.get("state") or "").split(",") if s.strip()))
        wrong = [s for s in states if s not in STATES]
        if wrong:
            raise FilterError(f"state {wrong[0][:40]!r} is not valid: use one or more of {', '.join(STATES)}, "
                              "separated by commas")
        assignee = (args.get("assignee") or "").strip() or None
        if assignee == "me":
            if not me:
                raise FilterError("assignee=me needs a signed-in caller")
            assignee = me
        return cls(states, assignee, (args.get("team") or "").strip() or None)

    def conditions(self) -> tuple:
        """SQL conditions on failure_groups."""
        found = []
        if self.states:
            found.append(GROUPS.c.state.in_(self.states))
        if self.assignee:
            found.append(GROUPS.c.assignee == self.assignee)
        if self.team:
            found.append(GROUPS.c.team == self.team)
        return tuple(found)

    def to_args(self, me: str | None = None) -> dict[str, str]:
        """The parameters that give this filter back (``me`` again for the caller)."""
        args = {}
        if self.states:
            args["state"] = ",".join(self.states)
        if self.assignee:
            args["assignee"] = "me" if me and self.assignee == me else self.assignee
        if self.team:
            args["team"] = self.team
        return args


def find_group(engine: Engine, group_id: int) -> Group | None:
    """One failure group with its counts and state, as stored; None when there is none."""
    with read_transaction(engine) as conn:
        row = conn.execute(select(GROUPS).where(GROUPS.c.id == group_id)).first()
    if row is None:
        return None
    total = row.open_count + row.republished_count + row.closed_count
    return group_from_row(row, total, row.first_seen, row.last_seen)


def activity(engine: Engine, group_id: int, limit: int = 200) -> list[dict[str, Any]]:
    """The group's activity, newest first: its state changes, notes and jobs, and each alert sent
    about it (once an event, however many URLs it went to; ``actor`` "alerts")."""
    with read_transaction(engine) as conn:
        rows = conn.execute(select(ACTIVITY).where(ACTIVITY.c.group_id == group_id)
                            .order_by(ACTIVITY.c.at.desc(), ACTIVITY.c.id.desc()).limit(limit)).all()
        sent = conn.execute(select(ALERTS.c.event, ALERTS.c.event_id, func.min(ALERTS.c.sent_at).label("at"),
                                   func.count().label("urls"))
                            .where(ALERTS.c.group_id == group_id, ALERTS.c.sent_at.is_not(None))
                            .group_by(ALERTS.c.event, ALERTS.c.event_id)).all()
    found = [{"id": r.id, "at": r.at, "actor": r.actor, "kind": r.kind, "state": r.state, "text": r.text,
              "detail": _json(r.detail)} for r in rows if r.kind != "alert"]
    # An alert sent is read from the outbox while it holds it, and from the activity row the
    # retention purge writes when it forgets it; an event found in both (some of its addresses
    # forgotten, some not yet) is one row, sent first when its first address answered.
    alerts: dict[str, dict[str, Any]] = {}
    told = [(r.at, _json(r.detail)) for r in rows if r.kind == "alert"]
    told += [(a.at, {"event": a.event, "id": a.event_id, "urls": int(a.urls)}) for a in sent]
    for at, detail in told:
        same = alerts.get(detail.get("id"))
        if same is None:
            alerts[detail.get("id")] = {"id": None, "at": at, "actor": ALERTS_ACTOR, "kind": "alert", "state": None,
                                        "text": None, "detail": detail}
        else:
            same["at"] = min(same["at"], at)
            same["detail"]["urls"] = int(same["detail"].get("urls") or 0) + int(detail.get("urls") or 0)
    found += alerts.values()
    found.sort(key=lambda a: (a["at"], a["id"] or 0), reverse=True)
    return [{**a, "at": format_time(a["at"])} for a in found[:limit]]


def _json(text: str | None) -> dict:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def involved(engine: Engine, group_id: int) -> dict[str, Any]:
    """The consumers and the source streams among the group's newest INVOLVED_SCAN entries, each
    with its count, most first; ``whole`` when that was all of them."""
    newest = (select(ENTRIES.c.consumer, ENTRIES.c.original_stream).where(ENTRIES.c.group_id == group_id)
              .order_by(ENTRIES.c.id.desc()).limit(INVOLVED_SCAN).subquery())
    # One pass over the newest entries (by the group's index), counted by both columns at once.
    with read_transaction(engine) as conn:
        pairs = conn.execute(select(newest.c.consumer, newest.c.original_stream, func.count())
                             .group_by(newest.c.consumer, newest.c.original_stream)).all()
    consumers: dict[str | None, int] = {}
    streams: dict[str | None, int] = {}
    for consumer, stream, n in pairs:
        consumers[consumer] = consumers.get(consumer, 0) + int(n)
        streams[stream] = streams.get(stream, 0) + int(n)
    read = sum(consumers.values())

    def most(counts: dict) -> list[tuple[str | None, int]]:
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0] or ""))[:20]

    return {"consumers": most(consumers), "streams": most(streams), "read": read, "whole": read < INVOLVED_SCAN}


# The list's badges, asked by every page of it: built once, the ids bound.
_STATES_OF_ENTRIES = (select(ENTRIES.c.id, GROUPS.c.state).join(GROUPS, GROUPS.c.id == ENTRIES.c.group_id)
                      .where(ENTRIES.c.id.in_(bindparam("ids", expanding=True))))


#: The most names the Assign field offers.
ASSIGNEES_OFFERED = 200


def assignee_names(engine: Engine, within=None, limit: int = ASSIGNEES_OFFERED) -> list[str]:
    """The names groups are assigned to now (``within``: a condition on the groups, a scoped
    reader's), for the Assign field to offer, the most recently assigned first: a typo ("opz")
    hid a group from its person's "assigned to me"."""
    latest = func.max(GROUPS.c.state_changed_at).label("latest")
    query = select(GROUPS.c.assignee, latest).where(GROUPS.c.assignee.is_not(None), *([within] if within is not None else []))
    with engine.connect() as conn:
        rows = conn.execute(query.group_by(GROUPS.c.assignee).order_by(latest.desc(), GROUPS.c.assignee)
                            .limit(limit)).all()
    return [row.assignee for row in rows]


def states_of_entries(engine: Engine, entry_ids) -> dict[int, str]:
    """{entry id: its group's state} for these entries (the list's badges), in one query."""
    ids = sorted({int(i) for i in entry_ids if i is not None})
    if not ids:
        return {}
    with read_transaction(engine) as conn:
        return dict(conn.execute(_STATES_OF_ENTRIES, {"ids": ids}).all())


def newest_entry_ids(engine: Engine, group_id: int, limit: int = NOTE_MASK_SCAN) -> list[int]:
    """The ids of the group's newest ``limit`` entries."""
    with read_transaction(engine) as conn:
        return list(conn.execute(select(ENTRIES.c.id).where(ENTRIES.c.group_id == group_id)
                                 .order_by(ENTRIES.c.id.desc()).limit(limit)).scalars())
