"""Retention: resolved entries older than DLQ_RETENTION are purged with their history, search
index and DLQ stream messages; the audit stays, open entries stay, and the kept counts still
agree with the entries. The periodic purge runs on the replica that mirrors; the command
`flask --app app purge` runs it by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, insert, select, update

from dlq_dashboard import create_app
from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.actions.purge import purge_entries
from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.db.models import Action, Alert, Entry, Event, Job, JobItem, Lease, Purge, Republish
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.entries.triage import activity
from dlq_dashboard.ingest.parse import Advisory
from dlq_dashboard.ingest.writes import ingest_advisory_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import format_time, utcnow

from . import support
from .test_metrics import scrape, value
from .test_tallies import kept, truth

DAY = 86400


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """The running app's settings with no periodic purge: each test purges when it says so."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, retention=0)


def age(engine, ids, days: float) -> None:
    """Make these entries look resolved ``days`` ago."""
    with write_transaction(engine) as conn:
        conn.execute(update(Entry).where(Entry.id.in_(ids)).values(updated_at=utcnow() - timedelta(days=days)))


def stored_ids(engine) -> set[int]:
    with engine.connect() as conn:
        return set(conn.execute(select(Entry.id)).scalars())


def searched(rt, word: str) -> set[int]:
    return {e.id for e in rt.store.list_entries(EntryFilter.from_args({"q": word})).entries}


def nak(engine, seq: int, original_seq: int) -> None:
    """A delivery-history event of message ORDERS:<original_seq>."""
    advisory = Advisory(kind="nak", id=f"nak-{seq}", at=utcnow(), stream="ORDERS", consumer="billing",
                        stream_seq=original_seq, deliveries=1, reason=None, raw={})
    ingest_advisory_batch(engine, "DLQ_ADVISORIES", "e1", [(advisory, None, None)], seq)


def history_of(engine, original_seq: int) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Event)
                            .where(Event.original_stream == "ORDERS", Event.original_seq == original_seq)).scalar()


# --- what goes and what stays ----------------------------------------------------------------------

@pytest.mark.both_databases
def test_old_resolved_entries_go_with_their_history_search_and_republishes_and_the_audit_stays(app):
    rt = runtime_of(app)
    engine = rt.engine
    ids = {}
    for seq, name in enumerate(["old_closed", "old_republished", "young_closed", "old_open", "shared"], start=1):
        nak(engine, seq, 100 + seq)
        ids[name] = support.dead_letter(engine, seq, "orders.created", f'{{"word": "zebra{name}"}}'.encode(),
                                        Dlq_Reason="fatal", Dlq_Error=f"order {seq} failed",
                                        Dlq_Original_Stream="ORDERS", Dlq_Original_Seq=str(100 + seq))
    # A second failure of the "shared" message, still open: their one history must stay.
    still_open = support.dead_letter(engine, 6, "orders.created", b"{}", Dlq_Reason="fatal",
                                     Dlq_Original_Stream="ORDERS", Dlq_Original_Seq="105")
    for name in ("old_closed", "young_closed", "shared"):
        close_entry(rt, ids[name], 1, actor="alice", note="handled")
    support.record_republish(rt, ids["old_republished"], 7)
    age(engine, [ids["old_closed"], ids["old_republished"], ids["old_open"], ids["shared"]], 40)
    assert searched(rt, "zebraold_closed") == {ids["old_closed"]}

    report = purge_entries(rt, older_than=30 * DAY, actor="test")

    assert dict(report.purged) == {"closed": 2, "republished": 1} and report.deferred == 0
    assert stored_ids(engine) == {ids["young_closed"], ids["old_open"], still_open}
    assert searched(rt, "zebraold_closed") == set() and searched(rt, "zebrayoung_closed") == {ids["young_closed"]}
    assert history_of(engine, 101) == 0 and history_of(engine, 102) == 0
    assert history_of(engine, 103) == 1 and history_of(engine, 105) == 1  # kept: an entry of it is kept
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Republish)).scalar() == 0
        audit = conn.execute(select(Action.entry_id, Action.action, Action.actor).order_by(Action.id)).all()
    # Every record of the purged entries stays, and the purge itself is one more.
    assert (ids["old_closed"], "close", "alice") in audit and (ids["old_republished"], "republish", "test") in audit
    assert audit[-1] == (None, "purge", "test")
    assert kept(engine) == truth(engine)


@pytest.mark.both_databases
def test_open_entries_are_never_purged_whatever_their_age(app):
    rt = runtime_of(app)
    ids = [support.dead_letter(rt.engine, seq) for seq in range(1, 4)]
    age(rt.engine, ids, 400)
    assert purge_entries(rt, older_than=1, actor="test").total == 0
    assert stored_ids(rt.engine) == set(ids)
    with pytest.raises(ValueError, match="never purged"):
        purge_entries(rt, older_than=1, actor="test", statuses=("open",))


@pytest.mark.both_databases
def test_an_entry_with_a_pending_republish_or_a_running_jobs_item_waits(app, rt):
    # The runtime's own recovery must not finish them first: its first pass (which takes every
    # pending intent) has run (the rt fixture waits for it), later ones take only intents older
    # than three request timeouts, and the job is run by another replica (its lease).
    ids = [support.dead_letter(rt.engine, seq) for seq in (1, 2)]
    for entry_id in ids:
        close_entry(rt, entry_id, 1, actor="test")
    age(rt.engine, ids, 40)
    now = utcnow()
    with write_transaction(rt.engine) as conn:
        conn.execute(insert(Republish).values(entry_id=ids[0], version=2, msg_id="m-1", subject="orders.created",
                                              payload=b"{}", headers="{}", edited=False, state="pending",
                                              actor="test", created_at=now))
        job = conn.execute(insert(Job).values(action="close", actor="test", state="running", selection="{}",
                                              created_at=now).returning(Job.id)).scalar_one()
        conn.execute(insert(JobItem).values(job_id=job, entry_id=ids[1], version=2, state="pending"))
        conn.execute(insert(Lease).values(name=f"job:{job}", holder="another-host:1:replica",
                                          expires_at=now + timedelta(minutes=10)))
    assert purge_entries(rt, older_than=30 * DAY, actor="test").total == 0
    with write_transaction(rt.engine) as conn:
        conn.execute(update(Republish).values(state="published"))
        conn.execute(update(Job).values(state="cancelled"))  # its untouched item stays pending
    assert purge_entries(rt, older_than=30 * DAY, actor="test").total == 2


@pytest.mark.both_databases
def test_a_purged_entry_leaves_no_intent_or_bulk_item_naming_it(app):
    # No foreign key holds intents and bulk items to their entry (revision 0018): the purge
    # itself takes them with it, and leaves the others' alone.
    rt = runtime_of(app)
    ids = [support.dead_letter(rt.engine, seq) for seq in (1, 2)]
    for entry_id in ids:
        close_entry(rt, entry_id, 1, actor="test")
    age(rt.engine, ids[:1], 40)
    now = utcnow()
    with write_transaction(rt.engine) as conn:
        job = conn.execute(insert(Job).values(action="close", actor="test", state="done", selection="{}",
                                              created_at=now).returning(Job.id)).scalar_one()
        for n, entry_id in enumerate(ids):
            conn.execute(insert(Republish).values(entry_id=entry_id, version=1, msg_id=f"m-{n}",
                                                  subject="orders.created", payload=b"{}", headers="{}",
                                                  edited=False, state="published", actor="test", created_at=now))
            conn.execute(insert(JobItem).values(job_id=job, entry_id=entry_id, version=1, state="done"))
    assert purge_entries(rt, older_than=30 * DAY, actor="test").total == 1
    with rt.engine.connect() as conn:
        assert conn.execute(select(Republish.entry_id)).scalars().all() == [ids[1]]
        assert conn.execute(select(JobItem.entry_id)).scalars().all() == [ids[1]]


@pytest.mark.both_databases
def test_a_finished_job_still_says_how_it_went_once_its_entries_are_purged(app, auth, tokens):
    """Its items went with their entries, and its page read "0 done, 0 failed ... of 3"."""
    from dlq_dashboard.actions.bulk import jobs

    rt = runtime_of(app)
    ids = [support.dead_letter(rt.engine, seq) for seq in (1, 2, 3)]
    close_entry(rt, ids[2], 1, actor="test")  # closed already: the job skips it
    job_id = jobs.create_job(rt, "close", actor="alice", ids=ids)
    support.wait_for(lambda: jobs.job_status(rt, job_id, limit=0)["state"] == "done", message="the close job")
    before = jobs.job_status(rt, job_id, limit=0)
    age(rt.engine, ids[:2], 40)
    assert purge_entries(rt, older_than=30 * DAY, actor="test").total == 2
    after = jobs.job_status(rt, job_id)
    assert (after["done"], after["skipped"], after["percent"], after["purged"]) == (2, 1, 100.0, 2)
    assert {k: after[k] for k in ("done", "failed", "skipped", "pending", "percent")} == \
        {k: before[k] for k in ("done", "failed", "skipped", "pending", "percent")}
    assert [item["entry_id"] for item in after["items"]] == [ids[2]]  # only what is stored is listed
    page = auth.client("viewer").get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "2 done, 0 failed, 1 skipped" in page and "2 of its items went with their entries" in page
    listed = app.test_client().get("/api/jobs", headers=support.bearer(tokens["viewer"])).get_json()["jobs"]
    assert [(j["done"], j["purged"]) for j in listed if j["id"] == job_id] == [(2, 2)]
    # A second purge adds to what the first kept.
    age(rt.engine, ids[2:], 40)
    assert purge_entries(rt, older_than=30 * DAY, actor="test").total == 1
    assert {k: jobs.job_status(rt, job_id, limit=0)[k] for k in ("done", "skipped", "purged")} == \
        {"done": 2, "skipped": 1, "purged": 3}


@pytest.mark.both_databases
def test_an_entry_is_aged_from_when_it_was_resolved_not_received(app):
    rt = runtime_of(app)
    entry = support.dead_letter(rt.engine, 1, stored_at=utcnow() - timedelta(days=90))
    with write_transaction(rt.engine) as conn:  # received 90 days ago
        conn.execute(update(Entry).values(received_at=utcnow() - timedelta(days=90)))
    close_entry(rt, entry, 1, actor="test")  # closed now
    assert purge_entries(rt, older_than=30 * DAY, actor="test").total == 0
    assert purge_entries(rt, older_than=30 * DAY, actor="test", now=utcnow() + timedelta(days=31)).total == 1


@pytest.mark.both_databases
def test_purging_in_small_batches_keeps_the_counts_equal_to_a_recount(app):
    rt = runtime_of(app)
    ids = [support.dead_letter(rt.engine, seq, f"orders.s{seq % 3}", Dlq_Reason="fatal",
                               Dlq_Error=f"error {seq % 4}") for seq in range(1, 41)]
    for entry_id in ids[::2]:
        close_entry(rt, entry_id, 1, actor="test")
    for step, entry_id in enumerate(ids[1::4]):
        support.record_republish(rt, entry_id, 1000 + step)
    age(rt.engine, ids[:30], 40)
    report = purge_entries(rt, older_than=30 * DAY, actor="test", batch=3)
    assert report.total == 23 and kept(rt.engine) == truth(rt.engine)
    with rt.engine.connect() as conn:
        runs = conn.execute(select(Purge.closed, Purge.republished, Purge.finished_at.is_not(None))).all()
    assert runs == [(15, 8, True)]  # one record a run, raised batch by batch


@pytest.mark.both_databases
def test_a_dry_run_counts_by_status_and_changes_nothing(app):
    rt = runtime_of(app)
    ids = [support.dead_letter(rt.engine, seq) for seq in range(1, 6)]
    for entry_id in ids[:3]:
        close_entry(rt, entry_id, 1, actor="test")
    support.record_republish(rt, ids[3], 1)
    age(rt.engine, ids, 40)
    report = purge_entries(rt, older_than=30 * DAY, actor="test", dry_run=True)
    assert dict(report.purged) == {"closed": 3, "republished": 1} and report.with_messages == 4
    assert stored_ids(rt.engine) == set(ids)
    with rt.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Purge)).scalar() == 0
    assert purge_entries(rt, older_than=30 * DAY, actor="test", statuses=("closed",)).total == 3
    assert stored_ids(rt.engine) == set(ids[3:])


# --- the DLQ stream -------------------------------------------------------------------------------

def test_the_dlq_stream_messages_of_purged_entries_are_deleted(app, nats_server):
    rt = runtime_of(app)
    ids = support.dead_letter_orders(app, nats_server.url, [b'{"n": %d}' % i for i in range(4)])
    for entry_id in ids[:3]:
        close_entry(rt, entry_id, 1, actor="test")
    age(rt.engine, ids[:2], 40)  # the third is closed, but recently
    with rt.engine.connect() as conn:
        seqs = dict(conn.execute(select(Entry.id, Entry.dlq_seq).where(Entry.id.in_(ids))).all())

    report = purge_entries(rt, older_than=30 * DAY, actor="test")

    assert report.total == 2 and report.messages_deleted == 2
    left = {m.seq for m in support.stream_messages(nats_server.url, "DLQ")}
    assert left == {seqs[ids[2]], seqs[ids[3]]}


def test_without_nats_entries_with_a_dlq_message_wait_for_the_next_purge(offline_app):
    rt = runtime_of(offline_app)
    ids = [support.dead_letter(rt.engine, seq) for seq in range(1, 3)]
    for entry_id in ids:
        close_entry(rt, entry_id, 1, actor="test")
    age(rt.engine, ids, 40)
    report = purge_entries(rt, older_than=30 * DAY, actor="test")
    assert report.total == 0 and report.deferred == 2 and "NATS is not connected" in report.deferred_reason
    assert stored_ids(rt.engine) == set(ids) and kept(rt.engine) == truth(rt.engine)


# --- the periodic purge ----------------------------------------------------------------------------

def test_the_periodic_purge_runs_on_the_replica_that_mirrors_only(tmp_path, nats_server):
    """Two dashboards over one database: the one holding the mirror lease purges."""
    database = f"sqlite:///{tmp_path}/shared.sqlite3"
    apps = []
    try:
        for name in ("a", "b"):
            settings = support.make_settings(tmp_path / name, nats_server.url, database_url=database,
                                             retention=DAY, purge_interval=0.2)
            application = create_app({"SETTINGS": settings, "TESTING": True})
            runtime_of(application).start()
            apps.append(application)
            if name == "a":
                support.wait_for(lambda: runtime_of(application).mirror.leader, timeout=30,
                                 message="the first dashboard to mirror")
        leader, follower = (runtime_of(a) for a in apps)
        entry = support.dead_letter(leader.engine, 1)
        close_entry(leader, entry, 1, actor="test")
        age(leader.engine, [entry], 2)
        support.wait_for(lambda: not stored_ids(leader.engine), timeout=30, message="the periodic purge")
        assert leader.retention.runs > 0 and follower.retention.runs == 0
        assert not follower.mirror.leader
    finally:
        for application in apps:
            runtime_of(application).stop()


# --- what people see ---------------------------------------------------------------------------------

@pytest.mark.both_databases
def test_metrics_report_the_entries_purged_and_the_database_size(app):
    rt = runtime_of(app)
    ids = [support.dead_letter(rt.engine, seq) for seq in range(1, 4)]
    close_entry(rt, ids[0], 1, actor="test")
    support.record_republish(rt, ids[1], 1)
    age(rt.engine, ids, 40)
    before = scrape(app.test_client())
    assert value(before, "dlq_entries_purged_total", status="closed") == 0
    assert value(before, "dlq_database_size_bytes") > 0
    purge_entries(rt, older_than=30 * DAY, actor="test")
    after = scrape(app.test_client())
    assert value(after, "dlq_entries_purged_total", status="closed") == 1
    assert value(after, "dlq_entries_purged_total", status="republished") == 1


def test_the_list_says_how_long_resolved_entries_are_kept_and_how_many_are_stored(tmp_path):
    for retention, sentence in ((30 * DAY, "are kept for 30 days after they were resolved"),
                                (0, "are kept forever")):
        application = create_app({"SETTINGS": support.make_settings(tmp_path, retention=retention), "TESTING": True})
        try:
            for seq in (1, 2):
                support.dead_letter(application, seq if retention else seq + 2)
            client = support.logged_in(application, "viewer")
            html = " ".join(client.get("/summary?status=open").get_data(as_text=True).split())
            assert sentence in html
            assert ("2 entries stored" if retention else "4 entries stored") in html
        finally:
            runtime_of(application).stop()


# --- flask --app app purge ----------------------------------------------------------------------------

@pytest.fixture
def cli(app):
    runner = app.test_cli_runner()
    return lambda *args: runner.invoke(args=list(args))


def test_the_purge_command_says_what_it_would_do_and_then_does_it(app, cli):
    rt = runtime_of(app)
    ids = [support.dead_letter(rt.engine, seq) for seq in range(1, 5)]
    for entry_id in ids[:2]:
        close_entry(rt, entry_id, 1, actor="test")
    support.record_republish(rt, ids[2], 1)
    age(rt.engine, ids, 10)

    dry = cli("purge", "--older-than", "7d", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "Would purge 3 entries resolved more than 7d ago: 2 closed, 1 republished" in dry.output
    assert "Nothing was changed" in dry.output and len(stored_ids(rt.engine)) == 4

    done = cli("purge", "--older-than", "7d", "--status", "closed")
    assert done.exit_code == 0, done.output
    assert "Purged 2 entries resolved more than 7d ago: 2 closed" in done.output
    assert stored_ids(rt.engine) == set(ids[2:])
    with rt.engine.connect() as conn:
        assert conn.execute(select(Action.actor).where(Action.action == "purge")).scalar().startswith("cli:")


def test_the_purge_command_refuses_open_entries_and_bad_ages_in_one_line(cli):
    refused = cli("purge", "--status", "open")
    assert refused.exit_code == 2 and "open entries are never purged" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    for bad in ("abc", "0", "7x"):
        result = cli("purge", "--older-than", bad)
        assert result.exit_code == 2 and "--older-than" in result.output


def test_the_purge_command_asks_nats_only_for_messages_to_delete(make_app):
    """A purge with nothing to delete from the DLQ stream waited out NATS's connect timeout and
    said "NATS is not reachable" (the command's NATS here: a closed port)."""
    app = make_app()
    rt = runtime_of(app)
    runner = app.test_cli_runner()
    nothing = runner.invoke(args=["purge", "--older-than", "7d"])
    assert nothing.exit_code == 0, nothing.output
    assert nothing.output.splitlines() == ["Purged 0 entries resolved more than 7d ago: 0 closed, 0 republished; "
                                           "deleted 0 DLQ stream messages."]
    assert rt.bridge is None  # never connected
    entry_id = support.dead_letter(rt.engine, 1)
    close_entry(rt, entry_id, 1, actor="test")
    age(rt.engine, [entry_id], 10)
    kept = runner.invoke(args=["purge", "--older-than", "7d"])
    assert kept.exit_code == 0, kept.output
    assert "NATS is not reachable: entries whose DLQ stream message cannot be deleted are kept" in kept.output
    assert stored_ids(rt.engine) == {entry_id}


def test_the_purge_command_keeps_everything_when_retention_is_forever(cli):
    result = cli("purge")  # this module's app runs with DLQ_RETENTION=0
    assert result.exit_code == 0 and "kept forever" in result.output


@pytest.mark.both_databases
def test_alerts_delivered_before_the_cutoff_go_and_pending_ones_stay_however_old(app):
    rt = runtime_of(app)
    now = utcnow()
    rows = {"old_sent": (now - timedelta(days=40), now - timedelta(days=40)),
            "young_sent": (now - timedelta(days=2), now - timedelta(days=2)),
            "old_pending": (now - timedelta(days=40), None)}
    with write_transaction(rt.engine) as conn:
        for event_id, (created, sent) in rows.items():
            conn.execute(insert(Alert).values(event_id=event_id, url="http://127.0.0.1:9/hook", event="group.new",
                                              group_id=1, body="{}", created_at=created, attempts=1,
                                              next_attempt_at=created, sent_at=sent))
    assert purge_entries(rt, older_than=30 * DAY, actor="test", dry_run=True).alerts_removed == 1
    report = purge_entries(rt, older_than=30 * DAY, actor="test")
    with rt.engine.connect() as conn:
        left = set(conn.execute(select(Alert.event_id)).scalars())
    assert left == {"young_sent", "old_pending"}
    assert report.alerts_removed == 1 and report.to_dict()["alerts_removed"] == 1


@pytest.mark.both_databases
def test_a_kept_groups_activity_still_tells_the_alerts_sent_about_it_after_the_purge(app, tokens):
    """A purge forgot the delivered alerts, and with them the "alert sent" rows of the activity of
    groups it kept: a group open for months lost the record that it was ever announced."""
    rt = runtime_of(app)
    now = utcnow()
    kept_entry = support.dead_letter(rt.engine, 1, "orders.created", Dlq_Reason="fatal", Dlq_Error="no stock")
    with rt.engine.connect() as conn:
        group_id = conn.execute(select(Entry.group_id).where(Entry.id == kept_entry)).scalar_one()
    sent = {("new", "http://127.0.0.1:9/a"): now - timedelta(days=60),
            ("new", "http://127.0.0.1:9/b"): now - timedelta(days=59),
            ("regressed", "http://127.0.0.1:9/a"): now - timedelta(days=40),
            ("regressed", "http://127.0.0.1:9/b"): now - timedelta(days=1),  # young: the outbox keeps it
            ("gone", "http://127.0.0.1:9/a"): now - timedelta(days=40)}  # of a group no longer stored
    with write_transaction(rt.engine) as conn:
        for (event_id, url), at in sent.items():
            conn.execute(insert(Alert).values(
                event_id=event_id, url=url, event=f"group.{event_id}", group_id=group_id + (event_id == "gone"),
                body="{}", created_at=at, attempts=1, next_attempt_at=at, sent_at=at))

    def alerts_told() -> list[tuple[str, int, str]]:
        return [(a["detail"]["event"], a["detail"]["urls"], a["at"][:10])
                for a in activity(rt.engine, group_id) if a["kind"] == "alert"]

    before = alerts_told()
    assert before == [("group.regressed", 2, format_time(now - timedelta(days=40))[:10]),
                      ("group.new", 2, format_time(now - timedelta(days=60))[:10])]
    assert purge_entries(rt, older_than=30 * DAY, actor="test").alerts_removed == 4
    with rt.engine.connect() as conn:
        assert set(conn.execute(select(Alert.event_id)).scalars()) == {"regressed"}  # the outbox still thins
    assert alerts_told() == before
    assert purge_entries(rt, older_than=30 * DAY, actor="test").alerts_removed == 0
    assert alerts_told() == before  # told once, however many purges run
    body = app.test_client().get(f"/api/groups/{group_id}", headers=support.bearer(tokens["viewer"])).get_json()
    assert [(a["actor"], a["detail"]["event"]) for a in body["activity"] if a["kind"] == "alert"] == [
        ("alerts", "group.regressed"), ("alerts", "group.new")]


@pytest.mark.both_databases
def test_the_failed_attempts_of_forgotten_alerts_are_still_counted_by_metrics(app):
    """dlq_alert_failed_attempts_total added up the alerts stored: a purge made it go down (93 to
    6, from outside), and a counter that goes down reads as a restart to Prometheus."""
    rt, client = runtime_of(app), app.test_client()
    now = utcnow()
    with write_transaction(rt.engine) as conn:
        for event_id, attempts, sent in (("old_sent", 5, now - timedelta(days=40)), ("young_sent", 3, now),
                                         ("pending", 2, None)):
            conn.execute(insert(Alert).values(event_id=event_id, url="http://127.0.0.1:9/hook", event="group.new",
                                              group_id=1, body="{}", created_at=now - timedelta(days=40),
                                              attempts=attempts, next_attempt_at=now, sent_at=sent))
    before = value(scrape(client), "dlq_alert_failed_attempts_total")
    assert before == 4 + 2 + 2  # every attempt but the answered one; all of a pending one's
    assert purge_entries(rt, older_than=30 * DAY, actor="test").alerts_removed == 1
    assert value(scrape(client), "dlq_alert_failed_attempts_total") == before
    assert purge_entries(rt, older_than=30 * DAY, actor="test").alerts_removed == 0  # nothing more to forget
    assert value(scrape(client), "dlq_alert_failed_attempts_total") == before


def test_deleting_a_dlq_message_says_deleted_already_gone_or_why_not(nats_server):
    import nats as nats_client

    from dlq_dashboard.nats.streams import NotDeleted, delete_message

    async def scenario():
        nc = await nats_client.connect(nats_server.url)
        js = nc.jetstream()
        try:
            await js.add_stream(name="KEEPS", subjects=["keeps.>"], deny_delete=True)
            await js.add_stream(name="GIVES", subjects=["gives.>"])
            await js.publish("gives.one", b"{}")
            await js.publish("keeps.one", b"{}")
            first = await delete_message(nc, js, "GIVES", 1, 2.0)
            again = await delete_message(nc, js, "GIVES", 1, 2.0)
            never = await delete_message(nc, js, "GIVES", 99, 2.0)
            no_stream = await delete_message(nc, js, "NOSUCH", 1, 2.0)
            with pytest.raises(NotDeleted, match="not permitted"):
                await delete_message(nc, js, "KEEPS", 1, 2.0)
            left = (await js.stream_info("KEEPS")).state.messages
            return first, again, never, no_stream, left
        finally:
            await nc.close()

    assert support.run(scenario()) == (True, False, False, False, 1)
