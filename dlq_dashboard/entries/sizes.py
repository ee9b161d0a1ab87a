"""How much of a job's or a group's entries is still stored (Store's part): whether a text about
them can be masked with their values (access/unread.py)."""

from __future__ import annotations

import json

from sqlalchemy import Engine, select

from ..db.models import FailureGroup, GroupActivity, Job

GROUPS, ACTIVITY, JOBS = FailureGroup.__table__, GroupActivity.__table__, Job.__table__


class Sizes:
    """Store's lookups of the sizes of jobs and groups."""

    engine: Engine

    def job_sizes(self, job_ids) -> dict[int, tuple[int, bool]]:
        """{job: (how many entries it took, whether a purge took some of them)}."""
        ids = sorted({int(j) for j in job_ids})
        if not ids:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(select(JOBS.c.id, JOBS.c.total, JOBS.c.purged).where(JOBS.c.id.in_(ids))).all()
        return {row.id: (row.total, _counts_some(row.purged)) for row in rows}

    def group_sizes(self, group_ids) -> dict[int, tuple[int, bool]]:
        """{group: (how many entries it holds, whether a purge removed some: a row of its activity)}."""
        ids = sorted({int(g) for g in group_ids})
        if not ids:
            return {}
        with self.engine.connect() as conn:
            counts = conn.execute(select(GROUPS.c.id, GROUPS.c.open_count + GROUPS.c.republished_count
                                         + GROUPS.c.closed_count).where(GROUPS.c.id.in_(ids))).all()
            purged = set(conn.execute(select(ACTIVITY.c.group_id).distinct().where(
                ACTIVITY.c.group_id.in_(ids), ACTIVITY.c.kind == "purge")).scalars())
        return {group_id: (int(count), group_id in purged) for group_id, count in counts}


def _counts_some(text: str | None) -> bool:
    """Whether a job's ``purged`` (its items' counts a purge took, by state) counts any."""
    try:
        counts = json.loads(text or "{}")
    except ValueError:
        return True
    return not isinstance(counts, dict) or any(counts.values())
