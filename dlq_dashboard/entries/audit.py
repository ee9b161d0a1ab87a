"""Reading the audit: who did what, when, to which entry or job (the actions write it).

A bulk job writes one record of its own and one for each item it settled; folded, the audit
shows the job's record with its items' counts in place of the items (they stay stored, and
come back with ``job`` or ``entry``)."""

from __future__ import annotations

import json
from typing import Any, Mapping

from sqlalchemy import BigInteger, Engine, and_, func, not_, or_, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from ..db.engine import read_transaction
from ..db.models import Action, Alert, FailureGroup, Job, JobItem
from ..flags import flag
from ..numbers import whole_number
from ..times import format_time
from ..scopes import Scope
from .filters import decode_cursor, encode_cursor
from .scoping import entries_within, jobs_within, scope_condition

ACTIONS, JOBS, ITEMS, GROUPS = Action.__table__, Job.__table__, JobItem.__table__, FailureGroup.__table__
ALERTS = Alert.__table__
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


def audit_record(row) -> dict[str, Any]:
    """One audit row as JSON (the AuditRecord of the OpenAPI document)."""
    m = row._mapping
    return {"id": m["id"], "entry_id": m["entry_id"], "job_id": m["job_id"], "action": m["action"],
            "actor": m["actor"], "at": format_time(m["at"]), "note": m["note"], "version": m["version"],
            "msg_id": m["msg_id"], "publish_stream": m["publish_stream"], "publish_seq": m["publish_seq"],
            "duplicate": m["duplicate"], "error": m["error"], "detail": json.loads(m["detail"] or "{}")}


def _job_counts(conn, job_ids: set[int]) -> dict[int, dict[str, Any]]:
    """Each job's state and its items by state, in two queries."""
    if not job_ids:
        return {}
    found = {r.id: {"state": r.state, "total": r.total, "done": 0, "failed": 0, "skipped": 0, "cancelled": 0,
                    "pending": 0} for r in conn.execute(select(JOBS.c.id, JOBS.c.state, JOBS.c.total)
                                                        .where(JOBS.c.id.in_(job_ids)))}
    for job_id, state, n in conn.execute(select(ITEMS.c.job_id, ITEMS.c.state, func.count())
                                         .where(ITEMS.c.job_id.in_(job_ids)).group_by(ITEMS.c.job_id, ITEMS.c.state)):
        if job_id in found:
            found[job_id][state] = n
    return found


def is_folded(args: Mapping[str, str], default: bool) -> bool:
    """Whether a job's item records are folded into its own: ``fold`` 1 or 0 (a flag), else
    ``default``; never when the audit is narrowed to an entry or a job (their items are what is
    asked for)."""
    if args.get("entry") or args.get("job"):
        return False
    return flag(args.get("fold"), "fold", default)


#: The records of a failure group's triage (actions/triage.py): no entry, no job, the group's id
#: in their detail.
GROUP_RECORDS = ("group_state", "group_note")


#: The record of an alert sent again (alerts/listing.py send_again): no entry, no job, the
#: alert's id in its detail.
ALERT_RECORDS = ("send_alert_again",)


class _GroupOf(FunctionElement):
    """The ``group`` of an audit record's detail (JSON text) as a number, in each database's words."""

    type = BigInteger()
    inherit_cache = True
    key = "group"


class _AlertOf(_GroupOf):
    """The ``alert`` of an audit record's detail as a number."""

    inherit_cache = True
    key = "alert"


@compiles(_AlertOf, "sqlite")
@compiles(_GroupOf, "sqlite")
def _group_of_sqlite(element, compiler, **kw):
    return f"CAST(json_extract({compiler.process(element.clauses, **kw)}, '$.{element.key}') AS INTEGER)"


@compiles(_AlertOf, "postgresql")
@compiles(_GroupOf, "postgresql")
def _group_of_postgresql(element, compiler, **kw):
    return f"CAST(CAST({compiler.process(element.clauses, **kw)} AS JSONB) ->> '{element.key}' AS BIGINT)"


def records_within(scopes: tuple[Scope, ...] | None):
    """The condition on audit records a scoped reader may read (None: every one): those of an
    entry the scopes cover (by a job: of a job they may see), the records of a job whose every
    entry they cover (jobs_within), a group's triage records of a group they cover (its page
    shows them as its activity), and the record of an alert sent again whose group they cover (as
    /alerts shows them that alert); a record of none of these (a user's or a token's) is not theirs."""
    if scopes is None:
        return None
    jobs_seen = ACTIONS.c.job_id.in_(select(JOBS.c.id).where(jobs_within(scopes)))
    groups_seen = select(GROUPS.c.id).where(scope_condition(GROUPS.c.subject, scopes))
    # An alert the retention purge forgot names no group any more: its record is not theirs.
    alerts_seen = select(ALERTS.c.id).where(ALERTS.c.group_id.in_(groups_seen))
    unattached = (ACTIONS.c.entry_id.is_(None), ACTIONS.c.job_id.is_(None))
    return or_(and_(ACTIONS.c.entry_id.is_not(None), ACTIONS.c.entry_id.in_(entries_within(scopes)),
                    or_(ACTIONS.c.job_id.is_(None), jobs_seen)),
               and_(ACTIONS.c.entry_id.is_(None), ACTIONS.c.job_id.is_not(None), jobs_seen),
               and_(*unattached, ACTIONS.c.action.in_(GROUP_RECORDS), _GroupOf(ACTIONS.c.detail).in_(groups_seen)),
               and_(*unattached, ACTIONS.c.action.in_(ALERT_RECORDS), _AlertOf(ACTIONS.c.detail).in_(alerts_seen)))


def audit_page(engine: Engine, args: Mapping[str, str], *, fold: bool = False,
               scopes: tuple[Scope, ...] | None = None) -> dict[str, Any]:
    """One page of the audit, newest first, narrowed by ``entry``, ``job``, ``actor`` or
    ``action``; ``limit`` and ``cursor`` page it; ``items`` 1 with ``job`` keeps the job's item
    records only. Folded (is_folded), a job's item records are left out and its own record
    carries their counts as ``job``. ``scopes``: a scoped reader's (records_within).
    InvalidRequest names a bad argument."""
    query = select(ACTIONS).order_by(ACTIONS.c.id.desc())
    if scopes is not None:
        query = query.where(records_within(scopes))
    if is_folded(args, fold):
        query = query.where(not_(and_(ACTIONS.c.job_id.is_not(None), ACTIONS.c.entry_id.is_not(None))))
    if args.get("job") and flag(args.get("items"), "items"):
        query = query.where(ACTIONS.c.entry_id.is_not(None))
    for name, column in (("entry", ACTIONS.c.entry_id), ("job", ACTIONS.c.job_id)):
        if args.get(name):
            query = query.where(column == whole_number(args[name], name, what=f"an {name} id" if name == "entry"
                                                       else f"a {name} id"))
    for name, column in (("actor", ACTIONS.c.actor), ("action", ACTIONS.c.action)):
        if args.get(name):
            query = query.where(column == args[name])
    if args.get("cursor"):
        query = query.where(ACTIONS.c.id < decode_cursor(args["cursor"]))
    limit = whole_number(args.get("limit") or DEFAULT_LIMIT, "limit", low=1, high=MAX_LIMIT, what="records a page")
    with read_transaction(engine) as conn:
        rows = conn.execute(query.limit(limit + 1)).all()
        records = [audit_record(r) for r in rows[:limit]]
        # A job's own record (no entry) carries its items' counts, so a folded row says how it went.
        counts = _job_counts(conn, {r["job_id"] for r in records if r["job_id"] and not r["entry_id"]
                                    and r["action"].startswith("bulk_")})
    for record in records:
        if record["job_id"] in counts and not record["entry_id"] and record["action"].startswith("bulk_"):
            record["job"] = counts[record["job_id"]]
    return {"actions": records, "next_cursor": encode_cursor(records[-1]["id"]) if len(rows) > limit else None}
