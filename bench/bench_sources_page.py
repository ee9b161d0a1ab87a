"""Server-side time of GET /api/sources and /sources against the groups page (the baseline, same
run), with three sources of G groups each, every group with arrivals in a third of the last
hour's minutes (the worst the trend reads: one row of arrivals a group and minute).

    python bench/bench_sources_page.py                    # 300 and 3,000 groups a source
    python bench/bench_sources_page.py --groups 100 1000 --runs 15

Builds a SQLite database of its own under a temporary folder (the app's schema, then the groups
and arrivals rows as the mirror keeps them), and times each request through the Flask test client
(routing, queries, template; no network) as the median of several runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SOURCES = ("orders", "billing", "shipping")
URLS = ("/api/sources", "/sources", "/api/groups?status=open", "/groups")


def open_client(database_url: str, workdir: Path, sources):
    """The app of ``sources`` over ``database_url`` (nothing started) and a viewer's test client."""
    from dlq_dashboard import create_app
    from dlq_dashboard.accounts import create_user
    from dlq_dashboard.config import Settings
    from dlq_dashboard.runtime import runtime_of

    settings = Settings(database_url=database_url, nats_urls=("nats://127.0.0.1:1",), sources=sources,
                        instance_path=str(workdir / "instance"), secret_key="bench")
    app = create_app({"SETTINGS": settings, "TESTING": True})
    create_user(runtime_of(app).engine, "bench-viewer", "bench-password", "viewer")
    client = app.test_client()
    html = client.get("/login").get_data(as_text=True)
    token = html.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    client.post("/login", data={"username": "bench-viewer", "password": "bench-password", "csrf_token": token})
    return app, client


def seed(app, per_source: int) -> None:
    """``per_source`` groups in each source, with arrivals in every third minute of the last hour."""
    from sqlalchemy import insert

    from dlq_dashboard.db.counts import ARRIVALS, GROUPS, bucket
    from dlq_dashboard.runtime import runtime_of
    from dlq_dashboard.times import utcnow

    now, groups, arrivals, gid = bucket(utcnow(), 60), [], [], 0
    for source in SOURCES:
        for i in range(per_source):
            gid += 1
            groups.append({"id": gid, "source": source, "subject": f"{source}.s{i % 50}", "reason": "fatal",
                           "key": f"error {i}", "open_count": i % 97 + 1, "republished_count": 0,
                           "closed_count": 0, "first_seen": now, "last_seen": now})
            arrivals.extend({"width": 60, "bucket": now - timedelta(minutes=m), "group_id": gid, "status": "open",
                             "count": 1} for m in range(0, 60, 3))
    with runtime_of(app).engine.begin() as conn:
        conn.execute(insert(GROUPS), groups)
        conn.execute(insert(ARRIVALS), arrivals)


def time_requests(client, runs: int) -> dict[str, float]:
    """The median time in ms of each URL, after one warm-up request."""
    found = {}
    for url in URLS:
        assert client.get(url).status_code == 200, url
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            client.get(url)
            times.append((time.perf_counter() - began) * 1000)
        found[url] = statistics.median(times)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[300, 3000], help="groups a source")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    from dlq_dashboard.sources import Source

    sources = tuple(Source(name=name, nats_urls=(f"nats://127.0.0.1:{port}",), stream="DLQ")
                    for port, name in enumerate(SOURCES, 1))
    print("| groups a source | " + " | ".join(URLS) + " |")
    print("| --- |" + " --- |" * len(URLS))
    for count in args.groups:
        with tempfile.TemporaryDirectory() as folder:
            workdir = Path(folder)
            app, client = open_client(f"sqlite:///{workdir / 'bench.sqlite3'}", workdir, sources)
            seed(app, count)
            found = time_requests(client, args.runs)
            print(f"| {count:,} | " + " | ".join(f"{found[url]:.0f} ms" for url in URLS) + " |", flush=True)
            from dlq_dashboard.runtime import runtime_of
            runtime_of(app).stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
