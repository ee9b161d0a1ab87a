"""Jobs as the pages show them: who started one, what it took, how fast it goes, when it will
end, how it ended and who cancelled it; and the list of every job, newest first."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any, Mapping

from sqlalchemy import Engine, func, select

from ...db.engine import read_transaction
from ...db.models import FailureGroup, Job, JobItem
from ...entries.filters import decode_cursor, encode_cursor, filter_of
from ...entries.groups import group_label
from ...entries.scoping import jobs_within
from ...ingest.grouping import normalize_error_text
from ...scopes import Scope
from ...times import format_time, utcnow

JOBS, ITEMS, GROUPS = Job.__table__, JobItem.__table__, FailureGroup.__table__
#: The states of the items a job worked on: its rate and its percent (a cancel settles the rest at
#: once, and is neither speed nor progress).
WORKED = ("done", "failed", "skipped")
JOBS_LIMIT, JOBS_MAX = 50, 500
#: What the jobs' list narrows to (``state``): those still running, or those that have ended.
JOB_STATES = ("running", "finished")
#: A job's failure reasons: the items read for them (its page polls each second while it runs),
#: the distinct texts kept of those, and the reasons shown.
REASON_ITEMS, REASON_TEXTS, REASONS_SHOWN = 10_000, 200, 5


def describe_selection(selection: Mapping[str, Any], labels: Mapping[int, str] | None = None) -> str:
    """What a job took, in words: "3 selected entries" ("..., 2 of them not found"), "filter
    subject=orders.* status=open",
    "group <label>" (its other filters after it)."""
    if "ids" in selection:
        n, missing = selection.get("ids") or 0, selection.get("missing") or 0
        words = f"{n:,} selected {'entry' if n == 1 else 'entries'}"
        # Ids that named no entry (or none the operator may act on) are not among what it took.
        return f"{words}, {missing:,} of them not found" if missing else words
    leading, rest = [], []
    for name, value in (selection.get("filter") or {}).items():
        declared = filter_of(name)  # each filter's own words (entries/filters.py)
        words = declared.selection_words(name, value, labels or {}) if declared else f"{name}={value}"
        (leading if declared is not None and declared.leads else rest).append(words)
    if leading:
        return ", ".join([*leading, *([" ".join(rest)] if rest else [])])
    return f"filter {' '.join(rest)}" if rest else "every open entry"


def _rate_and_eta(m: Mapping[str, Any], worked: int, pending: int,
                  now: datetime) -> tuple[float | None, int | None, datetime | None]:
    """Items worked a second since the job started (until it finished), and for a running job
    the seconds left at that rate and when it should end."""
    started = m.get("started_at") or m["created_at"]
    end = m["finished_at"] or now
    elapsed = (end - started).total_seconds() if started else 0
    if not worked or elapsed <= 0:
        return None, None, None
    rate = worked / elapsed
    if m["state"] in ("done", "cancelled") or not pending:
        return round(rate, 1), None, None
    left = round(pending / rate)
    return round(rate, 1), left, now + timedelta(seconds=left)


def job_summary(m: Mapping[str, Any], counts: Mapping[str, int], labels: Mapping[int, str] | None = None,
                now: datetime | None = None) -> dict[str, Any]:
    """A job's row and its items' counts by state as JSON (everything but its items); the items a
    purge took with their entries (``purged``, revision 0023) are counted in, and said."""
    now = now or utcnow()
    purged = json.loads(m.get("purged") or "{}")
    if purged:
        counts = {s: counts.get(s, 0) + purged.get(s, 0) for s in {*counts, *purged}}
    worked = sum(counts.get(s, 0) for s in WORKED)
    pending = counts.get("pending", 0)
    rate, eta_seconds, eta_at = _rate_and_eta(m, worked, pending, now)
    selection = json.loads(m["selection"] or "{}")
    return {
        "id": m["id"], "action": m["action"], "actor": m["actor"], "state": m["state"], "note": m["note"],
        "selection": selection, "selection_text": describe_selection(selection, labels),
        "patch": selection.get("patch"), "total": m["total"],
        "done": counts.get("done", 0), "failed": counts.get("failed", 0), "skipped": counts.get("skipped", 0),
        "cancelled": counts.get("cancelled", 0), "pending": pending,
        # How far it went through its items: a cancelled job's progress bar stops where it stopped.
        "percent": round(100 * worked / m["total"], 1) if m["total"] else 100.0,
        "cancel_requested": bool(m["cancel_requested"]), "created_at": format_time(m["created_at"]),
        "started_at": format_time(m.get("started_at")), "finished_at": format_time(m["finished_at"]),
        "cancelled_by": m.get("cancelled_by"), "cancelled_at": format_time(m.get("cancelled_at")),
        "rate": rate, "eta_seconds": eta_seconds, "eta_at": format_time(eta_at),
        "purged": sum(purged.values()),
    }


def group_labels(conn, selections: list[Mapping[str, Any]]) -> dict[int, str]:
    """The labels of the failure groups these selections name, in one query."""
    ids = {int(g) for s in selections if str(g := (s.get("filter") or {}).get("group", "")).isdigit()
           and int(g) < 2**63}
    if not ids:
        return {}
    return {r.id: group_label(r.key) for r in conn.execute(select(GROUPS.c.id, GROUPS.c.key)
                                                           .where(GROUPS.c.id.in_(ids)))}


def list_jobs(engine: Engine, *, cursor: str | None = None, limit: int = JOBS_LIMIT,
              state: str | None = None, scopes: tuple[Scope, ...] | None = None) -> dict[str, Any]:
    """One page of jobs, newest first (keyset on the id), each as job_summary; ``state``
    "running" keeps the unfinished ones, "finished" the others; ``scopes`` (a scoped reader's)
    keeps the jobs whose every entry they cover (entries/scoping.py jobs_within)."""
    query = select(JOBS).order_by(JOBS.c.id.desc())
    if scopes is not None:
        query = query.where(jobs_within(scopes))
    if cursor:
        query = query.where(JOBS.c.id < decode_cursor(cursor))
    if state == "running":
        query = query.where(JOBS.c.state.in_(("queued", "running")))
    elif state == "finished":
        query = query.where(JOBS.c.state.in_(("done", "cancelled")))
    with read_transaction(engine) as conn:
        rows = conn.execute(query.limit(limit + 1)).all()
        page = rows[:limit]
        counts: dict[int, dict[str, int]] = {}
        if page:
            for job_id, item_state, n in conn.execute(
                    select(ITEMS.c.job_id, ITEMS.c.state, func.count())
                    .where(ITEMS.c.job_id.in_([r.id for r in page])).group_by(ITEMS.c.job_id, ITEMS.c.state)):
                counts.setdefault(job_id, {})[item_state] = n
        labels = group_labels(conn, [json.loads(r.selection or "{}") for r in page])
    now = utcnow()
    jobs = [job_summary(r._mapping, counts.get(r.id, {}), labels, now) for r in page]
    return {"jobs": jobs, "next_cursor": encode_cursor(page[-1].id) if len(rows) > limit else None}


def failure_reason_texts(conn, job_id: int) -> list[dict[str, Any]]:
    """The results of a job's failed and skipped items (of the first REASON_ITEMS by entry), by
    text, most common first (at most REASON_TEXTS): texts that differ only in their digits ("Entry
    17 changed since you saw it") counted as one, told by the first of them (``texts``: how many
    it stands for), with its count and the entry it came from, whose values a reader's mask hides
    in it (access/visible.py job)."""
    items = (select(ITEMS.c.result, ITEMS.c.entry_id)
             .where(ITEMS.c.job_id == job_id, ITEMS.c.state.in_(("failed", "skipped")), ITEMS.c.result.is_not(None))
             .order_by(ITEMS.c.entry_id).limit(REASON_ITEMS).subquery())
    rows = conn.execute(select(items.c.result, func.count().label("n"), func.min(items.c.entry_id).label("entry_id"))
                        .group_by(items.c.result).order_by(func.min(items.c.entry_id))).all()
    alike: dict[str, dict[str, Any]] = {}
    for r in rows:
        found = alike.setdefault(_DIGITS.sub("0", r.result), {"reason": r.result, "count": 0, "entry_id": r.entry_id,
                                                              "texts": 0})
        found["count"] += r.n
        found["texts"] += 1
    return sorted(alike.values(), key=lambda t: (-t["count"], t["reason"]))[:REASON_TEXTS]


_DIGITS = re.compile(r"\d+")


def failure_reasons(texts: list[dict[str, Any]], shown: int = REASONS_SHOWN) -> list[dict[str, Any]]:
    """The texts of failure_reason_texts (as the reader may see them) as reasons, most common
    first: texts that differ only in their values (an id, a number, a quoted value) are one, read
    as ingest/grouping.py normalizes them; a text alone stands as it is."""
    merged: dict[str, tuple[int, set[str], bool]] = {}
    for text in texts:
        count, seen, several = merged.get(key := normalize_error_text(text["reason"]), (0, set(), False))
        # A text standing for several (differing in digits: failure_reason_texts) is told by its key too.
        merged[key] = (count + text["count"], seen | {text["reason"]}, several or text.get("texts", 1) > 1)
    ranked = sorted(merged.items(), key=lambda item: (-item[1][0], item[0]))[:shown]
    return [{"reason": key if several or len(seen) > 1 else next(iter(seen)), "count": count}
            for key, (count, seen, several) in ranked]
