"""What choosing a bulk job's entries costs: time and memory.

    python bench/bench_selection.py --entries 100000                       # this checkout
    python bench/bench_selection.py --entries 100000 --trees . /tmp/base   # and another, taking turns
    python bench/bench_selection.py --database postgresql ...

One database (SQLite, or ``--database postgresql`` started for the run) of ``--entries`` demo orders (every other one with a price written as text,
which the demo's schema refuses) is filled once; then each checkout, in a process of its own,
taking turns for ``--rounds``, does each of ``--what``: ``only_valid`` selects them as a bulk
preview or job "only those that pass the schema" does (actions/bulk/jobs.py select_items over
the filter ``subject=orders.created``); ``job`` makes a close job of all of them by that filter
(create_job, not started: the selection and the job's items written). Prints each run's seconds
and how far it raised the process's peak resident memory (ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from databases import bench_databases  # noqa: E402
from trees import add_tree_options, enter_tree  # noqa: E402


def fill(url: str, entries: int) -> None:
    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
    from dlq_dashboard.db.migrate import migrate
    from dlq_dashboard.demo.orders import OrderFactory
    from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
    from dlq_dashboard.times import utcnow

    engine = create_db_engine(url)
    migrate(engine)
    factory = OrderFactory(random.Random(7))
    headers = {"Dlq-Original-Subject": "orders.created", "Dlq-Reason": "schema_invalid", "Dlq-Error": "price"}
    batch = []
    for seq in range(1, entries + 1):
        payload = factory.make("price_as_string" if seq % 2 else "ok").payload
        batch.append(StreamMessage(seq, "dlq.orders.created", headers, payload, utcnow()))
        if len(batch) == 1000:
            ingest_dlq_batch(engine, "DLQ", "bench", batch)
            batch = []
    if batch:
        ingest_dlq_batch(engine, "DLQ", "bench", batch)
    dispose_quietly(engine)


def one_run(url: str, what: str) -> dict:
    """In a checkout's own process: the selection or the job, timed, and the peak memory it added."""
    from sqlalchemy import delete

    from dlq_dashboard.actions.bulk.jobs import create_job, select_items
    from dlq_dashboard.config import load_settings
    from dlq_dashboard.db.engine import write_transaction
    from dlq_dashboard.db.models import Action, Job, JobItem
    from dlq_dashboard.demo.service import DEMO_SCHEMAS
    from dlq_dashboard.runtime import Runtime

    rt = Runtime.create(load_settings({}, database_url=url, schemas_dir=str(DEMO_SCHEMAS)))
    chosen = {"filter_args": {"subject": "orders.created"}}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    if what == "only_valid":
        items, summary = select_items(rt, only_valid=True, **chosen)
        taken, left_out = len(items), summary["left_out_invalid"]
    else:
        create_job(rt, "close", actor="bench", start=False, **chosen)
        taken, left_out = None, None
    seconds = time.perf_counter() - started
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    if what == "job":  # the next run makes its own
        with write_transaction(rt.engine) as conn:
            for table in (JobItem, Action, Job):
                conn.execute(delete(table.__table__))
    return {"seconds": seconds, "peak_mb": grown / 1024, "taken": taken, "left_out": left_out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--what", nargs="+", choices=("only_valid", "job"), default=["only_valid", "job"])
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--fill", action="store_true", help=argparse.SUPPRESS)
    add_tree_options(parser)
    args = parser.parse_args()
    if enter_tree(args):
        if args.fill:
            fill(args.url, args.entries)
        else:
            print(json.dumps(one_run(args.url, args.what[0])))
        return
    with bench_databases(args.database) as fresh:
        measure(args, {tree: fresh(f"selection{n}") for n, tree in enumerate(args.trees)})


def measure(args: argparse.Namespace, urls: dict[str, str]) -> None:
    """Each checkout fills a database of its own with its own code (an older one cannot open a
    database migrated further), then the runs, the checkouts taking turns."""
    started = time.perf_counter()
    for tree, url in urls.items():
        subprocess.run([sys.executable, __file__, "--one-tree", str(Path(tree).resolve()), "--url", url,
                        "--entries", str(args.entries), "--fill"], check=True)
    print(f"{args.entries:,} entries stored for each checkout in {time.perf_counter() - started:.0f} s; "
          f"{args.rounds} rounds, the checkouts taking turns")
    runs: dict[tuple[str, str], list[dict]] = {(what, tree): [] for what in args.what for tree in args.trees}
    for round_ in range(1, args.rounds + 1):
        for what, tree in runs:
            out = subprocess.run([sys.executable, __file__, "--one-tree", str(Path(tree).resolve()), "--url",
                                  urls[tree], "--what", what], check=True, capture_output=True, text=True).stdout
            run = json.loads(out.strip().splitlines()[-1])
            runs[(what, tree)].append(run)
            chosen = f", {run['taken']:,} taken, {run['left_out']:,} left out" if run["taken"] is not None else ""
            print(f"round {round_} {what} {tree}: {run['seconds']:.2f} s, "
                  f"peak memory +{run['peak_mb']:.0f} MB{chosen}")
    for (what, tree), done in runs.items():
        print(f"{what} {tree}: median {statistics.median(r['seconds'] for r in done):.2f} s, "
              f"peak memory +{statistics.median(r['peak_mb'] for r in done):.0f} MB")


if __name__ == "__main__":
    main()
