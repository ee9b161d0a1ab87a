"""What choosing a bulk job's entries "only those that pass the schema" costs: time and memory.

    python bench/bench_selection.py --entries 100000                       # this checkout
    python bench/bench_selection.py --entries 100000 --trees . /tmp/base   # and another, taking turns

One SQLite database of ``--entries`` demo orders (every other one with a price written as text,
which the demo's schema refuses) is filled once; then each checkout, in a process of its own,
taking turns for ``--rounds``, selects them as a bulk preview or job with ``only_valid`` does
(actions/bulk/jobs.py select_items over the filter ``subject=orders.created``). Prints each run's
seconds and how far the selection raised the process's peak resident memory (ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

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


def one_run(url: str) -> dict:
    """In a checkout's own process: the selection, timed, and the peak memory it added."""
    from dlq_dashboard.actions.bulk.jobs import select_items
    from dlq_dashboard.config import load_settings
    from dlq_dashboard.demo.service import DEMO_SCHEMAS
    from dlq_dashboard.runtime import Runtime

    rt = Runtime.create(load_settings({}, database_url=url, schemas_dir=str(DEMO_SCHEMAS)))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    items, summary = select_items(rt, filter_args={"subject": "orders.created"}, only_valid=True)
    seconds = time.perf_counter() - started
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    return {"seconds": seconds, "peak_mb": grown / 1024, "taken": len(items), "left_out": summary["left_out_invalid"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    add_tree_options(parser)
    args = parser.parse_args()
    if enter_tree(args):
        print(json.dumps(one_run(args.url)))
        return
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/selection.sqlite3"
        started = time.perf_counter()
        fill(url, args.entries)
        print(f"{args.entries:,} entries stored in {time.perf_counter() - started:.0f} s; "
              f"{args.rounds} rounds, the checkouts taking turns")
        runs: dict[str, list[dict]] = {tree: [] for tree in args.trees}
        for round_ in range(1, args.rounds + 1):
            for tree in args.trees:
                out = subprocess.run([sys.executable, __file__, "--one-tree", str(Path(tree).resolve()), "--url", url],
                                     check=True, capture_output=True, text=True).stdout
                run = json.loads(out.strip().splitlines()[-1])
                runs[tree].append(run)
                print(f"round {round_} {tree}: {run['seconds']:.2f} s, peak memory +{run['peak_mb']:.0f} MB, "
                      f"{run['taken']:,} taken, {run['left_out']:,} left out")
        for tree, done in runs.items():
            print(f"{tree}: median {statistics.median(r['seconds'] for r in done):.2f} s, "
                  f"peak memory +{statistics.median(r['peak_mb'] for r in done):.0f} MB")


if __name__ == "__main__":
    main()
