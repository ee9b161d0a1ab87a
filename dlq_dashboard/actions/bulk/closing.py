"""A bulk job's items' results, and a close or reopen job's window: each window's outcome is written with
its items' results in one transaction (work.py runs the windows)."""

from __future__ import annotations

import json

from sqlalchemy import bindparam, func, insert, select, update

from ...db.counts import Change, count_changes
from ...db.engine import write_transaction
from ...db.rows import UNCACHED, among, update_rows
from ...times import utcnow
from ..close import delete_from_dlq
from ..context import ActionContext
from ..decisions import close_values, decide_close, decide_reopen, locking, pending_intents, reopen_values
from ..errors import Conflict
from ..intents import ACTIONS, ENTRIES
from .jobs import ITEMS, JOBS


def close_window(rt: ActionContext, job_id: int, job, items) -> None:
    """Close a window of a close job's items, or reopen a reopen job's, each as a single close or
    reopen would, in one transaction."""
    reopening = job["action"] == "reopen"
    decide = decide_reopen if reopening else decide_close
    now = utcnow()
    results: dict[int, tuple[str, str]] = {}
    with write_transaction(rt.engine) as conn:
        ids = [entry_id for entry_id, _ in items]
        rows = {r.id: r._mapping for r in conn.execute(locking(conn, select(ENTRIES).where(ENTRIES.c.id.in_(ids))))}
        pending = pending_intents(conn, ids)
        changing = []
        for entry_id, version in items:
            row = rows.get(entry_id)
            if row is None:
                results[entry_id] = ("failed", "The entry no longer exists.")
                continue
            try:
                decide(row, version, pending.get(entry_id, []))
                changing.append(((entry_id, version), row))
            except Conflict as exc:
                results[entry_id] = ("skipped", str(exc))
        deleted: dict[int, str] = {}
        to_delete = [row for _, row in changing if row["dlq_stream"] and row["dlq_seq"]]
        if rt.settings.delete_on_close and to_delete and not reopening:
            deleted = delete_from_dlq(rt, to_delete)
        if changing:
            values = reopen_values(now) if reopening else close_values(job["actor"], job["note"], now)
            conn.execute(update(ENTRIES).where(ENTRIES.c.id == bindparam("b_id"),
                                               ENTRIES.c.version == bindparam("b_version"))
                         .values(version=ENTRIES.c.version + 1, **values),
                         [{"b_id": entry_id, "b_version": version} for (entry_id, version), _ in changing])
            count_changes(conn, [Change(row["group_id"], row["group_id"], row["received_at"], row["status"],
                                        values["status"]) for _, row in changing])
            conn.execute(insert(ACTIONS), [{
                "entry_id": entry_id, "job_id": job_id, "action": job["action"], "actor": job["actor"],
                "at": now, "note": job["note"], "version": version, "detail": json.dumps(
                    {"was": row["status"]} if reopening else
                    {"dlq_delete": deleted[entry_id]} if entry_id in deleted else {}),
            } for (entry_id, version), row in changing])
            for (entry_id, _), row in changing:
                results[entry_id] = ("done", f"Reopened (was {row['status']})." if reopening else "Closed." + (
                    f" DLQ message {deleted[entry_id]}." if entry_id in deleted else ""))
        write_results(conn, job_id, results)


# --- the items' results ----------------------------------------------------------------------

def write_results(conn, job_id: int, results: dict[int, tuple[str, str | None]]) -> None:
    """Move these items out of pending with their results, and count them on the job."""
    if not results:
        return
    # Only this job's runner (it holds the job's lease) moves its items out of pending, once.
    plain = [e for e, (s, r) in results.items() if s == "done" and r is None]
    if plain:
        conn.execute(update(ITEMS).where(ITEMS.c.job_id == job_id, among(conn, ITEMS.c.entry_id, plain),
                                         ITEMS.c.state == "pending").values(state="done"), execution_options=UNCACHED)
    update_rows(conn, ITEMS, "entry_id", [{"entry_id": e, "state": s, "result": r}
                                          for e, (s, r) in results.items() if r is not None],
                match={"job_id": job_id, "state": "pending"})
    done = sum(1 for s, _ in results.values() if s == "done")
    conn.execute(update(JOBS).where(JOBS.c.id == job_id).values(
        done=JOBS.c.done + done, failed=JOBS.c.failed + len(results) - done))


def count_results(conn, job_id: int) -> None:
    """Count a job's items again from their states (when it ends)."""
    counts = dict(conn.execute(select(ITEMS.c.state, func.count()).where(ITEMS.c.job_id == job_id)
                               .group_by(ITEMS.c.state)).all())
    conn.execute(update(JOBS).where(JOBS.c.id == job_id).values(
        done=counts.get("done", 0), failed=counts.get("failed", 0) + counts.get("skipped", 0)))
