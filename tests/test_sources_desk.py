"""The desk's view of its sources (SPEC section 12): GET /api/sources and /sources, the banner
and /healthz naming the source that is not well, metrics labelled by source; offline over
entries written as each source's mirror writes them, and on real servers (three sources, one
server killed)."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import pytest

from sqlalchemy import select

from dlq_dashboard.accounts.tokens import create_token
from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.config import load_settings
from dlq_dashboard.db.models import Entry
from dlq_dashboard.ingest.progress import StreamProgress
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import Scope
from dlq_dashboard.times import utcnow
from dlq_dashboard.web.status import source_state

from . import support
from .test_nav import nav_of

NAMES = ["orders", "billing", "shipping"]


# --- the state of a source, as a pure function -----------------------------------------------------

def progress(*, error: str | None = None, behind: float | None = None, lag: int = 0) -> StreamProgress:
    """A stream's progress: stuck with ``error``, or ``lag`` messages behind for ``behind`` seconds."""
    p = StreamProgress("DLQ", last_seq=10, stream_last_seq=10 + lag)
    if behind is not None:
        p.seen.append((utcnow() - timedelta(seconds=behind), 10 + lag))
    if error is not None:
        p.error, p.stuck_since = error, utcnow()
    return p


def test_a_source_whose_nats_does_not_answer_is_unreachable_whatever_its_mirror_says():
    now = utcnow()
    assert source_state(False, None, 10, now) == "unreachable"
    assert source_state(False, [progress(error="OperationalError: locked")], 10, now) == "unreachable"


def test_a_source_whose_write_fails_is_stuck_before_it_is_lagging():
    assert source_state(True, [progress(behind=60, lag=5), progress(error="boom")], 10, utcnow()) == "stuck"


def test_a_source_is_lagging_once_its_oldest_unmirrored_message_has_waited_the_stale_time():
    now = utcnow()
    assert source_state(True, [progress(behind=11, lag=3)], 10, now) == "lagging"
    assert source_state(True, [progress(behind=2, lag=3)], 10, now) == "ok"  # a batch behind a busy stream


def test_a_source_caught_up_or_mirrored_by_another_process_is_ok():
    now = utcnow()
    assert source_state(True, [progress(), progress()], 10, now) == "ok"
    assert source_state(True, None, 10, now) == "ok"  # another replica mirrors it: NATS answers


def test_the_mirrors_log_lines_name_the_source_unless_it_is_the_default_one(caplog):
    caplog.set_level("WARNING", logger="dlq_dashboard.ingest.mirror")
    for source in ("billing", "default"):
        p = StreamProgress("DLQ", source=source)
        p.stuck(OSError("disk full"))
        p.recovered()
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == "mirroring DLQ of source billing is stuck (OSError: disk full); retrying until it succeeds"
    assert said[1].startswith("mirroring DLQ of source billing recovered (stuck since ")
    assert said[2] == "mirroring DLQ is stuck (OSError: disk full); retrying until it succeeds"


# --- offline: the counts of each source -------------------------------------------------------------

@pytest.fixture
def three_offline(tmp_path, make_app):
    """An app of three sources, nothing started, with entries written as each source's mirror does:
    orders 3 open in two groups, billing 2 open in one, shipping none."""
    path = support.sources_file(tmp_path, [
        {"name": name, "nats_url": f"nats://127.0.0.1:{port}", "stream": "DLQ"}
        for port, name in enumerate(NAMES, 1)])
    app = make_app(sources=load_settings({"DLQ_CONFIG": path}).sources)
    engine = runtime_of(app).engine
    now = utcnow()

    def write(source, seq, subject, error):
        headers = support.dlq_headers(subject, **{"Dlq-Error": error})
        ingest_dlq_batch(engine, "DLQ", f"e-{source}", [StreamMessage(seq, f"dlq.{subject}", headers, b"{}", now)],
                         source=source)

    write("orders", 1, "orders.created", "customer 1 not found")
    write("orders", 2, "orders.created", "customer 2 not found")
    write("orders", 3, "orders.paid", "card declined")
    write("billing", 1, "billing.charged", "gateway timeout")
    write("billing", 2, "billing.charged", "gateway timeout")
    return app


def by_name(answer) -> dict:
    return {s["name"]: s for s in answer["sources"]}


@pytest.mark.both_databases
def test_api_sources_counts_each_sources_open_entries_and_last_hour_with_its_biggest_groups(three_offline,
                                                                                          database_url):
    client = support.logged_in(three_offline, "viewer")
    answer = client.get("/api/sources").get_json()
    assert [s["name"] for s in answer["sources"]] == NAMES  # DLQ_CONFIG's order
    found = by_name(answer)
    assert (found["orders"]["open"], found["orders"]["last_hour"]) == (3, 3)
    assert (found["billing"]["open"], found["billing"]["last_hour"]) == (2, 2)
    assert (found["shipping"]["open"], found["shipping"]["last_hour"]) == (0, 0)
    assert sum(found["orders"]["trend"]["minutes"]) == 3 and len(found["orders"]["trend"]["minutes"]) == 60
    assert sum(found["orders"]["trend"]["minutes"][-2:]) == 3  # the current minute last (or the one before)
    top = found["orders"]["groups"]
    assert [(g["subject"], g["open"]) for g in top] == [("orders.created", 2), ("orders.paid", 1)]
    assert top[0]["url"] == f"/groups/{top[0]['id']}" and top[0]["label"] == "customer <id> not found"
    assert found["billing"]["entries_url"] == "/?source=billing"
    assert found["billing"]["groups_url"] == "/groups?source=billing"
    # Nothing started: no connection, nothing mirrored here, the committed positions from the database.
    assert found["orders"]["status"] == "unreachable" and found["orders"]["mirrored_here"] is False
    assert found["orders"]["mirror_lag"] is None
    assert [(s["name"], s["last_seq"], s["lag"]) for s in found["orders"]["streams"]] == [
        ("DLQ", 3, None), ("DLQ_ADVISORIES", 0, None)]


def test_a_closed_entry_leaves_the_open_count_but_stays_in_the_last_hour(three_offline):
    rt = runtime_of(three_offline)
    with rt.engine.connect() as conn:
        entry_id = conn.execute(select(Entry.id).where(Entry.source == "billing")).scalars().first()
    close_entry(rt, entry_id, 1, actor="ann")
    found = by_name(support.logged_in(three_offline, "viewer").get("/api/sources").get_json())
    assert (found["billing"]["open"], found["billing"]["last_hour"]) == (1, 2)


@pytest.mark.both_databases
def test_a_scoped_reader_sees_only_the_counts_inside_its_scopes_and_no_source_outside_them(three_offline,
                                                                                         database_url):
    rt = runtime_of(three_offline)
    token = create_token(rt.engine, "billing-viewer", "viewer", scopes=(Scope("billing.>", "billing"),
                                                                        Scope("orders.paid", "orders")))
    answer = three_offline.test_client().get("/api/sources", headers=support.bearer(token)).get_json()
    found = by_name(answer)
    assert list(found) == ["orders", "billing"]  # no scope reaches shipping: not even its counts
    assert (found["orders"]["open"], found["orders"]["last_hour"]) == (1, 1)
    assert [g["subject"] for g in found["orders"]["groups"]] == ["orders.paid"]
    assert found["billing"]["open"] == 2
    page = three_offline.test_client().get("/sources", headers=support.bearer(token)).get_data(as_text=True)
    # The banner names every source that is not well (no entry of it); the table holds none outside.
    assert '<tr data-source="shipping"' not in page and "customer" not in page
    # The list's Source choice offers the sources the reader reaches, no other.
    listing = three_offline.test_client().get("/", headers=support.bearer(token)).get_data(as_text=True)
    choice = re.search(r'<select name="source">(.*?)</select>', listing, re.S).group(1)
    assert re.findall(r'<option value="([^"]*)"', choice) == ["", "orders", "billing"]
    admin = support.logged_in(three_offline, "admin").get("/").get_data(as_text=True)
    assert '<option value="shipping"' in admin


def test_the_sources_page_shows_each_source_worst_first_with_links_filtered_by_source(three_offline):
    client = support.logged_in(three_offline, "viewer")
    response = client.get("/sources")
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    rows = re.findall(r'<tr data-source="([^"]+)"', page)
    # All unreachable here (nothing started): then by the last hour's arrivals.
    assert rows == ["orders", "billing", "shipping"]
    assert 'href="/?source=billing"' in page and 'href="/groups?source=billing"' in page
    assert "customer &lt;id&gt; not found" in page and "unreachable" in page
    # The block polls itself: an htmx request gets it alone.
    fragment = client.get("/sources", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert fragment.lstrip().startswith('<section id="sources"') and "<nav" not in fragment


def test_with_several_sources_the_nav_has_sources_and_marks_it_on_its_page(three_offline):
    client = support.logged_in(three_offline, "viewer")
    links, _ = nav_of(client.get("/").get_data(as_text=True))
    assert [label for label, _ in links][:3] == ["Dead letters", "Groups", "Sources"]
    assert nav_of(client.get("/sources").get_data(as_text=True))[1] == ["Sources"]


def test_with_several_sources_the_users_page_names_them_for_the_scopes_an_admin_writes(three_offline, offline_app):
    # A scope "source:pattern" needs a source's name as DLQ_CONFIG spells it.
    page = support.logged_in(three_offline, "admin").get("/admin/users").get_data(as_text=True)
    assert "(the sources: <code>orders</code>, <code>billing</code>, <code>shipping</code>)" in page
    assert "the sources:" not in support.logged_in(offline_app, "admin").get("/admin/users").get_data(as_text=True)


def test_with_one_source_the_nav_has_no_sources_link(offline_app):
    client = support.logged_in(offline_app, "admin")
    for url in ("/", "/groups", "/sources"):
        links, _ = nav_of(client.get(url).get_data(as_text=True))
        assert "Sources" not in [label for label, _ in links], url


def test_with_several_sources_the_banner_names_each_source_not_well(three_offline):
    banner = support.logged_in(three_offline, "viewer").get("/status/banner").get_data(as_text=True)
    for name in NAMES:  # nothing started: every source's NATS is away
        assert f"<strong>Source {name}: NATS is not reachable</strong>" in banner
        assert f'data-stale="nats" data-source="{name}"' in banner
    # What waits is that source's: the others' entries are republished as ever.
    assert banner.count("republishing them waits until its NATS answers; the other sources go on.") == 3
    assert "republishing waits until NATS answers" not in banner


def test_with_one_source_the_banner_and_healthz_read_as_before(offline_app):
    banner = support.logged_in(offline_app, "viewer").get("/status/banner").get_data(as_text=True)
    assert "<strong>NATS is not reachable</strong>" in banner and "Source" not in banner
    assert "republishing waits until NATS answers." in banner
    body = offline_app.test_client().get("/healthz").get_json()
    assert "sources" not in body and set(body) == {"status", "nats", "database", "mirror_lag", "mirror",
                                                                "search_lag"}


def test_with_one_source_the_metrics_carry_no_source_label(offline_app):
    support.dead_letter(offline_app, 1)
    text = offline_app.test_client().get("/metrics").get_data(as_text=True)
    assert "dlq_nats_connected 0.0" in text and 'source="' not in text


def test_with_several_sources_the_metrics_are_labelled_by_source(three_offline):
    text = three_offline.test_client().get("/metrics").get_data(as_text=True)
    assert 'dlq_entries{reason="none",source="orders",status="open"} 3.0' in text
    assert 'dlq_entries{reason="none",source="billing",status="open"} 2.0' in text
    assert 'dlq_groups_open{reason="none",source="orders"} 2.0' in text
    assert 'dlq_mirror_last_sequence{source="orders",stream="DLQ"} 3.0' in text
    assert 'dlq_nats_connected{source="shipping"} 0.0' in text
    assert "dlq_entries_received_total 5.0" in text  # every source together


# --- on real servers: three sources, one server killed -------------------------------------------

@pytest.fixture
def three_live(tmp_path, make_app, shared_server, nats_server):
    """An app mirroring three sources: accounts A and B of one server, and a second server (shipping)."""
    path = support.sources_file(tmp_path, [
        {"name": "orders", "nats_url": support.account_url(shared_server, "a"), "stream": "DLQ"},
        {"name": "billing", "nats_url": support.account_url(shared_server, "b"), "stream": "DLQ"},
        # Signed in (a server without users takes any): /healthz must name it without them.
        {"name": "shipping", "nats_url": nats_server.url.replace("nats://", "nats://ship:pship@"),
         "stream": "DLQ_SHIPPING", "subjects": ["dlq.shipping.>"]},
    ])
    return support.start_sources(make_app(sources=load_settings({"DLQ_CONFIG": path}).sources))


def publish(url: str, *subjects: str) -> None:
    asyncio.run(support.publish_many(url, [
        (f"dlq.{subject}", b'{"n": %d}' % i, support.dlq_headers(subject, **{"Dlq-Error": f"failed {i}"}))
        for i, subject in enumerate(subjects)]))


def sources_of(client) -> dict:
    return by_name(client.get("/api/sources").get_json())


@pytest.mark.slow
def test_one_sources_server_killed_is_named_unreachable_while_the_others_stay_ok_and_go_on_mirroring(
        three_live, shared_server, nats_server):
    app = three_live
    a, b = support.account_url(shared_server, "a"), support.account_url(shared_server, "b")
    publish(a, "orders.created")
    publish(b, "billing.charged", "billing.charged")
    publish(nats_server.url, "shipping.sent")
    viewer, admin = support.logged_in(app, "viewer"), support.logged_in(app, "admin")

    def counted():
        found = sources_of(viewer)
        return found if [found[n]["open"] for n in NAMES] == [1, 2, 1] and all(
            found[n]["mirror_lag"] == 0 for n in NAMES) else None

    found = support.wait_for(counted, timeout=20, message="each source's entries counted")
    support.wait_for(lambda: {n: sources_of(viewer)[n]["status"] for n in NAMES} == {n: "ok" for n in NAMES},
                     timeout=10, message="every source ok")
    assert all(found[n]["mirrored_here"] and found[n]["last_hour"] == found[n]["open"] for n in NAMES)
    assert [(s["name"], s["last_seq"], s["stream_last_seq"]) for s in found["billing"]["streams"]][0] == ("DLQ", 2, 2)
    page = viewer.get("/sources").get_data(as_text=True)
    assert re.findall(r'<tr data-source="([^"]+)"', page) == ["billing", "orders", "shipping"]  # busiest first
    metrics = app.test_client().get("/metrics").get_data(as_text=True)
    assert 'dlq_mirror_lag_messages{source="billing",stream="DLQ"} 0.0' in metrics
    assert 'dlq_entries{reason="none",source="billing",status="open"} 2.0' in metrics
    assert 'dlq_nats_connected{source="shipping"} 1.0' in metrics
    health = admin.get("/healthz")
    assert health.status_code == 200 and set(health.get_json()["sources"]) == set(NAMES)
    assert health.get_json()["mirror_lag"] == 0

    nats_server.kill()
    support.wait_for(lambda: sources_of(viewer)["shipping"]["status"] == "unreachable", timeout=10,
                     message="shipping unreachable")
    # The others stay ok (waited for: on a loaded machine their own probe may miss a beat).
    support.wait_for(lambda: [sources_of(viewer)[n]["status"] for n in ("orders", "billing")] == ["ok", "ok"],
                     timeout=10, message="orders and billing ok")
    banner = viewer.get("/status/banner").get_data(as_text=True)
    assert "Source shipping: NATS is not reachable" in banner
    assert "Source orders" not in banner and "Source billing" not in banner
    health = admin.get("/healthz")
    body = health.get_json()
    assert health.status_code == 503 and body["status"] == "degraded"
    assert body["sources"]["shipping"]["status"] == "degraded"
    assert body["sources"]["shipping"]["nats"]["connected"] is False
    # An admin reads which server is away (it read null), without its user and password.
    assert body["sources"]["shipping"]["nats"]["url"] == nats_server.url and "pship" not in health.get_data(as_text=True)
    assert body["sources"]["orders"]["status"] == body["sources"]["billing"]["status"] == "ok"
    assert body["nats"]["connected"] is True  # the top fields are the main source's (orders)
    assert 'dlq_nats_connected{source="shipping"} 0.0' in app.test_client().get("/metrics").get_data(as_text=True)
    # How far behind it is cannot be known while its NATS is away: null, as /healthz says, and so
    # is the lag over every source's streams at the top (the SPEC's mirror_lag), not the main one's.
    shipping = sources_of(viewer)["shipping"]
    assert body["sources"]["shipping"]["mirror_lag"] is None and shipping["mirror_lag"] is None
    assert body["sources"]["orders"]["mirror_lag"] == 0 and body["mirror_lag"] is None
    assert [(s["lag"], s["stream_last_seq"]) for s in shipping["streams"]] == [(None, None)] * len(shipping["streams"])
    assert sources_of(viewer)["orders"]["mirror_lag"] == 0

    # The others go on mirroring.
    publish(a, "orders.paid")
    publish(b, "billing.refunded")
    support.wait_for(lambda: [sources_of(viewer)[n]["open"] for n in ("orders", "billing")] == [2, 3], timeout=20,
                     message="the other sources mirrored while shipping is away")
    assert sources_of(viewer)["shipping"]["open"] == 1  # what was mirrored stays
