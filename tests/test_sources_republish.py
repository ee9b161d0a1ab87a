"""An entry's actions go out through the entry's own source (SPEC sections 6 and 12), on real
servers: accounts A and B of one nats-server and a second server, mirrored as three sources.
Each account has its own stream ORDERS over ``orders.>``, so a republish through the wrong
connection would be stored, in the wrong account: the tests look in both."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from dlq_dashboard.accounts.tokens import create_token
from dlq_dashboard.actions import publishing, recovery
from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.actions.errors import AlreadyRepublished, NatsDown, Refused
from dlq_dashboard.actions.purge import purge_entries
from dlq_dashboard.actions.republish import republish_entry, republish_targets
from dlq_dashboard.actions.streams import stream_of
from dlq_dashboard.actions.subject_streams import REMEMBER_MISSING_SECONDS, REMEMBER_SECONDS, SubjectStreams
from dlq_dashboard.config import load_settings
from dlq_dashboard.db.models import Entry, Republish
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support

PAYLOAD = b'{"order_id": "o-1"}'


@pytest.fixture
def urls(shared_server, nats_server):
    """Each source's URL: accounts A and B of the shared server, and the second server (c)."""
    return {"a": support.account_url(shared_server, "a"), "b": support.account_url(shared_server, "b"),
            "c": nats_server.url}


@pytest.fixture
def desk(tmp_path, urls, make_app, database_url):
    """A factory of a started app of three sources, a (the main one), b and c, each with a stream ORDERS."""
    def make(renamed: dict[str, str] | None = None, **changes):
        """``renamed``: a source's old name to its new one (the new one's renamed_from)."""
        renamed = renamed or {}
        path = support.sources_file(tmp_path, [
            {"name": renamed.get(name, name), "nats_url": url, "stream": "DLQ",
             **({"renamed_from": name} if name in renamed else {})} for name, url in urls.items()])
        for url in urls.values():
            support.make_orders_stream(url)
        app = make_app(sources=load_settings({"DLQ_CONFIG": path}).sources, request_timeout=2.0, **changes)
        support.start_sources(app)
        return app

    return make


def dead_letter_in(rt, url: str, source: str, subject: str = "orders.created") -> int:
    """Dead-letter one message into a source's DLQ and return its entry once mirrored."""
    def newest():
        with rt.engine.connect() as conn:
            return conn.execute(select(Entry.id).where(Entry.source == source).order_by(Entry.id.desc())).first()

    before = newest()
    headers = support.dlq_headers(subject, Dlq_Reason="fatal", Dlq_Error="handler failed")
    support.run(support.publish_many(url, [(f"dlq.{subject}", PAYLOAD, headers)]))
    return support.wait_for(lambda: (found := newest()) is not None and found != before and found[0],
                            timeout=20, message=f"an entry of source {source}")


def intents_of(rt, entry_id):
    with rt.engine.connect() as conn:
        return conn.execute(select(Republish).where(Republish.entry_id == entry_id).order_by(Republish.id)).all()


def status_of(rt, entry_id):
    with rt.engine.connect() as conn:
        return tuple(conn.execute(select(Entry.status, Entry.version).where(Entry.id == entry_id)).one())


def crash_at(monkeypatch, stage: str) -> type[Exception]:
    """Make the republish machinery raise, where the process would die, the exception returned."""
    class SimulatedCrash(Exception):
        pass

    def fault(where, intent):
        if where == stage:
            raise SimulatedCrash(where)

    monkeypatch.setattr(publishing, "fault_point", fault)
    return SimulatedCrash


def test_a_stream_added_after_the_answer_no_stream_is_seen_at_the_next_look_within_seconds(desk, urls):
    """"No stream stores subject ..." is what makes a person add the stream; the preview and the
    entry page then refused it for the 30 s a found stream is remembered."""
    rt = runtime_of(desk())
    assert stream_of(rt, "refunds.issued", "a") == (True, None)
    support.make_stream(urls["a"], "REFUNDS", ["refunds.>"])
    support.wait_for(lambda: stream_of(rt, "refunds.issued", "a") == (True, "REFUNDS"), timeout=8,
                     message="the stream added to be seen")


def test_a_found_stream_is_remembered_longer_than_no_stream():
    known = SubjectStreams()
    known.put("orders.created", 100.0, "ORDERS", "a")
    known.put("refunds.issued", 100.0, "", "a")
    assert known.get("orders.created", 100.0 + REMEMBER_SECONDS - 1, "a") == "ORDERS"
    assert known.get("refunds.issued", 100.0 + REMEMBER_MISSING_SECONDS - 0.1, "a") == ""
    assert known.get("refunds.issued", 100.0 + REMEMBER_MISSING_SECONDS, "a") is None
    assert known.get("orders.created", 100.0, "b") is None  # another source's account


@pytest.mark.both_databases
def test_an_entry_of_account_b_is_republished_once_into_account_bs_stream_with_a_fresh_msg_id(
        desk, urls, database_url):
    rt = runtime_of(desk())
    entry_id = dead_letter_in(rt, urls["b"], "b")
    outcome = republish_entry(rt, entry_id, 1, actor="alice")

    [message] = support.stream_messages(urls["b"])
    assert support.stream_messages(urls["a"]) == [] and support.stream_messages(urls["c"]) == []
    assert message.data == PAYLOAD
    msg_id = message.headers["Nats-Msg-Id"]
    assert msg_id == outcome.publish.msg_id == f"{support.msg_id_prefix(rt)}:DLQ:1:e{entry_id}:v1"
    assert (outcome.publish.stream, outcome.publish.seq, outcome.publish.duplicate) == ("ORDERS", 1, False)
    [intent] = intents_of(rt, entry_id)
    assert (intent.source, intent.state) == ("b", "published")

    with pytest.raises(AlreadyRepublished):
        republish_entry(rt, entry_id, 1, actor="alice")
    assert len(support.stream_messages(urls["b"])) == 1
    assert support.stream_messages(urls["a"]) == []


def test_the_blast_radius_and_the_stream_of_a_subject_are_asked_of_the_entrys_source(desk, urls):
    rt = runtime_of(desk())
    entry_id = dead_letter_in(rt, urls["b"], "b", subject="billing.charged")
    support.make_stream(urls["b"], "BILLING", ["billing.>"])
    # Only account B stores billing.charged: asked of a, no stream; of b, BILLING, each remembered apart.
    assert stream_of(rt, "billing.charged", "a") == (True, None)
    assert stream_of(rt, "billing.charged", "b") == (True, "BILLING")
    assert stream_of(rt, "billing.charged") == (True, None)  # the main source, a
    assert republish_targets(rt, "billing.charged", "b")["stream"] == "BILLING"
    assert republish_targets(rt, "billing.charged", "a")["error"] == (
        "Source 'a': No stream stores subject billing.charged: a republish would be refused.")
    outcome = republish_entry(rt, entry_id, 1, actor="alice")
    assert outcome.publish.stream == "BILLING"


@pytest.mark.both_databases
def test_a_pending_republish_of_source_b_left_by_a_crash_is_recovered_through_b(
        desk, urls, monkeypatch, database_url):
    rt = runtime_of(desk())
    entry_id = dead_letter_in(rt, urls["b"], "b")
    crash = crash_at(monkeypatch, "after_publish")
    with pytest.raises(crash):
        republish_entry(rt, entry_id, 1, actor="alice")
    assert [i.state for i in intents_of(rt, entry_id)] == ["pending"]

    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    recovery.recover_pending(rt)
    [intent] = intents_of(rt, entry_id)
    # Completed through B with the same msgId: B's stream answers "duplicate", A's never sees it.
    assert (intent.state, intent.stream, intent.seq, intent.duplicate) == ("published", "ORDERS", 1, True)
    assert len(support.stream_messages(urls["b"])) == 1
    assert support.stream_messages(urls["a"]) == []
    assert status_of(rt, entry_id) == ("republished", 2)


def test_with_one_sources_nats_away_its_entries_are_refused_by_name_and_the_others_go_on(
        desk, urls, nats_server, monkeypatch):
    app = desk()
    rt = runtime_of(app)
    of_b = dead_letter_in(rt, urls["b"], "b")
    of_c = dead_letter_in(rt, urls["c"], "c")
    pending_b = dead_letter_in(rt, urls["b"], "b")
    pending_c = dead_letter_in(rt, urls["c"], "c")
    crash = crash_at(monkeypatch, "after_intent")
    for entry_id in (pending_b, pending_c):
        with pytest.raises(crash):
            republish_entry(rt, entry_id, 1, actor="alice")
    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    nats_server.kill()
    support.wait_for(lambda: not rt.bridge_for("c").state.connected, message="source c's bridge to see the outage")

    with pytest.raises(NatsDown) as refused:
        republish_entry(rt, of_c, 1, actor="alice")
    assert str(refused.value).startswith("NATS of source 'c' is not reachable (")
    assert str(refused.value).endswith(f"; nothing was republished and entry {of_c} is as it was. "
                                       "Try again when NATS is back.")
    assert status_of(rt, of_c) == ("open", 1)
    assert republish_entry(rt, of_b, 1, actor="alice").publish.stream == "ORDERS"

    # Recovery finishes b's pending republish and leaves c's for when its NATS is back.
    recovery.recover_pending(rt)
    assert [i.state for i in intents_of(rt, pending_b)] == ["published"]
    assert [i.state for i in intents_of(rt, pending_c)] == ["pending"]
    assert len(support.stream_messages(urls["b"])) == 2

    page = support.logged_in(app, "operator").get(f"/entries/{of_c}")
    assert "NATS of source &#39;c&#39; is not reachable" in page.get_data(as_text=True)


def test_an_entry_of_a_source_no_longer_configured_is_refused_and_nothing_is_published(desk, urls, monkeypatch,
                                                                                       caplog):
    app = desk()
    rt = runtime_of(app)
    entry_id = dead_letter_in(rt, urls["b"], "b")
    left = dead_letter_in(rt, urls["b"], "b")
    crash = crash_at(monkeypatch, "after_intent")
    with pytest.raises(crash):
        republish_entry(rt, left, 1, actor="alice")
    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    # Source b taken out of DLQ_CONFIG (here: its entries and intents renamed to a source that is not).
    with rt.engine.begin() as conn:
        conn.execute(update(Entry).where(Entry.id.in_([entry_id, left])).values(source="gone"))
        # Older than any publish takes: abandoned by its process, not in flight there.
        conn.execute(update(Republish).values(source="gone", created_at=utcnow() - timedelta(minutes=1)))

    # A pending intent of it waits, neither published nor failed; the runtime's first pass says so
    # once, the later passes are quiet.
    with caplog.at_level(logging.WARNING, logger="dlq_dashboard.actions.recovery"):
        recovery.recover_pending(rt, first=True)
        recovery.recover_pending(rt)
    told = [r.getMessage() for r in caplog.records if r.name == "dlq_dashboard.actions.recovery"]
    assert len(told) == 1 and told[0].startswith("republishes of source 'gone' wait: Source 'gone' is not configured")
    with pytest.raises(Refused) as waits:
        republish_entry(rt, left, 1, actor="alice")
    assert str(waits.value).startswith("Source 'gone' is not configured here (DLQ_CONFIG names no such source); "
                                       f"the republish of entry {left} (msgId ")
    assert [i.state for i in intents_of(rt, left)] == ["pending"] and status_of(rt, left) == ("open", 1)

    with pytest.raises(Refused) as refused:
        republish_entry(rt, entry_id, 1, actor="alice")
    assert str(refused.value) == (f"Source 'gone' is not configured here (DLQ_CONFIG names no such source), "
                                  f"so entry {entry_id} cannot be republished from this dashboard.")
    assert intents_of(rt, entry_id) == [] and status_of(rt, entry_id) == ("open", 1)
    answer = app.test_client().post(f"/api/entries/{entry_id}/republish", json={"version": 1},
                                    headers=support.bearer(create_token(rt.engine, "ops", "operator")))
    assert answer.status_code == 422 and answer.get_json()["error"] == str(refused.value)
    page = support.logged_in(app, "operator").get(f"/entries/{entry_id}").get_data(as_text=True)
    assert "Source &#39;gone&#39; is not configured here" in page
    assert all(support.stream_messages(url) == [] for url in urls.values())


def test_the_entries_of_a_renamed_sources_old_name_are_found_by_it_and_act_through_the_renamed_source(
        desk, urls):
    # They were a 400 in the source filter ("use one of a, bee, c") and a 422 when republished
    # ("Source 'b' is not configured here"), though renamed_from names b.
    rt = runtime_of(desk())
    entry_id, closed = dead_letter_in(rt, urls["b"], "b"), dead_letter_in(rt, urls["b"], "b")
    rt.stop()
    app = desk(renamed={"b": "bee"}, delete_on_close=True)
    rt = runtime_of(app)
    client = support.logged_in(app, "viewer")
    answer = client.get("/api/entries?source=b")
    assert answer.status_code == 200, answer.get_json()
    assert sorted(e["id"] for e in answer.get_json()["entries"]) == sorted([entry_id, closed])
    assert client.get("/api/groups?source=b").status_code == 200
    nowhere = client.get("/api/entries?source=nope")
    assert nowhere.status_code == 400
    assert nowhere.get_json()["error"].startswith("source 'nope' is not valid: use one of a, bee, c")

    republish_entry(rt, entry_id, 1, actor="alice")
    assert [i.state for i in intents_of(rt, entry_id)] == ["published"]
    assert len(support.stream_messages(urls["b"])) == 1  # account b's ORDERS, through bee's connection
    assert support.stream_messages(urls["a"]) == support.stream_messages(urls["c"]) == []
    assert len(support.stream_messages(urls["b"], "DLQ")) == 2
    close_entry(rt, closed, 1, actor="alice", note="handled")
    assert len(support.stream_messages(urls["b"], "DLQ")) == 1  # deleted from b's (now bee's) DLQ
    with rt.engine.connect() as conn:
        assert set(conn.execute(select(Entry.source).where(Entry.id.in_([entry_id, closed]))).scalars()) == {"b"}


@pytest.mark.both_databases
def test_close_with_delete_removes_the_message_from_its_own_sources_dlq_stream(desk, urls, database_url):
    rt = runtime_of(desk(delete_on_close=True))
    of_a = dead_letter_in(rt, urls["a"], "a")
    of_b = dead_letter_in(rt, urls["b"], "b")
    # Both are sequence 1 of a stream DLQ, one in each account.
    close_entry(rt, of_b, 1, actor="alice", note="handled")
    assert support.stream_messages(urls["b"], "DLQ") == []
    assert [m.seq for m in support.stream_messages(urls["a"], "DLQ")] == [1]
    assert status_of(rt, of_b) == ("closed", 2) and status_of(rt, of_a) == ("open", 1)


def test_the_retention_purge_deletes_each_message_through_its_source_and_keeps_an_away_sources_rows(
        desk, urls, nats_server):
    rt = runtime_of(desk())
    ids = {name: dead_letter_in(rt, url, name) for name, url in urls.items()}
    for entry_id in ids.values():
        close_entry(rt, entry_id, 1, actor="alice")
    nats_server.kill()
    support.wait_for(lambda: not rt.bridge_for("c").state.connected, message="source c's bridge to see the outage")

    report = purge_entries(rt, older_than=60, actor="test", now=utcnow() + timedelta(hours=1))
    assert (report.total, report.messages_deleted, report.deferred) == (2, 2, 1)
    assert report.deferred_reason.startswith("NATS of source 'c' is not reachable")
    assert support.stream_messages(urls["a"], "DLQ") == [] and support.stream_messages(urls["b"], "DLQ") == []
    with rt.engine.connect() as conn:
        assert list(conn.execute(select(Entry.id))) == [(ids["c"],)]


@pytest.mark.both_databases
def test_a_refusal_names_the_source_only_when_there_are_several(make_app, tmp_path, database_url):
    alone = runtime_of(make_app())  # one source, nothing started
    first = support.dead_letter(alone.engine, 1)
    with pytest.raises(NatsDown) as refused:
        republish_entry(alone, first, 1, actor="alice")
    assert str(refused.value) == ("NATS is not connected (the dashboard's background services are not running); "
                                  f"nothing was republished and entry {first} is as it was. Try again when NATS is back.")

    path = support.sources_file(tmp_path, [{"name": n, "nats_url": f"nats://127.0.0.1:{port}", "stream": "DLQ"}
                                           for n, port in (("a", 1), ("b", 2))])
    app = make_app(sources=load_settings({"DLQ_CONFIG": path}).sources)
    several = runtime_of(app)
    second = support.dead_letter(several.engine, 2)
    with several.engine.begin() as conn:
        conn.execute(update(Entry).where(Entry.id.in_([second, first])).values(source="b"))
    with pytest.raises(NatsDown) as refused:
        republish_entry(several, second, 1, actor="alice")
    assert str(refused.value) == ("NATS of source 'b' is not connected (the dashboard's background services are "
                                  f"not running); nothing was republished and entry {second} is as it was. "
                                  "Try again when NATS is back.")
    token = create_token(several.engine, "ops", "operator")
    answer = app.test_client().post(f"/api/entries/{first}/republish", json={"version": 1},
                                    headers=support.bearer(token))
    assert answer.status_code == 503 and answer.get_json()["error"].startswith("NATS of source 'b' ")
