"""Every msgId the dashboard makes names its database's installation id: two dashboards on one
NATS (or a database made again from nothing), whose entry ids and versions are each their own,
never send two different messages under one msgId. Against a real nats-server."""

from __future__ import annotations

import re
from datetime import timedelta

import nats
from sqlalchemy import select

from dlq_dashboard.actions import recovery
from dlq_dashboard.actions.decisions import write_claims
from dlq_dashboard.actions.intents import Intent, record_failed, republish_headers
from dlq_dashboard.actions.republish import republish_entry
from dlq_dashboard.db.engine import create_db_engine, write_transaction
from dlq_dashboard.db.installation import INSTALLATION, installation_id
from dlq_dashboard.db.migrate import migrate
from dlq_dashboard.db.models import Entry, Republish
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support


def second_app(make_app, tmp_path, nats_server):
    """Another dashboard on the same nats-server, over a database of its own."""
    folder = tmp_path / "second"
    folder.mkdir()
    settings = support.make_settings(folder, nats_server.url,
                                     database_url=support.migrated_sqlite(folder / "dlq.sqlite3"))
    return make_app(settings=settings, online=True)


def test_two_databases_republishing_their_entry_of_one_id_and_version_both_reach_the_subject(
        app, rt, make_app, tmp_path, nats_server):
    support.make_orders_stream(nats_server.url)  # its duplicate window: 2 minutes
    other = runtime_of(second_app(make_app, tmp_path, nats_server))
    # Each database's entry 1 at version 1: two different dead letters (the DLQ stream made again
    # between them, its seq 1 is another message).
    first = support.dead_letter(rt.engine, 1, payload=b'{"order_id": "from-a"}', Dlq_Reason="fatal")
    second = support.dead_letter(other.engine, 1, payload=b'{"order_id": "from-b"}', Dlq_Reason="fatal")
    assert first == second == 1

    a = republish_entry(rt, 1, 1, actor="alice").publish
    b = republish_entry(other, 1, 1, actor="bob").publish

    assert (a.duplicate, b.duplicate) == (False, False)
    assert a.msg_id != b.msg_id
    assert a.msg_id.startswith(support.msg_id_prefix(rt) + ":") and b.msg_id.startswith(
        support.msg_id_prefix(other) + ":")
    messages = support.stream_messages(nats_server.url)
    assert sorted(m.data for m in messages) == [b'{"order_id": "from-a"}', b'{"order_id": "from-b"}']
    assert sorted(m.headers["Nats-Msg-Id"] for m in messages) == sorted([a.msg_id, b.msg_id])


def test_each_database_has_one_installation_id_of_its_own_kept_across_restarts(app, rt, make_app, tmp_path,
                                                                               nats_server):
    other = runtime_of(second_app(make_app, tmp_path, nats_server))
    with rt.engine.connect() as conn:
        [mine] = conn.execute(select(INSTALLATION.c.installation_id)).scalars().all()
    with other.engine.connect() as conn:
        [theirs] = conn.execute(select(INSTALLATION.c.installation_id)).scalars().all()
    assert mine != theirs and len(mine) == len(theirs) == 16
    again = make_app(settings=runtime_of(app).settings)  # the same database, another start
    assert support.msg_id_prefix(again) == support.msg_id_prefix(rt) == f"dlq-dashboard:{mine}"


def test_a_database_upgraded_to_revision_0030_gets_an_installation_id_once(tmp_path):
    engine = create_db_engine(f"sqlite:///{tmp_path / 'old.sqlite3'}")
    try:
        assert migrate(engine, "0029") == "0029"
        assert migrate(engine, "0030") == "0030"
        with engine.connect() as conn:
            [made] = conn.execute(select(INSTALLATION.c.installation_id)).scalars().all()
            assert re.fullmatch(r"[0-9a-f]{16}", made) and installation_id(conn) == made
    finally:
        engine.dispose()


def old_intent(rt, entry_id: int, msg_id: str) -> Intent:
    """A republish of ``entry_id`` at version 1 left pending by a release before the installation
    id (its msgId without it), as a crash between its publish and its commit left it."""
    with rt.engine.connect() as conn:
        entry = conn.execute(select(Entry).where(Entry.id == entry_id)).first()._mapping
    intent = Intent(id=None, entry_id=entry_id, version=1, msg_id=msg_id, subject="orders.created",
                    payload=bytes(entry["payload"]), headers=republish_headers({}, msg_id, f"DLQ:{entry['dlq_seq']}"),
                    edited=False, actor="alice", job_id=None, created_at=utcnow() - timedelta(minutes=5))
    with write_transaction(rt.engine) as conn:
        write_claims(conn, [("new", intent)])
    return intent


async def publish(url: str, msg_id: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish("orders.created", b"{}", headers={"Nats-Msg-Id": msg_id})
    finally:
        await nc.close()


def test_a_republish_sent_before_the_installation_id_is_completed_with_the_msg_id_it_was_sent_with(
        app, rt, nats_server):
    support.make_orders_stream(nats_server.url)
    retried, recovered = support.dead_letter_orders(app, nats_server.url, [b'{"n": 1}', b'{"n": 2}'])
    for entry_id in (retried, recovered):
        msg_id = f"dlq-dashboard:DLQ:{entry_id}:e{entry_id}:v1"
        old_intent(rt, entry_id, msg_id)
        # It reached NATS before the crash.
        support.run(publish(nats_server.url, msg_id))
    assert len(support.stream_messages(nats_server.url)) == 2

    # The same request again (the version the operator saw) resumes it, under its own msgId.
    outcome = republish_entry(rt, retried, 1, actor="alice")
    assert (outcome.publish.msg_id, outcome.publish.duplicate) == (f"dlq-dashboard:DLQ:{retried}:e{retried}:v1", True)
    # The recovery finishes the other with its own too.
    assert recovery.recover_pending(rt) == 1
    assert len(support.stream_messages(nats_server.url)) == 2
    with rt.engine.connect() as conn:
        rows = conn.execute(select(Republish.entry_id, Republish.msg_id, Republish.state)
                            .order_by(Republish.entry_id)).all()
    assert [tuple(r) for r in rows] == [(retried, f"dlq-dashboard:DLQ:{retried}:e{retried}:v1", "published"),
                                        (recovered, f"dlq-dashboard:DLQ:{recovered}:e{recovered}:v1", "published")]
    assert {rt.store.get_entry(e).status for e in (retried, recovered)} == {"republished"}


def test_a_republish_that_failed_before_the_installation_id_is_sent_again_with_the_new_msg_id(app, rt, nats_server):
    support.make_orders_stream(nats_server.url)
    [entry_id] = support.dead_letter_orders(app, nats_server.url, [b'{"n": 1}'])
    intent = old_intent(rt, entry_id, f"dlq-dashboard:DLQ:{entry_id}:e{entry_id}:v1")
    with write_transaction(rt.engine) as conn:  # nothing was stored: NATS refused it
        record_failed(conn, [(intent, "NATS was unreachable.")])

    outcome = republish_entry(rt, entry_id, 1, actor="alice")
    fresh = f"{support.msg_id_prefix(rt)}:DLQ:{entry_id}:e{entry_id}:v1"
    assert (outcome.publish.msg_id, outcome.publish.duplicate) == (fresh, False)
    [message] = support.stream_messages(nats_server.url)
    assert message.headers["Nats-Msg-Id"] == fresh
    with rt.engine.connect() as conn:  # the failed intent's row, written over
        rows = conn.execute(select(Republish.msg_id, Republish.state).where(Republish.entry_id == entry_id)).all()
    assert [tuple(r) for r in rows] == [(fresh, "published")]
