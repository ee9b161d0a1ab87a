"""Pages of a time window on SQLite at a million entries, as a bar of the chart links them
(``since`` and ``until``), as ``until`` alone and as the list's "last hour" and "last day" links
(``since`` alone), side by side for two checkouts.

    python bench/bench_time_windows.py [--entries 1000000] [--runs 9] [--rounds 2] [--keep]
                                       --trees <baseline checkout> .

One database (bench_pages.py's entries: a week of failures, ids ascending with time, so an
hour holds about 6,000 at a million) is built under bench/out/ (``--keep`` reuses it), and
each tree (a checkout, a process of its own) times every request through Flask's test client
(routing, queries, template; no network): the median of ``--runs`` after a warm-up. Trees take
turns ``--rounds`` times. Printed: a row a request, a column a tree and round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from trees import add_tree_options, enter_tree

HERE = Path(__file__).resolve().parent
START = datetime(2026, 11, 1)  # bench_pages.py's first entry


def requests_for(count: int) -> list[tuple[str, str]]:
    """(label, URL) of each request; times are of bench_pages.py's entries at ``count``."""
    def at(fraction: float) -> str:
        return (START + timedelta(days=7 * fraction)).strftime("%Y-%m-%dT%H:%M:%SZ")

    hour = f"since={at(4 / 7)}&until={at(4 / 7 + 1 / 168)}"  # an hour three days back
    day = f"since={at(3 / 7)}&until={at(4 / 7)}"  # a day, three days back: more than WINDOW_IDS_CAP
    return [
        ("an hour, 3 days back: list", f"/?{hour}"),
        ("an hour: list, status=open", f"/?status=open&{hour}"),
        ("an hour: search (q=widget)", f"/?q=widget&{hour}"),
        ("an hour: summary fragment", f"/summary?{hour}"),
        ("an hour: groups (open)", f"/groups?{hour}"),
        ("an hour: GET /api/entries", f"/api/entries?{hour}"),
        ("a day, 3 days back: list", f"/?{day}"),
        ("a day: list, status=open", f"/?status=open&{day}"),
        ("a day: groups (open)", f"/groups?{day}"),
        ("until an hour after the first entry", f"/?until={at(1 / 168)}"),
        ("until an hour before the last entry", f"/?until={at(1 - 1 / 168)}"),
        ("since an hour before the last entry: list", f"/?since={at(1 - 1 / 168)}"),
        ("since an hour before: summary fragment", f"/summary?since={at(1 - 1 / 168)}"),
        ("since an hour before: groups (open)", f"/groups?since={at(1 - 1 / 168)}"),
        ("since an hour before: closed, terminated", f"/?status=closed&reason=terminated&since={at(1 - 1 / 168)}"),
        ("since a day before: summary fragment", f"/summary?since={at(1 - 1 / 7)}"),
        ("since a day before: groups (open)", f"/groups?since={at(1 - 1 / 7)}"),
    ]


def one_tree(args) -> None:
    """Time the requests with one tree's code (its modules first on the path); print JSON."""
    import bench_pages

    with tempfile.TemporaryDirectory() as work:
        _, client = bench_pages.open_client(f"sqlite:///{args.database}", Path(work))
        medians = {}
        for label, url in requests_for(args.entries):
            times = []
            for _ in range(args.runs + 1):
                began = time.perf_counter()
                response = client.get(url)
                response.get_data()
                times.append((time.perf_counter() - began) * 1000)
                assert response.status_code == 200, (url, response.status_code)
            medians[label] = statistics.median(times[1:])
    print(json.dumps(medians))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=9, help="timed runs a request (the median is kept)")
    parser.add_argument("--rounds", type=int, default=2, help="how many times the trees take turns")
    parser.add_argument("--keep", action="store_true", help="reuse a database of the right size in bench/out/")
    add_tree_options(parser)
    parser.add_argument("--database", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if enter_tree(args):
        one_tree(args)
        return
    sys.path[:0] = [str(HERE.parent), str(HERE)]
    import bench_pages

    database = HERE / "out" / f"windows-{args.entries}.sqlite3"
    database.parent.mkdir(parents=True, exist_ok=True)
    if not (args.keep and database.exists()):
        print(f"building {args.entries:,} entries ...", flush=True)
        print(f"  {bench_pages.build_database(database, args.entries):.0f} s", flush=True)
    columns, results = [], []
    for round_ in range(args.rounds):
        for tree in args.trees:
            out = subprocess.run([sys.executable, __file__, "--entries", str(args.entries), "--runs", str(args.runs),
                                  "--database", str(database), "--one-tree", str(Path(tree).resolve())],
                                 cwd=tree, check=True, capture_output=True, text=True,
                                 env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}).stdout
            columns.append(f"{Path(tree).resolve().name}, round {round_ + 1}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    print(f"\n{args.entries:,} entries, median ms of {args.runs} runs")
    print("| request | " + " | ".join(columns) + " |")
    print("| --- |" + " ---: |" * len(columns))
    for label, _ in requests_for(args.entries):
        print(f"| {label} | " + " | ".join(f"{r[label]:.1f}" for r in results) + " |")
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
