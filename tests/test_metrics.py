"""GET /metrics: Prometheus text read at scrape time from the database and the runtime."""

from __future__ import annotations

import itertools

import pytest

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, insert, select

from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.times import utcnow
from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.db.models import Entry, Republish
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.accounts import create_token

from . import support

pytestmark = pytest.mark.both_databases

SECRET_PAYLOAD = b'{"card": "4111-1111-1111-1111"}'


def scrape(client) -> dict[tuple[str, frozenset], float]:
    """Every sample as (name, labels) -> value."""
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.mimetype == "text/plain"
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.get_data(as_text=True))
            for s in family.samples}


def value(samples, name: str, **labels) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def _dead_letters(engine, first_seq: int, reasons: list[str | None], payload: bytes = SECRET_PAYLOAD) -> None:
    messages = []
    for i, reason in enumerate(reasons):
        headers = {"Dlq-Original-Subject": "orders.created", "Dlq-Error": "card number 4111 rejected",
                   "X-Customer": "alice@example.com"}
        if reason:
            headers["Dlq-Reason"] = reason
        messages.append(StreamMessage(seq=first_seq + i, subject="dlq.orders.created", headers=headers,
                                      data=payload, stored_at=None))
    ingest_dlq_batch(engine, "DLQ", "e1", messages)


def test_metrics_need_no_login_and_report_the_database_as_up(offline_app):
    samples = scrape(offline_app.test_client())

    assert value(samples, "dlq_database_up") == 1
    assert value(samples, "dlq_nats_connected") == 0  # nothing started in this app
    assert value(samples, "process_resident_memory_bytes") > 0


def test_entry_counts_by_status_and_reason_change_when_entries_arrive(offline_app):
    engine = runtime_of(offline_app).engine
    client = offline_app.test_client()
    assert value(scrape(client), "dlq_entries", status="open", reason="fatal") is None

    _dead_letters(engine, 1, ["fatal", "fatal", "schema_invalid", None])
    samples = scrape(client)
    assert value(samples, "dlq_entries", status="open", reason="fatal") == 2
    assert value(samples, "dlq_entries", status="open", reason="schema_invalid") == 1
    assert value(samples, "dlq_entries", status="open", reason="none") == 1
    assert value(samples, "dlq_mirror_last_sequence", stream="DLQ") == 4

    with engine.connect() as conn:
        fatal = conn.execute(select(Entry.id).where(Entry.reason == "fatal")).scalars().all()
    for entry_id in fatal:
        close_entry(runtime_of(offline_app), entry_id, 1, actor="test")
    _dead_letters(engine, 5, ["fatal"])
    samples = scrape(client)
    assert value(samples, "dlq_entries", status="closed", reason="fatal") == 2
    assert value(samples, "dlq_entries", status="open", reason="fatal") == 1
    assert value(samples, "dlq_mirror_last_sequence", stream="DLQ") == 5


def test_every_reason_outside_the_contract_is_counted_as_other_however_frequent(offline_app):
    engine = runtime_of(offline_app).engine
    reasons = [f"custom-{i:02d}" for i in range(30)] + ["custom-00"] * 3 + ["fatal"]
    _dead_letters(engine, 1, reasons)

    samples = scrape(offline_app.test_client())
    labels = {dict(k[1])["reason"] for k in samples if k[0] == "dlq_entries"}
    assert labels == {"fatal", "other"}
    assert value(samples, "dlq_entries", status="open", reason="other") == 33
    assert sum(v for k, v in samples.items() if k[0] == "dlq_entries") == len(reasons)


def test_republish_outcomes_change_when_republishes_are_recorded(offline_app):
    engine = runtime_of(offline_app).engine
    _dead_letters(engine, 1, ["fatal"])
    client = offline_app.test_client()
    now = utcnow()
    msg_ids = itertools.count()

    def record(n: int, state: str, duplicate: bool | None):
        with write_transaction(engine) as conn:
            conn.execute(insert(Republish.__table__), [
                {"entry_id": 1, "version": 1, "msg_id": f"DLQ:1:{next(msg_ids)}", "subject": "orders.created",
                 "payload": SECRET_PAYLOAD, "state": state, "actor": "test", "created_at": now,
                 "duplicate": duplicate} for i in range(n)])

    record(2, "published", False)
    record(1, "published", True)
    record(3, "failed", None)
    samples = scrape(client)
    assert value(samples, "dlq_republishes", state="published", duplicate="false") == 2
    assert value(samples, "dlq_republishes", state="published", duplicate="true") == 1
    assert value(samples, "dlq_republishes", state="failed", duplicate="none") == 3

    record(1, "published", False)
    assert value(scrape(client), "dlq_republishes", state="published", duplicate="false") == 3


def test_metrics_carry_no_message_data(offline_app):
    _dead_letters(runtime_of(offline_app).engine, 1, ["fatal"])

    text = offline_app.test_client().get("/metrics").get_data(as_text=True)

    # Whole values: a bare "4111" is also in a timestamp now and then (process_start_time_seconds
    # 1.7963041112e+09 failed this test once).
    for secret in ("4111-1111-1111-1111", "card number 4111 rejected", "alice@example.com", '"card"',
                   "orders.created", "X-Customer"):
        assert secret not in text


def test_a_database_failure_is_reported_not_raised(offline_app, monkeypatch):
    from dlq_dashboard.web import metrics

    def broken(engine):
        raise OSError("disk gone")

    monkeypatch.setattr(metrics, "snapshot_transaction", broken)
    samples = scrape(offline_app.test_client())

    assert value(samples, "dlq_database_up") == 0
    assert not any(k[0] == "dlq_entries" for k in samples)


def test_mirror_connection_and_republish_metrics_follow_the_running_dashboard(app, nats_server, tokens):
    client = app.test_client()
    support.wait_for(lambda: value(scrape(client), "dlq_mirror_leader") == 1, timeout=15,
             message="this process to take the mirror lease")
    samples = scrape(client)
    assert value(samples, "dlq_nats_connected") == 1
    ingested_before = value(samples, "dlq_mirror_ingested_total", stream="DLQ") or 0

    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"n": %d}' % i for i in range(5)])
    support.wait_for(lambda: value(scrape(client), "dlq_mirror_ingested_total", stream="DLQ") == ingested_before + 5,
             message="the ingest counter to count the five dead letters")
    samples = scrape(client)
    assert value(samples, "dlq_mirror_last_sequence", stream="DLQ") == 5
    assert value(samples, "dlq_mirror_lag_messages", stream="DLQ") == 0
    assert value(samples, "dlq_entries", status="open", reason="fatal") == 5

    response = client.post(f"/api/entries/{ids[0]}/republish", json={"version": 1},
                           headers=support.bearer(tokens["operator"]))
    assert response.status_code == 200, response.get_data(as_text=True)
    samples = scrape(client)
    assert value(samples, "dlq_republishes", state="published", duplicate="false") == 1
    assert value(samples, "dlq_entries", status="republished", reason="fatal") == 1

    nats_server.stop()
    support.wait_for(lambda: value(scrape(client), "dlq_nats_connected") == 0, timeout=15,
             message="the connection gauge to drop with the server")
    # What the stream holds is unknown now: the lag last seen read as caught up (0) all through
    # an outage. Left out, as /healthz says null; the position committed stays.
    samples = scrape(client)
    assert value(samples, "dlq_mirror_lag_messages", stream="DLQ") is None
    assert value(samples, "dlq_mirror_behind_seconds", stream="DLQ") is None
    assert value(samples, "dlq_mirror_last_sequence", stream="DLQ") == 5
    assert value(samples, "dlq_mirror_stuck", stream="DLQ") == 0


def test_a_bulk_republish_whose_items_all_fail_is_told_by_its_items(app, nats_server, tokens):
    """A bulk republish whose every item failed counted only in dlq_jobs{state="done"}: nothing in
    /metrics said it had failed. dlq_job_items counts its items by result, from 0 before any job
    (DLQJobItemsFailing compares with the count 15 minutes before), as is the failed republishes' count."""
    client = app.test_client()
    samples = scrape(client)
    assert value(samples, "dlq_job_items", action="republish", result="failed") == 0
    assert value(samples, "dlq_job_items", action="close", result="done") == 0
    assert value(samples, "dlq_republishes", state="failed", duplicate="none") == 0

    ids = support.dead_letter_orders(app, nats_server.url, [b'{"n": %d}' % i for i in range(3)])
    # No stream takes orders.created: every republish fails.
    job = client.post("/api/bulk", json={"action": "republish", "ids": [f"{i}:1" for i in ids]},
                      headers=support.bearer(tokens["operator"]))
    assert job.status_code in (200, 201, 202), job.get_data(as_text=True)
    support.jobs_settled(runtime_of(app).engine)
    samples = scrape(client)
    assert value(samples, "dlq_jobs", action="republish", state="done") == 1
    assert value(samples, "dlq_job_items", action="republish", result="failed") == 3
    assert value(samples, "dlq_job_items", action="republish", result="done") == 0


def test_a_dashboard_started_while_nats_is_down_tells_the_committed_position(make_app, nats_server, settings):
    """/healthz said last_seq 0 (the mirror had not read its position yet) while /metrics said
    the position the database holds."""
    first = make_app(settings=settings, online=True)
    support.dead_letter_orders(first, nats_server.url, [b'{"n": %d}' % i for i in range(3)])
    runtime_of(first).stop()
    nats_server.stop()
    again = make_app(settings=settings)
    runtime_of(again).start()
    support.wait_for(lambda: value(scrape(again.test_client()), "dlq_mirror_leader") == 1, timeout=15,
                     message="the restarted dashboard to take the mirror lease")
    admin = create_token(runtime_of(again).engine, "health-admin", "admin")
    health = again.test_client().get("/healthz", headers=support.bearer(admin)).get_json()
    assert health["mirror"]["streams"]["DLQ"]["last_seq"] == 3 and health["mirror_lag"] is None
    assert value(scrape(again.test_client()), "dlq_mirror_last_sequence", stream="DLQ") == 3


def test_entry_counts_from_the_kept_counts_agree_with_the_entries_themselves(offline_app):
    """dlq_entries is read from the counts kept by failure group: the same numbers as counting
    the entries by status and reason label, after arrivals of every kind of reason and closes."""
    from dlq_dashboard.web.metrics import reason_label

    rt = runtime_of(offline_app)
    _dead_letters(rt.engine, 1, ["fatal", None, "custom-x", "schema_invalid", "fatal", "custom-y", None])
    with rt.engine.connect() as conn:
        ids = conn.execute(select(Entry.id).order_by(Entry.id)).scalars().all()
    for entry_id in (ids[0], ids[1], ids[2]):
        close_entry(rt, entry_id, 1, actor="test")
    expected: dict[tuple[str, str], int] = {}
    with rt.engine.connect() as conn:
        for status, reason, n in conn.execute(select(Entry.status, Entry.reason, func.count())
                                              .group_by(Entry.status, Entry.reason)):
            key = (status, reason_label(reason))
            expected[key] = expected.get(key, 0) + n
    samples = scrape(offline_app.test_client())
    got = {(dict(labels)["status"], dict(labels)["reason"]): n for (name, labels), n in samples.items()
           if name == "dlq_entries"}
    assert got == expected and sum(got.values()) == 7
    assert expected[("closed", "none")] == 1 and expected[("open", "other")] == 1


def test_dead_letters_removed_before_they_were_mirrored_are_counted_in_metrics_and_healthz(make_app, nats_server,
                                                                                            settings):
    """A DLQ stream at its max_msgs while the dashboard was down drops messages it never read:
    a count in /metrics and /healthz, not a log line alone."""
    support.make_stream(nats_server.url, "DLQ", ["dlq.>"], max_msgs=5)
    first = make_app(settings=settings, online=True)
    support.dead_letter_orders(first, nats_server.url, [b'{"n": %d}' % i for i in range(3)])
    assert value(scrape(first.test_client()), "dlq_mirror_missed_messages_total", stream="DLQ") == 0
    runtime_of(first).stop()
    # Sequences 4 to 13 while no mirror runs: the stream keeps 9 to 13, so 4 to 8 are never mirrored.
    support.run(support.publish_many(nats_server.url, [("dlq.orders.created", b'{"n": %d}' % i,
                                                        support.dlq_headers("orders.created")) for i in range(10)]))
    again = make_app(settings=settings, online=True)
    support.wait_for(lambda: support.entry_count(runtime_of(again).engine) == 8, message="the 5 the stream kept")
    samples = support.wait_for(lambda: (lambda s: s if value(s, "dlq_mirror_missed_messages_total", stream="DLQ")
                                        else None)(scrape(again.test_client())), message="the missed count")
    assert value(samples, "dlq_mirror_missed_messages_total", stream="DLQ") == 5
    health = again.test_client().get("/healthz").get_json()
    assert health["mirror"]["streams"]["DLQ"]["missed"] == 5
