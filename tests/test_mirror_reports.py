"""The mirror's reports: a replica that does not mirror tells in its banner and on /sources what
the one that mirrors knows (a stream stuck and why, behind since when), a few seconds later, and
stops telling it once the lease the report came with has expired; its /healthz
stays ok, so a load balancer keeps it in rotation."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy.exc import OperationalError, ProgrammingError

from dlq_dashboard import create_app
from dlq_dashboard.db.liveness import DatabaseProbe
from dlq_dashboard.db.leases import acquire_lease, release_lease
from dlq_dashboard.db.mirror_reports import StreamReport, encode_report, read_reports
from dlq_dashboard.ingest.progress import StreamProgress
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow
from dlq_dashboard.web.status import fresh_reports, source_state

from . import support
from .test_mirror_hardening import FULL_DISK, WriterFault, health, publish_dead_letters, stuck_health

STUCK = "The mirror is stuck on stream DLQ"


def report(stream: str = "DLQ", *, error: str | None = None, until: timedelta = timedelta(seconds=15),
           source: str = "default") -> StreamReport:
    now = utcnow()
    return StreamReport(source, stream, 10, 14, error, now if error else None, now - timedelta(seconds=30), now + until)


@pytest.mark.both_databases
def test_a_replica_that_does_not_mirror_tells_what_the_mirroring_one_reported_and_stays_in_rotation(
        app, settings, nats_server, monkeypatch):
    rt = runtime_of(app)
    other = create_app({"SETTINGS": settings, "TESTING": True})
    second = runtime_of(other).start()
    try:
        assert second.bridge.wait_connected(10) and rt.mirror.leader and not second.mirror.leader
        replica_tells_and_stays_in_rotation(app, other, nats_server, monkeypatch)
    finally:
        second.stop()


def replica_tells_and_stays_in_rotation(app, other, nats_server, monkeypatch) -> None:
    """Each channel of the replica that does not mirror: the banner's fragment, a whole page (the
    banner rendered with it), /sources and GET /api/sources; and its /healthz."""
    rt = runtime_of(app)
    viewer = support.logged_in(other, "viewer")

    fault = WriterFault(monkeypatch)
    fault.on.set()
    publish_dead_letters(nats_server.url, 5)
    support.wait_for(lambda: stuck_health(app, FULL_DISK), timeout=10, message="the mirroring replica to be stuck")

    def banner() -> str:
        return viewer.get("/status/banner").get_data(as_text=True)

    def stuck_banner() -> str | None:
        text = banner()
        return text if STUCK in text else None

    text = support.wait_for(stuck_banner, timeout=20, message="the other replica's banner to tell the mirror is stuck")
    assert "database or disk is full" in text
    # One sentence after the error, whether or not it counts the messages waiting ("... it retries").
    assert re.search(r"database or disk is full\.\s+(\S+ messages? of the stream not mirrored yet; it|It) tries again "
                     r"until it succeeds; nothing is lost meanwhile\.", re.sub(r"<[^>]+>", "", text)), text
    page = viewer.get("/").get_data(as_text=True)
    assert STUCK in page and "database or disk is full" in page
    sources = viewer.get("/sources").get_data(as_text=True)
    assert "stuck on DLQ" in sources and FULL_DISK in sources and "mirrored by another process" in sources
    source = viewer.get("/api/sources").get_json()["sources"][0]
    assert source["status"] == "stuck" and source["mirrored_here"] is False
    dlq = next(s for s in source["streams"] if s["name"] == "DLQ")
    assert FULL_DISK in dlq["error"] and dlq["stuck_since"] and dlq["lag"] == 5 and dlq["last_seq"] == 0
    # Readiness is the mirroring replica's own: this one keeps serving.
    other.config["TEST_ADMIN_TOKEN"] = app.config["TEST_ADMIN_TOKEN"]  # one database: one token of that name
    status, body = health(other)
    assert status == 200 and body["status"] == "ok" and body["mirror"]["leader"] is False

    fault.on.clear()
    support.wait_for(lambda: support.entry_count(rt.engine) == 5, timeout=20, message="the five after the fault")
    support.wait_for(lambda: STUCK not in banner(), timeout=20, message="the other replica's banner to clear")
    source = viewer.get("/api/sources").get_json()["sources"][0]
    assert source["status"] == "ok" and source["mirror_lag"] == 0


@pytest.mark.both_databases
def test_a_mirror_lease_carries_its_report_until_it_expires_and_other_leases_carry_none(offline_app):
    engine = runtime_of(offline_app).engine
    stuck_since, behind = datetime(2026, 12, 2, 9, 30, 15, 123456), datetime(2026, 12, 2, 9, 30)
    later = utcnow()  # not encoded: the lease's expiry is the report's
    told = encode_report("orders", [StreamReport("orders", "DLQ", 10, 14, "boom", stuck_since, behind, later),
                                    StreamReport("orders", "DLQ_ADVISORIES", 3, 3, None, None, None, later)])
    assert acquire_lease(engine, "mirror:orders", "host:1:a", 15, told)
    assert acquire_lease(engine, "mirror:billing", "host:2:b", 15, encode_report("billing", []))
    assert acquire_lease(engine, "alerts", "host:1:a", 15)
    assert not acquire_lease(engine, "mirror:orders", "host:3:c", 15, encode_report("orders", []))  # held: unchanged
    release_lease(engine, "mirror:billing", "host:2:b")
    mirrors = ["mirror:orders", "mirror:billing"]
    with engine.connect() as conn:
        found = read_reports(conn, mirrors + ["alerts"])
    assert list(found) == ["orders"]  # billing's lease was given up
    dlq, advisories = found["orders"]
    assert (dlq.stream, dlq.error, dlq.stuck_since, dlq.behind_since(), dlq.lag) == ("DLQ", "boom", stuck_since, behind, 4)
    assert (advisories.stream, advisories.error, advisories.lag) == ("DLQ_ADVISORIES", None, 0)
    with engine.connect() as conn:
        assert read_reports(conn, ["mirror:billing"]) == {}  # only the leases asked for
    # Expired, its holder may be gone: read with its expiry (what the banner says while none
    # mirrors), told as no report of the streams.
    assert fresh_reports(SimpleNamespace(reports=found), "orders", dlq.until + timedelta(seconds=1)) == ()


def test_a_report_whose_lease_has_expired_since_it_was_read_is_not_told():
    now = utcnow()
    rt = SimpleNamespace(reports={"default": (report(error="boom"),
                                              report("DLQ_ADVISORIES", error="old", until=timedelta(seconds=-1)))})
    told = fresh_reports(rt, "default", now)
    assert [r.stream for r in told] == ["DLQ"]
    assert source_state(True, told, 10, now) == "stuck"
    assert source_state(True, fresh_reports(SimpleNamespace(reports={}), "default", now) or None, 10, now) == "ok"
    # Behind for 30 s (the reports' behind_since) is lagging past a 10 s threshold, not past 60 s.
    assert source_state(True, [report()], 10, now) == "lagging"
    assert source_state(True, [report()], 60, now) == "ok"


def test_the_probe_counts_a_failed_watch_as_an_outage_only_when_the_database_cannot_be_used(tmp_path):
    url = support.migrated_sqlite(tmp_path / "probe.sqlite3")
    failure: list[Exception] = []

    def watch(conn):
        if failure:
            raise failure[0]

    probe = DatabaseProbe(url, watch=watch)
    try:
        failure.append(ProgrammingError("SELECT", {}, Exception("no such table: mirror_reports")))
        assert probe.check().reachable  # a query gone wrong is not the database gone
        failure[0] = OperationalError("SELECT", {}, Exception("unable to open database file"))
        state = probe.check()
        assert not state.reachable and "unable to open database file" in state.last_error
        failure.clear()
        assert probe.check().reachable
    finally:
        probe.stop()


def test_while_no_process_mirrors_the_banner_says_since_when_the_lease_ran_out(offline_app):
    """A replica that mirrored died: until another takes its lease over (within seconds) no process
    mirrors, and the banner said nothing (the report was no longer told, and no other came)."""
    rt = runtime_of(offline_app)
    viewer = support.logged_in(offline_app, "viewer")
    # NATS answers here (a bridge's state alone): the source is told stuck for want of a mirror only.
    rt.bridge = SimpleNamespace(state=SimpleNamespace(connected=True, unreachable_since=None, last_error=None))
    rt.reports = {"default": (report(until=timedelta(seconds=-3)), report("DLQ_ADVISORIES", until=timedelta(seconds=-3)))}
    banner = viewer.get("/status/banner").get_data(as_text=True)
    assert "No process mirrors the streams" in banner and 'data-announce-end="The streams are mirrored again."' in banner
    assert "ran out" in banner and "another replica takes it over" in banner
    assert "NATS is not reachable" not in banner
    assert viewer.get("/api/sources").get_json()["sources"][0]["status"] == "stuck"
    rt.reports = {"default": (report(), report("DLQ_ADVISORIES"))}  # another took it over and reported
    assert "No process mirrors" not in viewer.get("/status/banner").get_data(as_text=True)
    assert viewer.get("/api/sources").get_json()["sources"][0]["status"] == "lagging"  # what it reported: behind 30 s
    rt.reports = {}  # none ever mirrored (or the lease was given up): nothing to say of it
    assert "No process mirrors" not in viewer.get("/status/banner").get_data(as_text=True)


@pytest.mark.both_databases
def test_a_lease_given_up_carries_no_report_one_that_ran_out_carries_its_expiry(offline_app):
    engine = runtime_of(offline_app).engine
    assert acquire_lease(engine, "mirror", "host:1:a", 0.05, encode_report("default", [report()]))
    assert acquire_lease(engine, "mirror:billing", "host:1:a", 15, encode_report("billing", [report(source="billing")]))
    release_lease(engine, "mirror:billing", "host:1:a")
    support.wait_for(lambda: utcnow() > read_reports_now(engine)["default"][0].until, timeout=5,
                     message="the lease to run out")
    found = read_reports_now(engine)
    assert list(found) == ["default"] and fresh_reports(SimpleNamespace(reports=found), "default", utcnow()) == ()


def read_reports_now(engine):
    with engine.connect() as conn:
        return read_reports(conn, ["mirror", "mirror:billing"])


def test_a_report_carries_whether_the_streams_head_is_known_and_an_older_report_is_read_as_known(offline_app):
    # A stream the mirror could not read (one JetStream will not make): its lag is unknown, null on
    # the other replicas' /sources and /api/sources too, not 0.
    engine = runtime_of(offline_app).engine
    unread = StreamProgress("DLQ", source="orders")
    read = StreamProgress("DLQ_ADVISORIES", source="orders")
    read.saw_stream(3)
    assert acquire_lease(engine, "mirror:orders", "host:1:a", 15, encode_report("orders", [unread, read]))
    older = encode_report("billing", [read]).replace(', "head_known": true', "")  # a replica of before
    assert acquire_lease(engine, "mirror:billing", "host:2:b", 15, older)
    with engine.connect() as conn:
        found = read_reports(conn, ["mirror:orders", "mirror:billing"])
    assert [(r.stream, r.head_known, r.known_lag) for r in found["orders"]] == [("DLQ", False, None),
                                                                                ("DLQ_ADVISORIES", True, 3)]
    assert [(r.head_known, r.known_lag) for r in found["billing"]] == [(True, 3)]
