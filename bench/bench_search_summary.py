"""A search's summary and groups at a million entries, this checkout against another (a baseline)
in one run.

    git worktree add --detach /tmp/baseline-search main     # once: the code to compare with
    python bench/bench_search_summary.py --baseline /tmp/baseline-search
    python bench/bench_search_summary.py --baseline /tmp/baseline-search --url postgresql://...  # a built database
    python bench/bench_search_summary.py --database sqlite --entries 100000

Builds one database as bench/bench_summaries.py does (the same rows, every entry indexed for
search as the mirror's pass does, its three key fields filled; PostgreSQL in a server started
here from tests/postgres.py and removed at the end), or uses ``--url``'s. Each checkout runs in a
process of its own (``--worker ROOT``: its own ``dlq_dashboard`` and ``bench_pages`` imported from
ROOT) with a viewer's test client over that one database. After two warm-up passes, each round
asks every request once in turn, as a person moving between searches does (the same request over
and over finds its pages in the server's buffers and flatters it), each request timed by both
checkouts one after the other (who goes first alternates): wall milliseconds, since most of a
search's time is the database server's. Prints the median and the 90th percentile of each, and the medians' ratio.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (label, path): a search of a common word (1 entry in 20 and more), of a rarer prefix (11,000
#: matches at a million), of a word in no entry, a search with another filter, and the unfiltered
#: summary beside them; the same for the groups page and its JSON.
REQUESTS = (
    ("summary, unfiltered (kept counts)", "/summary"),
    ("summary, q=widget (1 entry in 20 and more)", "/summary?q=widget"),
    ("summary, q=rare42 (a prefix: 11,000 matches)", "/summary?q=rare42"),
    ("summary, q=zzqqxx (no match)", "/summary?q=zzqqxx"),
    ("summary, q=widget&reason=fatal (1 in 5 of the matches)", "/summary?q=widget&reason=fatal"),
    ("summary, q=widget&subject=orders.* (3 subjects of 20)", "/summary?q=widget&subject=orders.*"),
    ("GET /api/summary, unfiltered", "/api/summary"),
    ("GET /api/summary?q=widget", "/api/summary?q=widget"),
    ("GET /api/summary?q=rare42", "/api/summary?q=rare42"),
    ("GET /api/summary?q=widget&reason=fatal", "/api/summary?q=widget&reason=fatal"),
    ("groups, unfiltered (kept counts)", "/groups"),
    ("groups, q=widget", "/groups?q=widget"),
    ("groups, q=widget&reason=fatal", "/groups?q=widget&reason=fatal"),
    ("GET /api/groups?q=widget", "/api/groups?q=widget"),
    # A key field (bench_summaries.FIELDS, filled at the build) and a filter the kept counts do not hold.
    ("groups, field.customer=alice (1 entry in 20)", "/groups?field.customer=alice"),
    ("GET /api/groups?field.customer=alice", "/api/groups?field.customer=alice"),
    ("groups, consumer=billing (1 entry in 5)", "/groups?consumer=billing"),
    ("GET /api/groups?consumer=billing", "/api/groups?consumer=billing"),
    ("summary, field.customer=alice (1 entry in 20)", "/summary?field.customer=alice"),
    ("GET /api/summary?field.customer=alice", "/api/summary?field.customer=alice"),
    ("summary, consumer=billing (1 entry in 5)", "/summary?consumer=billing"),
    ("GET /api/summary?consumer=billing", "/api/summary?consumer=billing"),
)


#: bench_summaries.FIELDS, the key fields the build fills (DLQ_LIST_FIELDS of both checkouts).
KEY_FIELDS = (("customer", "/customer"), ("note", "/note"), ("order", "/order_id"))


def worker(root: Path, url: str) -> None:
    """Serve timings over stdin/stdout: a line {"path"} in, {"ms"} (one request's) out."""
    sys.path[:0] = [str(root), str(root / "bench")]
    import bench_pages

    with tempfile.TemporaryDirectory() as workdir:
        _, client = bench_pages.open_client(url, Path(workdir), list_fields=KEY_FIELDS)
        # As `python app.py` does once started (cli/main.py): what the start made is left out of
        # the collector's full walks, which otherwise take ~95 ms here every few summaries.
        gc.collect()
        gc.freeze()
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            path = json.loads(line)["path"]
            began = time.perf_counter()
            response = client.get(path)
            took = (time.perf_counter() - began) * 1000
            if response.status_code != 200:
                raise SystemExit(f"{path}: {response.status_code}")
            print(json.dumps({"ms": took}), flush=True)


class Checkout:
    def __init__(self, name: str, root: Path, url: str):
        self.name = name
        self.process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", str(root),
                                         "--url", url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._answer()

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: the worker ended")
        return json.loads(line)

    def time(self, path: str) -> float:
        self.process.stdin.write(json.dumps({"path": path}) + "\n")
        self.process.stdin.flush()
        return self._answer()["ms"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def build(database: str, entries: int, postgres) -> str:
    """A database of ``entries`` entries, indexed for search; its URL."""
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
    import bench_pages
    import bench_summaries

    began = time.perf_counter()
    if postgres is not None:
        url = postgres.create_database()
        bench_pages.build_postgres(url, entries)
        bench_summaries.index_search(url)
    else:
        path = Path(tempfile.mkdtemp(prefix="search-summary-")) / "dlq.sqlite3"
        url = f"sqlite:///{path}"
        bench_pages.build_database(path, entries)  # indexes the FTS table as it writes
    assert bench_summaries.FIELDS == KEY_FIELDS
    bench_summaries.fill_key_fields(url)
    print(f"{entries:,} entries built, indexed and their key fields filled in {time.perf_counter() - began:.0f} s",
          flush=True)
    return url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout (git worktree) to compare with")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="postgresql")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--url", help="a database built before (skips the build)")
    parser.add_argument("--rounds", type=int, default=40, help="each request timed this many times a checkout")
    parser.add_argument("--only", nargs="+", help="time only the requests whose label holds one of these texts")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        worker(options.worker.resolve(), options.url)
        return 0
    requests = [(label, path) for label, path in REQUESTS if not options.only or any(o in label for o in options.only)]
    postgres = None
    if options.url is None and options.database == "postgresql":
        sys.path.insert(0, str(ROOT))
        from tests.postgres import PostgresServer

        postgres = PostgresServer().start()
    try:
        url = options.url or build(options.database, options.entries, postgres)
        checkouts = [Checkout("this checkout", ROOT, url)]
        if options.baseline:
            checkouts.insert(0, Checkout("baseline", options.baseline.resolve(), url))
        try:
            samples = {(c.name, label): [] for c in checkouts for label, _ in requests}
            for round_ in range(options.rounds + 2):
                for i, (label, path) in enumerate(requests):
                    for c in (checkouts if (round_ + i) % 2 == 0 else checkouts[::-1]):
                        took = c.time(path)
                        if round_ >= 2:  # two warm-up passes
                            samples[(c.name, label)].append(took)
        finally:
            for c in checkouts:
                c.close()
    finally:
        if postgres is not None:
            postgres.remove()
    names = [c.name for c in checkouts]
    print(f"\nWall ms a request, a viewer, {options.rounds} rounds: median (90th percentile)\n")
    print("| request | " + " | ".join(names) + (" | ratio |" if len(names) == 2 else " |"))
    print("| --- | " + " | ".join("---:" for _ in names) + (" | ---: |" if len(names) == 2 else " |"))
    for label, _ in requests:
        medians = [statistics.median(samples[(n, label)]) for n in names]
        p90 = [statistics.quantiles(samples[(n, label)], n=10)[-1] for n in names]
        ratio = f" | {medians[1] / medians[0]:.2f}×" if len(names) == 2 else ""
        print(f"| {label} | " + " | ".join(f"{m:.1f} ({p:.1f})" for m, p in zip(medians, p90)) + ratio + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
