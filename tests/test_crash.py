"""kill -9 of every process of the dashboard (``python app.py``, its mirror's process and the
writer), at random moments of a 20,000-message backlog: after a restart every message is an entry
exactly once, byte for byte."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from . import support

ROOT = Path(__file__).resolve().parent.parent
BACKLOG = 20_000


def start_dashboard(tmp_path: Path, nats_url: str, db: Path, scratch: Path) -> subprocess.Popen:
    env = {**os.environ, "NATS_URL": nats_url, "DATABASE_URL": f"sqlite:///{db}", "SECRET_KEY": "crash-test",
           "PYTHONUNBUFFERED": "1",
           # What a process killed with -9 leaves (multiprocessing's directories) goes here.
           "TMPDIR": str(scratch)}
    log = open(tmp_path / "dashboard.log", "ab")
    try:
        # A session of its own: its process group is the dashboard's processes and no other.
        return subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", "0"], cwd=tmp_path, env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=support.ends_with_this_process())
    finally:
        log.close()


def count_entries(db: Path) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0]
    except sqlite3.OperationalError:  # the schema is not created yet
        return 0
    finally:
        conn.close()


def payload(i: int) -> bytes:
    return json.dumps({"n": i, "pad": "x" * (i % 97)}).encode()


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_kill_9_at_random_moments_loses_nothing_and_stores_nothing_twice(tmp_path, nats_server, scratch):
    async def create_stream():
        nc = await nats.connect(nats_server.url)
        await nc.jetstream().add_stream(name="DLQ", subjects=["dlq.>"])
        await nc.close()

    support.run(create_stream())
    support.run(support.publish_fast(nats_server.url, "dlq.orders.created", BACKLOG,
                     lambda i: (payload(i), {"Dlq-Original-Subject": "orders.created", "Dlq-Reason": "fatal"})))
    # At the newest revision already, as after any first start: no kill falls in the migrations
    # (each waits for a new entry), so the first start need not run them all again.
    db = tmp_path / "dlq.sqlite3"
    support.migrated_sqlite(db)
    rng = random.Random(os.environ.get("CRASH_SEED", "20000"))
    kills = 0
    for _ in range(4):
        proc = start_dashboard(tmp_path, nats_server.url, db, scratch)
        threshold = count_entries(db) + rng.randint(1, 4000)
        try:
            # A count every 0.05 s: each opens the database, and a count every 5 ms took much of a
            # CPU from the process being tested. The moment stays random: the threshold is.
            support.wait_for(lambda: count_entries(db) >= threshold or proc.poll() is not None, timeout=60, interval=0.05,
                     message=f"{threshold} entries")
        finally:
            # All at once, as a power cut would: the writer too, wherever its transaction is.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        kills += 1
        if count_entries(db) >= BACKLOG:
            break
    assert kills >= 2, "the backlog was drained before a second kill: make it larger"

    proc = start_dashboard(tmp_path, nats_server.url, db, scratch)
    try:
        support.wait_for(lambda: count_entries(db) >= BACKLOG, timeout=120, interval=0.05, message="the whole backlog")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0, (tmp_path / "dashboard.log").read_text()[-2000:]

    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT dlq_seq, payload FROM entries ORDER BY dlq_seq").fetchall()
    conn.close()
    assert len(rows) == BACKLOG
    assert [seq for seq, _ in rows] == list(range(1, BACKLOG + 1))
    assert all(bytes(body) == payload(seq - 1) for seq, body in rows)
