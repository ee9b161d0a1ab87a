"""A purge run killed mid-batch (kill -9 of `flask --app app purge`, or of the process running the
hourly purge) left its `purges` record unfinished for good, as if it still ran, and no audit
record of what it had purged. The next run tells it as interrupted: it closes the record and
writes the audit record saying so; a run still going (its lease held by a live process) is left."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert, select, update

from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.actions.purge import purge_entries, tell_interrupted
from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.db.leases import new_holder
from dlq_dashboard.db.models import Action, Entry, Lease, Purge
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support

ROOT = Path(__file__).resolve().parent.parent
DAY = 86400

#: A purge in a process of its own, a batch an entry, that kills itself (SIGKILL: no cleanup)
#: when it is about to start its second batch: the first one's transaction is committed.
KILLED_MID_RUN = """
import os, signal, sys
from dlq_dashboard import create_app
from dlq_dashboard.actions.purge import purge_entries
from dlq_dashboard.config import Settings
from dlq_dashboard.runtime import runtime_of

settings = Settings(database_url=os.environ["PURGE_DATABASE"], nats_urls=(os.environ["PURGE_NATS"],),
                    instance_path=os.environ["PURGE_INSTANCE"], secret_key="test-secret", retention=0)
rt = runtime_of(create_app({"SETTINGS": settings}))
assert rt.connect_nats()
asked = []

def stopping():
    asked.append(1)
    if len(asked) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return False

purge_entries(rt, older_than=7 * 86400, actor="cli:killed", batch=1, stopping=stopping)
sys.exit(3)  # not reached
"""


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """No periodic purge: each test purges when it says so."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, retention=0)


def records(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(Purge.id, Purge.actor, Purge.closed, Purge.finished_at)
                                               .order_by(Purge.id))]


def purge_audit(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(Action.actor, Action.note, Action.detail)
                                               .where(Action.action == "purge").order_by(Action.id))]


@pytest.mark.both_databases
def test_a_run_killed_mid_batch_is_told_as_interrupted_by_the_next_run(app, nats_server, tmp_path):
    rt = runtime_of(app)
    ids = [support.dead_letter(rt.engine, seq) for seq in range(1, 4)]
    for entry_id in ids:
        close_entry(rt, entry_id, 1, actor="test")
    with write_transaction(rt.engine) as conn:
        conn.execute(update(Entry).where(Entry.id.in_(ids)).values(updated_at=utcnow() - timedelta(days=10)))

    child = subprocess.run([sys.executable, "-c", KILLED_MID_RUN], cwd=ROOT, capture_output=True, text=True,
                           timeout=120, env={**os.environ, "PURGE_DATABASE": rt.settings.database_url,
                                             "PURGE_NATS": nats_server.url,
                                             "PURGE_INSTANCE": str(tmp_path / "child")})
    assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
    [(killed, actor, closed, finished)] = records(rt.engine)
    assert (actor, closed, finished) == ("cli:killed", 1, None)  # one batch done, then killed
    assert purge_audit(rt.engine) == []

    report = purge_entries(rt, older_than=7 * DAY, actor="test")
    assert report.total == 2
    (first, *_, first_finished), (second, *_, second_finished) = records(rt.engine)
    assert first == killed and first_finished is not None and second_finished is not None
    (told_actor, note, detail), (actor, _, _) = purge_audit(rt.engine)
    assert told_actor == "cli:killed" and actor == "test"
    assert note.startswith("1 resolved entries older than 7d purged by a run started ")
    assert note.endswith("that was interrupted before it finished")
    detail = json.loads(detail)
    assert (detail["purge"], detail["interrupted"], detail["total"]) == (killed, True, 1)
    with rt.engine.connect() as conn:  # the runs' leases went with them
        assert conn.execute(select(Lease.name).where(Lease.name.startswith("purge:"))).all() == []
    assert tell_interrupted(rt) == []  # told once


def test_a_run_still_going_is_not_told_as_interrupted(offline_app):
    rt = runtime_of(offline_app)
    with write_transaction(rt.engine) as conn:
        going, gone, expired = (conn.execute(insert(Purge).values(started_at=utcnow(), actor=a, older_than=DAY)
                                             .returning(Purge.id)).scalar_one() for a in ("going", "gone", "expired"))
        conn.execute(insert(Lease).values(name=f"purge:{going}", holder=new_holder(),
                                          expires_at=utcnow() + timedelta(minutes=10)))
        # Its process on this host is gone: not going, though its lease has not run out.
        conn.execute(insert(Lease).values(name=f"purge:{gone}", holder=f"{socket.gethostname()}:999999999:x",
                                          expires_at=utcnow() + timedelta(minutes=10)))
        conn.execute(insert(Lease).values(name=f"purge:{expired}", holder=new_holder(),
                                          expires_at=utcnow() - timedelta(seconds=1)))
    assert tell_interrupted(rt) == [gone, expired]
    assert [finished is None for _, _, _, finished in records(rt.engine)] == [True, False, False]
