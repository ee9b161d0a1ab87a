"""Bulk jobs over several sources (SPEC section 12), on real servers: each item goes out through
its own source's connection, each source paced on its own, and one source unreachable stops
only its own items, which finish exactly once when it is back."""

from __future__ import annotations

import html
import re
import threading

import pytest
from sqlalchemy import select, update

from dlq_dashboard.actions.bulk import jobs, pacing, publisher, work
from dlq_dashboard.actions.bulk.lanes import Lane, Lanes
from dlq_dashboard.actions.bulk.refusals import republish_refusals
from dlq_dashboard.config import load_settings
from dlq_dashboard.db.models import Entry, JobItem, Republish
from dlq_dashboard.runtime import runtime_of

from . import support


@pytest.fixture
def urls(shared_server, nats_server):
    """The URL of each source: accounts A and B of one server, and a second server."""
    return {"orders": support.account_url(shared_server, "a"), "billing": support.account_url(shared_server, "b"),
            "shipping": nats_server.url}


def sources_app(make_app, tmp_path, urls, names=("orders", "billing", "shipping"), **settings):
    """An app mirroring these sources (stream DLQ on dlq.> in each), started."""
    path = support.sources_file(tmp_path, [{"name": n, "nats_url": urls[n], "stream": "DLQ"} for n in names])
    app = make_app(sources=load_settings({"DLQ_CONFIG": path}).sources, **settings)
    return support.start_sources(app)


def dead_letters(app, url: str, source: str, n: int) -> list[int]:
    """Dead-letter ``n`` orders.created messages into a source's DLQ, each payload naming the
    source; wait for the mirror; return their entry ids."""
    rt = runtime_of(app)
    headers = support.dlq_headers("orders.created", Dlq_Reason="fatal", Dlq_Error="handler failed")
    support.run(support.publish_many(url, [("dlq.orders.created", b'{"source": "%s", "n": %d}' % (source.encode(), i),
                                            dict(headers)) for i in range(n)]))

    def stored():
        with rt.engine.connect() as conn:
            return list(conn.execute(select(Entry.id).where(Entry.source == source).order_by(Entry.id)).scalars())

    return support.wait_for(lambda: len(found := stored()) >= n and found, timeout=30,
                            message=f"the dead letters of {source}")


def arrived(url: str) -> list[bytes]:
    """The payloads stream ORDERS of a source's account holds, each republish's msgId checked unique."""
    messages = support.stream_messages(url, "ORDERS")
    assert len({m.headers["Nats-Msg-Id"] for m in messages}) == len(messages)
    return sorted(bytes(m.data) for m in messages)


def payloads_of(rt, ids) -> list[bytes]:
    with rt.engine.connect() as conn:
        return sorted(bytes(p) for p in conn.execute(select(Entry.payload).where(Entry.id.in_(ids))).scalars())


def job_finished(rt, job_id: int, timeout: float = 60):
    return support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s,
                            timeout=timeout, message="the job to finish")


def pending_by_source(rt, job_id: int) -> dict[str, int]:
    with rt.engine.connect() as conn:
        rows = conn.execute(select(Entry.source).join(JobItem, JobItem.entry_id == Entry.id)
                            .where(JobItem.job_id == job_id, JobItem.state == "pending")).scalars()
        found: dict[str, int] = {}
        for source in rows:
            found[source] = found.get(source, 0) + 1
        return found


@pytest.mark.both_databases
def test_a_bulk_republish_of_two_sources_sends_each_entry_once_through_its_own_source(
        make_app, tmp_path, urls, database_url):
    app = sources_app(make_app, tmp_path, urls)
    rt = runtime_of(app)
    for name in urls:
        support.make_orders_stream(urls[name])
    orders, billing, shipping = (dead_letters(app, urls[n], n, 6) for n in ("orders", "billing", "shipping"))
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=orders + shipping)
    status = job_finished(rt, job_id)
    assert (status["done"], status["failed"], status["waits_for"]) == (12, 0, [])
    assert arrived(urls["orders"]) == payloads_of(rt, orders)
    assert arrived(urls["shipping"]) == payloads_of(rt, shipping)
    assert arrived(urls["billing"]) == []  # not selected: nothing went to the other account
    with rt.engine.connect() as conn:
        intents = conn.execute(select(Republish.entry_id, Republish.source, Republish.state)).all()
    source_of = {**{i: "orders" for i in orders}, **{i: "shipping" for i in shipping}}
    assert sorted(intents) == sorted((i, source_of[i], "published") for i in orders + shipping)


def test_an_item_of_a_source_no_longer_configured_fails_and_the_others_go_out(make_app, tmp_path, urls):
    app = sources_app(make_app, tmp_path, urls, names=("orders", "billing"))
    rt = runtime_of(app)
    support.make_orders_stream(urls["orders"])
    orders = dead_letters(app, urls["orders"], "orders", 3)
    billing = dead_letters(app, urls["billing"], "billing", 2)
    with rt.engine.begin() as conn:  # mirrored once from a source since taken out of DLQ_CONFIG
        conn.execute(update(Entry).where(Entry.id.in_(billing)).values(source="gone"))
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=orders + billing)
    status = job_finished(rt, job_id)
    assert (status["done"], status["failed"]) == (3, 2)
    failed = jobs.job_status(rt, job_id, item_state="failed")["items"]
    assert [i["result"] for i in failed] == [
        f"Source 'gone' is not configured here (DLQ_CONFIG names no such source), so entry {i} cannot be "
        "republished from this dashboard." for i in billing]
    assert arrived(urls["orders"]) == payloads_of(rt, orders)


def test_an_item_of_an_old_name_in_renamed_from_goes_out_through_the_renaming_source(make_app, tmp_path, urls):
    # It failed as "Source 'gone' is not configured here", though billing's renamed_from names gone.
    path = support.sources_file(tmp_path, [{"name": "orders", "nats_url": urls["orders"], "stream": "DLQ"},
                                           {"name": "billing", "nats_url": urls["billing"], "stream": "DLQ",
                                            "renamed_from": "gone"}])
    app = support.start_sources(make_app(sources=load_settings({"DLQ_CONFIG": path}).sources))
    rt = runtime_of(app)
    support.make_orders_stream(urls["orders"])
    support.make_orders_stream(urls["billing"])
    orders = dead_letters(app, urls["orders"], "orders", 3)
    billing = dead_letters(app, urls["billing"], "billing", 2)
    with rt.engine.begin() as conn:  # mirrored under billing's old name
        conn.execute(update(Entry).where(Entry.id.in_(billing)).values(source="gone"))
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=orders + billing)
    status = job_finished(rt, job_id)
    assert (status["done"], status["failed"], status["waits_for"]) == (5, 0, [])
    assert arrived(urls["orders"]) == payloads_of(rt, orders)
    assert arrived(urls["billing"]) == payloads_of(rt, billing)  # account B, billing's connection


def test_the_refusals_preview_asks_each_entry_its_own_source(make_app, tmp_path, urls):
    app = sources_app(make_app, tmp_path, urls, names=("orders", "billing"))
    rt = runtime_of(app)
    support.make_orders_stream(urls["orders"])  # account B has no stream for orders.>
    orders = dead_letters(app, urls["orders"], "orders", 3)
    billing = dead_letters(app, urls["billing"], "billing", 2)
    found = republish_refusals(rt, orders + billing)
    assert (found["refused"], found["note"]) == (2, None)
    assert found["reasons"] == {
        "Source 'billing': No stream stores subject orders.created: a republish would be refused.": 2}


def test_each_source_publishes_from_a_process_of_its_own(make_app, tmp_path, urls, monkeypatch):
    app = sources_app(make_app, tmp_path, urls, names=("orders", "shipping"), republish_rate=0)
    rt = runtime_of(app)
    for name in ("orders", "shipping"):
        support.make_orders_stream(urls[name])
    orders, shipping = dead_letters(app, urls["orders"], "orders", 300), dead_letters(
        app, urls["shipping"], "shipping", 300)
    monkeypatch.setattr(work, "OWN_PUBLISHER_FROM", 1)
    monkeypatch.setattr(pacing, "WINDOW", 50)
    sent: list[tuple[str, int]] = []
    original = publisher.Publisher.publish
    monkeypatch.setattr(publisher.Publisher, "publish",
                        lambda self, messages: sent.append((self.source, len(messages))) or original(self, messages))
    support.publish_once_connected(monkeypatch)  # so that the windows go through the processes
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=orders + shipping)
    status = job_finished(rt, job_id)
    assert (status["done"], status["failed"]) == (600, 0)
    assert {source for source, _ in sent} == {"orders", "shipping"}
    assert arrived(urls["orders"]) == payloads_of(rt, orders)
    assert arrived(urls["shipping"]) == payloads_of(rt, shipping)


@pytest.mark.slow
@pytest.mark.both_databases
def test_a_source_killed_mid_job_waits_and_its_items_finish_once_it_is_back(make_app, tmp_path, urls, nats_server,
                                                                            database_url):
    app = sources_app(make_app, tmp_path, urls, names=("orders", "shipping"), republish_rate=20)
    rt = runtime_of(app)
    for name in ("orders", "shipping"):
        support.make_orders_stream(urls[name])
    orders = dead_letters(app, urls["orders"], "orders", 60)
    shipping = dead_letters(app, urls["shipping"], "shipping", 60)
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=orders + shipping)
    support.wait_for(lambda: pending_by_source(rt, job_id).get("shipping", 60) <= 56, timeout=30,
                     message="the first republishes of shipping")
    nats_server.kill()
    # The other source's items go on and finish; the killed source's wait, and the job says for what.
    support.wait_for(lambda: "orders" not in pending_by_source(rt, job_id), timeout=60,
                     message="every item of orders")
    status = jobs.job_status(rt, job_id, limit=0)
    assert status["state"] == "running" and status["pending"] > 0
    assert status["waits_for"] == ["shipping"]
    page = support.logged_in(app, "viewer").get(f"/jobs/{job_id}").get_data(as_text=True)
    assert '<dt>Waits for</dt><dd class="job-waits-for">NATS of shipping: its items wait, nothing is lost</dd>' in page
    assert arrived(urls["orders"]) == payloads_of(rt, orders)
    nats_server.start()
    status = job_finished(rt, job_id, timeout=90)
    assert (status["done"], status["failed"], status["waits_for"]) == (120, 0, [])
    assert arrived(urls["shipping"]) == payloads_of(rt, shipping)  # each once, none lost
    assert arrived(urls["orders"]) == payloads_of(rt, orders)
    with rt.engine.connect() as conn:
        states = conn.execute(select(Republish.state)).scalars().all()
    assert states == ["published"] * 120


def test_with_a_small_rate_each_source_is_paced_by_its_own_bucket_side_by_side(make_app, tmp_path, urls,
                                                                               monkeypatch):
    app = sources_app(make_app, tmp_path, urls, names=("orders", "billing"), republish_rate=20)
    rt = runtime_of(app)
    for name in ("orders", "billing"):
        support.make_orders_stream(urls[name])
    orders = dead_letters(app, urls["orders"], "orders", 10)
    billing = dead_letters(app, urls["billing"], "billing", 10)
    taken: list[tuple[str, int]] = []
    real_take = pacing.TokenBucket.take

    def take(self, n, stop):
        taken.append((self.name, n))
        return real_take(self, n, stop)

    monkeypatch.setattr(pacing.TokenBucket, "take", take)
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=orders + billing)
    status = job_finished(rt, job_id)
    assert (status["done"], status["rate_per_source"]) == (20, 20)
    counted: dict[str, int] = {}
    for name, n in taken:
        counted[name] = counted.get(name, 0) + n
    assert counted == {"orders": 10, "billing": 10}  # each source's items from its own bucket
    # Windows of 2 (a tenth of a second at 20 a second), the sources in turn: side by side.
    assert taken[:6] == [("orders", 2), ("billing", 2)] * 3
    page = support.logged_in(app, "viewer").get(f"/jobs/{job_id}").get_data(as_text=True)
    assert '<dt>Pace</dt><dd class="job-pace">20 a second for each source</dd>' in page
    assert "Waits for" not in page


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_source_has_a_bucket_of_its_own_and_one_emptied_holds_back_no_other():
    clock = Clock()  # times in quarters of a second: exact in binary
    orders, billing = (pacing.TokenBucket(4, 2, name=n, clock=clock) for n in ("orders", "billing"))
    assert orders.try_take(2) == 0 and billing.try_take(2) == 0  # each its burst
    assert orders.try_take(2) == 0.5  # orders waits half a second (4 a second)...
    clock.now += 0.25
    assert billing.try_take(2) == 0.25  # ...billing its own wait, not orders' added to it
    clock.now += 0.25
    assert orders.try_take(2) == 0 and billing.try_take(2) == 0
    clock.now += 10  # 40 tokens' time, but never more than the burst at once
    assert orders.try_take(2) == 0 and orders.try_take(2) == 0.5
    assert (orders.taken, billing.taken) == (6, 4)


def test_the_lanes_take_turns_and_pass_over_one_whose_source_is_away():
    class Bridge:
        def __init__(self, up):
            self.state = type("State", (), {"connected": up})()

    class Runtime:
        def __init__(self):
            self.bridges = {"orders": Bridge(True), "billing": Bridge(True)}

        def bridge_for(self, source):
            return self.bridges.get(source)

    rt = Runtime()
    lanes = Lanes([Lane("orders"), Lane("billing"), Lane("gone", configured=False)], several=True)
    assert [lanes.pick(rt).source for _ in range(4)] == ["orders", "billing", "gone", "orders"]
    rt.bridges["billing"].state.connected = False
    lanes.lanes[1].after = 7
    assert [lanes.pick(rt).source for _ in range(3)] == ["gone", "orders", "gone"]
    assert lanes.lanes[1].after == 0  # passed over: its next pass starts from its first item
    assert lanes.waiting(rt) == ["billing"]
    lanes.lanes[0].wait_a_second()  # its last window waits for NATS
    assert lanes.pick(rt).source == "gone" and lanes.pick(rt).source == "gone"
    lanes.drop(lanes.lanes[2])
    assert lanes.pick(rt) is None  # every lane left waits: the job waits for NATS
    rt.bridges["billing"].state.connected = True
    assert lanes.pick(rt).source == "billing"


def test_a_job_stopped_while_a_lane_waits_is_woken_by_a_cancel():
    bucket = pacing.TokenBucket(1, 1, name="orders")
    stop = threading.Event()
    assert bucket.take(1, stop)
    stop.set()
    assert not bucket.take(1, stop)  # a cancel wakes the wait for tokens


def test_the_previews_where_they_go_asks_each_source_for_its_stream(make_app, tmp_path, urls):
    app = sources_app(make_app, tmp_path, urls, names=("orders", "billing"))
    support.make_orders_stream(urls["orders"])  # account B has no stream for orders.>
    orders = dead_letters(app, urls["orders"], "orders", 3)
    billing = dead_letters(app, urls["billing"], "billing", 2)
    client = support.logged_in(app, "operator")
    page = client.post("/bulk/preview", data={"action": "republish", "ids": orders + billing,
                                      "csrf_token": support.csrf_token(client, "/")}).get_data(as_text=True)
    table = page.split("<h2>Where they go</h2>", 1)[1].split("</table>", 1)[0]
    rows = [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", row)).split()) for row in table.split("<tr>")[2:]]
    assert rows == ["orders orders.created 3 ORDERS none: only stored",
                    "billing orders.created 2 — Source 'billing': No stream stores subject orders.created: "
                    "a republish would be refused."]
