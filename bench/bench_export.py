"""Export speed and memory: 1,000,000 entries as NDJSON and JSON (and CSV) through the real
server, side by side with a raw loop that selects the same rows with sqlite3 and writes
json.dumps of each.

    python bench/bench_export.py [--rows 1000000] [--rounds 3] [--workdir DIR] [--record]

The database is built here (a few entries made by the real ingest code, multiplied with
one INSERT ... SELECT). The server is the app under waitress in a subprocess, as in
production; a streaming HTTP client reads each export while a thread samples the server's
VmRSS from /proc. Targets: an export at 50% or more of the raw loop's rows/s, and peak RSS
growth under 50 MB. ``--record`` appends the results to docs/PERFORMANCE.md under "## Export".
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_RATIO = 0.5
TARGET_RSS_MB = 50


def settings_for(workdir: Path):
    from dlq_dashboard.config import Settings

    return Settings(database_url=f"sqlite:///{workdir / 'dlq.sqlite3'}", nats_urls=("nats://127.0.0.1:1",),
                    instance_path=str(workdir / "instance"), secret_key="bench-secret")


# --- the database ---------------------------------------------------------------------------

def _templates():
    """Realistic dead letters: schema failures, exhausted retries, binary and hostile payloads."""
    from dlq_dashboard.ingest.writes import StreamMessage

    order = {"order_id": "ord-20261129-000123", "customer": {"id": "c-42", "name": "Ada Lovelace"},
             "items": [{"sku": f"sku-{i}", "qty": i + 1, "price": 12.5} for i in range(3)], "total": 75.0}
    base = {"Dlq-Original-Stream": "ORDERS", "Dlq-Original-Seq": "17", "Dlq-Consumer": "billing",
            "Dlq-Deliveries": "5", "Dlq-Failed-At": "2026-11-29T10:00:00Z",
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    cases = [
        ("orders.created", json.dumps(order).encode(), {"Dlq-Reason": "schema_invalid",
         "Dlq-Error": "payload does not match orders.created v3",
         "Dlq-Schema-Errors": '[{"path": "/customer/email", "message": "is a required property"}]'}),
        ("orders.paid", json.dumps({**order, "paid": True}).encode(), {"Dlq-Reason": "max_deliveries",
         "Dlq-Error": "timeout calling payments after 30 s"}),
        ("invoices.render", bytes(range(256)), {"Dlq-Reason": "fatal", "Dlq-Error": "not a PDF template"}),
        ("orders.created", '{"note": "</script><script>alert(1)</script> «ünïcødé» ✓"}'.encode(),
         {"Dlq-Reason": "terminated", "Dlq-Error": '=HYPERLINK("http://x")'}),
    ]
    return [StreamMessage(seq=i + 1, subject=f"dlq.{subject}",
                          headers={**base, "Dlq-Original-Subject": subject, **extra},
                          data=data, stored_at=None)
            for i, (subject, data, extra) in enumerate(cases)]


def build_database(workdir: Path, rows: int) -> Path:
    """Create the schema with the app's migrations, then ``rows`` entries in one bulk insert."""
    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly, write_transaction
    from dlq_dashboard.db.migrate import migrate
    from dlq_dashboard.db.models import Entry
    from dlq_dashboard.ingest.writes import ingest_dlq_batch

    try:
        from dlq_dashboard.ingest.writes import index_new_entries
    except ImportError:
        index_new_entries = None

    path = workdir / "dlq.sqlite3"
    engine = create_db_engine(f"sqlite:///{path}")
    migrate(engine)
    templates = _templates()
    ingest_dlq_batch(engine, "DLQ", "bench", templates)

    k = len(templates)
    cols = [c.name for c in Entry.__table__.columns if c.name != "id"]
    picked = ", ".join(f"(n.i + {k}) AS dlq_seq" if c == "dlq_seq" else f"t.{c}" for c in cols)
    with write_transaction(engine) as conn:
        conn.exec_driver_sql(
            f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
            f"INSERT INTO entries ({', '.join(cols)}) SELECT {picked} FROM n "
            f"JOIN entries AS t ON t.id = (n.i % {k}) + 1", (rows - k,))
        if index_new_entries is not None:  # where no trigger keeps the full-text index
            index_new_entries(conn, k)
        count = conn.exec_driver_sql("SELECT COUNT(*) FROM entries").scalar()
    dispose_quietly(engine)
    assert count == rows, count
    return path


# --- the raw loop ---------------------------------------------------------------------------

def raw_loop(db: Path) -> tuple[int, float]:
    """Select the rows newest first with sqlite3 and write json.dumps of each; (rows, seconds)."""
    started = time.perf_counter()
    con = sqlite3.connect(db)
    cursor = con.execute("SELECT * FROM entries ORDER BY id DESC")
    names = [d[0] for d in cursor.description]
    count = 0
    with open(os.devnull, "w") as out:
        for row in cursor:
            record = dict(zip(names, row))
            record["payload"] = base64.b64encode(record["payload"]).decode()
            out.write(json.dumps(record) + "\n")
            count += 1
    con.close()
    return count, time.perf_counter() - started


# --- the server -----------------------------------------------------------------------------

def serve(workdir: Path) -> None:
    """Run the app under waitress (the subprocess side); prints the port."""
    import logging

    import waitress

    from dlq_dashboard import create_app

    logging.getLogger("waitress").setLevel(logging.ERROR)
    app = create_app({"SETTINGS": settings_for(workdir)})
    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=8)  # as app.py
    print(server.effective_port, flush=True)
    server.run()


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (fields 14 and 15 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RssSampler:
    """Samples a process's VmRSS every few milliseconds; ``peak_kb`` is the highest seen."""

    def __init__(self, pid: int, interval: float = 0.01):
        self.pid, self.interval, self.peak_kb = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, _status_kb(self.pid, "VmRSS"))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class Server:
    """The app under waitress in a subprocess, as in production."""

    def __init__(self, workdir: Path, token: str):
        import requests

        self.process = subprocess.Popen([sys.executable, __file__, "--serve", str(workdir)],
                                        stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.pid = self.process.pid
        self.base_url = f"http://127.0.0.1:{int(self.process.stdout.readline())}"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def close(self):
        self.session.close()
        os.killpg(self.pid, signal.SIGTERM)
        self.process.wait(10)


def export_once(server: Server, fmt: str) -> dict:
    """Read one whole export as a client would, sampling the server's RSS meanwhile."""
    cpu_before = _cpu_seconds(server.pid)
    started = time.perf_counter()
    newlines = size = 0
    with RssSampler(server.pid) as sampler:
        with server.session.get(f"{server.base_url}/api/export.{fmt}", stream=True, timeout=600) as response:
            response.raise_for_status()
            for chunk in response.iter_content(chunk_size=1 << 20):
                size += len(chunk)
                newlines += chunk.count(b"\n")
    seconds = time.perf_counter() - started
    rows = {"ndjson": newlines, "json": newlines - 2, "csv": newlines - 1}[fmt]
    return {"rows": rows, "bytes": size, "seconds": seconds, "cpu": _cpu_seconds(server.pid) - cpu_before,
            "peak_kb": sampler.peak_kb}


def measure_export(workdir: Path, token: str, fmt: str) -> dict:
    """One export from a fresh server, after a warm-up; with its idle RSS beside."""
    server = Server(workdir, token)
    try:
        # Warm every code path once (imports, the first connections) before reading idle RSS.
        server.session.get(f"{server.base_url}/api/export.{fmt}?limit=100").raise_for_status()
        server.session.get(f"{server.base_url}/metrics").raise_for_status()
        idle_kb = _status_kb(server.pid, "VmRSS")
        result = export_once(server, fmt)
        result["idle_kb"] = idle_kb
        result["hwm_kb"] = _status_kb(server.pid, "VmHWM")
        return result
    finally:
        server.close()


# --- the run --------------------------------------------------------------------------------

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--formats", default="ndjson,json,csv")
    parser.add_argument("--workdir", type=Path, help="keep the database here (reused when it has --rows rows)")
    parser.add_argument("--record", action="store_true", help="append the results to docs/PERFORMANCE.md")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-export-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return run_bench(args, workdir)
    finally:
        if args.workdir is None:  # a database of its own: gigabytes not to leave behind
            shutil.rmtree(workdir, ignore_errors=True)


def run_bench(args, workdir: Path) -> int:
    """Build or reuse the database, measure every round, print (and record) the table."""
    from dlq_dashboard.accounts import create_token
    from dlq_dashboard.db.engine import create_db_engine, dispose_quietly

    formats = args.formats.split(",")
    db = workdir / "dlq.sqlite3"
    reuse = db.exists() and sqlite3.connect(db).execute("SELECT COUNT(*) FROM entries").fetchone()[0] == args.rows
    if not reuse:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        started = time.perf_counter()
        build_database(workdir, args.rows)
        print(f"built {args.rows:,} entries in {time.perf_counter() - started:.1f} s ({db})", flush=True)
    engine = create_db_engine(f"sqlite:///{db}")
    token = create_token(engine, f"bench-{os.getpid()}-{time.time_ns()}", "viewer")
    dispose_quietly(engine)

    results: dict[str, list[dict]] = {"raw": []}
    for round_no in range(1, args.rounds + 1):
        cpu, started = time.process_time(), time.perf_counter()
        count, _ = raw_loop(db)
        raw = {"rows": count, "seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu}
        results["raw"].append(raw)
        print(f"round {round_no}: raw    {count / raw['seconds']:9,.0f} rows/s  "
              f"{count / raw['cpu']:9,.0f} rows/CPU-s", flush=True)
        for fmt in formats:
            r = measure_export(workdir, token, fmt)
            assert r["rows"] == args.rows, (fmt, r["rows"])
            results.setdefault(fmt, []).append(r)
            print(f"round {round_no}: {fmt:6s} {r['rows'] / r['seconds']:9,.0f} rows/s  "
                  f"{r['rows'] / r['cpu']:9,.0f} rows/CPU-s  {r['bytes'] / r['seconds'] / 1e6:6.1f} MB/s  "
                  f"RSS idle {r['idle_kb'] / 1024:.1f} MiB, peak {r['peak_kb'] / 1024:.1f} MiB", flush=True)

    def median(fmt, key):
        return statistics.median(key(r) for r in results[fmt])

    raw_rate = median("raw", lambda r: r["rows"] / r["seconds"])
    raw_cpu = median("raw", lambda r: r["rows"] / r["cpu"])
    lines = ["| way | rows/s | vs raw | rows per CPU-second | vs raw | MB/s | peak RSS - idle RSS |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
             f"| raw loop: sqlite3 + json.dumps of each row to /dev/null | {raw_rate:,.0f} | 100% | "
             f"{raw_cpu:,.0f} | 100% | | |"]
    ok = True
    for fmt in formats:
        rate = median(fmt, lambda r: r["rows"] / r["seconds"])
        cpu_rate = median(fmt, lambda r: r["rows"] / r["cpu"])
        mbps = median(fmt, lambda r: r["bytes"] / r["seconds"] / 1e6)
        growth = max((r["peak_kb"] - r["idle_kb"]) / 1024 for r in results[fmt])
        lines.append(f"| GET /api/export.{fmt}, waitress, read by an HTTP client | {rate:,.0f} | "
                     f"{rate / raw_rate:.0%} | {cpu_rate:,.0f} | {cpu_rate / raw_cpu:.0%} | {mbps:.0f} | "
                     f"{growth:.1f} MiB |")
        if fmt in ("ndjson", "json"):
            ok = ok and rate / raw_rate >= TARGET_RATIO and growth < TARGET_RSS_MB
    load = os.getloadavg()
    idle = statistics.median(r["idle_kb"] for fmt in formats for r in results[fmt]) / 1024
    summary = (f"{args.rows:,} entries ({db.stat().st_size / 1e9:.2f} GB database), {os.cpu_count()} CPUs, "
               f"load average {load[0]:.1f} at the end. Medians of {args.rounds} rounds; each export from a "
               f"fresh server process (idle RSS about {idle:.0f} MiB), RSS growth is the worst round. "
               f"Targets for NDJSON and JSON (50% of the raw loop's rows/s, RSS growth under "
               f"{TARGET_RSS_MB} MB): {'met' if ok else 'NOT met'}.")
    table = "\n".join(lines)
    print()
    print(table)
    print()
    print(summary)
    if args.record:
        command = "python bench/bench_export.py" + (f" --rows {args.rows}" if args.rows != 1_000_000 else "")
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        path = ROOT / "docs" / "PERFORMANCE.md"
        path.parent.mkdir(exist_ok=True)
        new_file = not path.exists()
        with open(path, "a") as f:
            if new_file:
                f.write("# Performance\n")
            f.write(f"\n## Export\n\nMeasured {stamp} with `{command}`.\n\n{table}\n\n{summary}\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
