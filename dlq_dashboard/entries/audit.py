"""Reading the audit: who did what, when, to which entry or job (the actions write it)."""

from __future__ import annotations

import json
from typing import Any, Mapping

from sqlalchemy import Engine, select

from ..db.engine import read_transaction
from ..db.models import Action
from ..numbers import whole_number
from ..times import format_time
from .filters import decode_cursor, encode_cursor

ACTIONS = Action.__table__
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


def audit_record(row) -> dict[str, Any]:
    """One audit row as JSON (the AuditRecord of the OpenAPI document)."""
    m = row._mapping
    return {"id": m["id"], "entry_id": m["entry_id"], "job_id": m["job_id"], "action": m["action"],
            "actor": m["actor"], "at": format_time(m["at"]), "note": m["note"], "version": m["version"],
            "msg_id": m["msg_id"], "publish_stream": m["publish_stream"], "publish_seq": m["publish_seq"],
            "duplicate": m["duplicate"], "error": m["error"], "detail": json.loads(m["detail"] or "{}")}


def audit_page(engine: Engine, args: Mapping[str, str]) -> dict[str, Any]:
    """One page of the audit, newest first, narrowed by ``entry``, ``job``, ``actor`` or
    ``action``; ``limit`` and ``cursor`` page it. InvalidRequest names a bad argument."""
    query = select(ACTIONS).order_by(ACTIONS.c.id.desc())
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
    return {"actions": records, "next_cursor": encode_cursor(records[-1]["id"]) if len(rows) > limit else None}
