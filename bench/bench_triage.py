"""Server-side time of the triage views (SPEC section 11) at 1,000 and 1,000,000 entries (same run):
/groups filtered by state, assignee and team, /api/groups by state, a group's page and its JSON.

    python bench/bench_triage.py                       # builds both databases under bench/out/
    python bench/bench_triage.py --entries 1000000 --runs 15 --keep

The databases are bench_pages.py's (the same rows, reused with --keep: bench/out/pages-N.sqlite3),
brought up to the newest revision, then their groups are given states in turn (open,
investigating by the benchmark's user, resolved in v2, ignored until 100 more failures,
regressed), half of them a team, and a note each. The groups are the same ~80 at both sizes, so
the work a state filter does is the same; what grows is the entries behind them. Writes the table
into docs/PERFORMANCE.md under "## Triage", replacing only that section.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import tempfile
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_pages import build_database, open_client, time_requests, write_report  # noqa: E402

import bench_pages  # noqa: E402

STATES = ("open", "investigating", "resolved", "ignored", "regressed")
USER = "bench-viewer"  # open_client's user: what assignee=me names


def give_states(database_url: str) -> int:
    """Give every group a state in turn, a team to every other one and a note each (once); returns
    the id of the largest group."""
    from sqlalchemy import select, update

    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly, write_transaction
    from dlq_dashboard.db.migrate import migrate
    from dlq_dashboard.db.models import FailureGroup
    from dlq_dashboard.db.triage import record_activity
    from dlq_dashboard.times import utcnow

    engine = create_db_engine(database_url)
    migrate(engine)
    groups = FailureGroup.__table__
    with write_transaction(engine) as conn:
        rows = conn.execute(select(groups.c.id, groups.c.note_count,
                                   (groups.c.open_count + groups.c.republished_count + groups.c.closed_count)
                                   .label("n")).order_by(groups.c.id)).all()
        if rows and rows[0].note_count == 0:
            for i, row in enumerate(rows):
                state = STATES[i % len(STATES)]
                conn.execute(update(groups).where(groups.c.id == row.id).values(
                    state=state, assignee=USER if state == "investigating" else None,
                    resolved_in="v2" if state in ("resolved", "regressed") else None,
                    ignored_until_count=100 if state == "ignored" else None,
                    team="orders" if i % 2 else None, note_count=1, version=2))
            record_activity(conn, [{"group_id": row.id, "at": utcnow(), "actor": USER, "kind": "note",
                                    "text": f"looked at group {row.id}"} for row in rows])
    dispose_quietly(engine)
    return max(rows, key=lambda r: r.n).id


def requests_for(largest: int) -> list[tuple[str, str, dict]]:
    """(label, URL, headers) of each timed request."""
    return [
        ("groups, state=investigating", "/groups?state=investigating", {}),
        ("groups, state=open,regressed", "/groups?state=open,regressed", {}),
        ("groups, every status, state=resolved", "/groups?status=&state=resolved", {}),
        ("groups, assignee=me", "/groups?assignee=me", {}),
        ("groups, team=orders&state=ignored", "/groups?team=orders&state=ignored", {}),
        ("GET /api/groups?state=investigating,ignored", "/api/groups?state=investigating,ignored", {}),
        ("first list page (each entry's group state)", "/", {}),
        ("the largest group's page", f"/groups/{largest}", {}),
        ("GET /api/groups/<id> of the largest", f"/api/groups/{largest}", {}),
    ]


TARGETED = 7


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000, help="the large database's size")
    parser.add_argument("--runs", type=int, default=15, help="timed runs per request (the median is kept)")
    parser.add_argument("--keep", action="store_true", help="reuse databases of the right size in bench/out/")
    parser.add_argument("--no-report", action="store_true", help="print only; leave docs/PERFORMANCE.md alone")
    options = parser.parse_args()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    sizes = [1000, options.entries]
    builds, clients, apps, largest = {}, {}, {}, {}
    from dlq_dashboard.runtime import runtime_of

    with tempfile.TemporaryDirectory() as workdir:
        for size in sizes:
            db_path = out / f"pages-{size}.sqlite3"
            if not (options.keep and db_path.exists()):
                print(f"building {size:,} entries ...", flush=True)
                builds[size] = build_database(db_path, size)
                print(f"  {builds[size]:.1f} s", flush=True)
            largest[size] = give_states(f"sqlite:///{db_path}")
            apps[size], clients[size] = open_client(f"sqlite:///{db_path}", Path(workdir) / str(size))
        # bench_pages' timing loop, over these requests (the sizes take turns request by request).
        bench_pages.requests_for = lambda count: requests_for(largest[count])
        timings = time_requests(clients, options.runs)
        for app in apps.values():
            runtime_of(app).stop()
    small, large = sizes
    rows = []
    for i, (label, _, _) in enumerate(requests_for(0)):
        a, b = timings[small][label], timings[large][label]
        rows.append(f"| {label} | {a:.1f} | {b:.1f} | {b / a:.2f}× | {'yes' if i < TARGETED else '—'} |")
    build_note = ", ".join(f"{n:,} entries built in {t:.0f} s" for n, t in builds.items()) or "databases reused (--keep)"
    load = os.getloadavg()
    section = "\n".join([
        "## Triage",
        "",
        "Server-side time of the triage views (SPEC section 11) through Flask's test client, median of",
        f"{options.runs} runs after two warm-ups, at {small:,} and {large:,} entries in the same run, the two sizes",
        f"taking turns request by request. The target (2× or less) applies to the first {TARGETED} rows.",
        "",
        "```",
        f"python bench/bench_triage.py --entries {large} --runs {options.runs}",
        "```",
        "",
        f"| request | {small:,} entries (ms) | {large:,} entries (ms) | ratio | targeted |",
        "| --- | ---: | ---: | ---: | :---: |",
        *rows,
        "",
        "A state, assignee or team filter is a condition on failure_groups (indexed by state and",
        "assignee, and by team), beside the kept counts: the groups are the same at both sizes, so",
        "the work is too. A group's page reads its counts and trend from the kept counts, its newest",
        "entries by the group's index, and the consumers and streams involved among its newest",
        "2,000 entries (the page says so past that): bounded, but more at a million than at a",
        "thousand, hence not targeted.",
        "",
        (f"Measured {datetime.now():%Y-%m-%d} on a shared, loaded machine (load average "
         f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it ended): {platform.machine()}, {os.cpu_count()} CPUs, "
         f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; {build_note}."),
        "The databases are bench_pages.py's, their ~80 groups given states in turn, a team every other one,",
        "and a note each.",
        "",
    ])
    print(section)
    if not options.no_report:
        write_report(ROOT / "docs" / "PERFORMANCE.md", section, "## Triage")
    return 0


if __name__ == "__main__":
    sys.exit(main())
