"""Bulk jobs: a fixed set, exactly once, paced by the rate limit, cancellable, resumable."""

from __future__ import annotations

import re
import threading
import time

import pytest
from sqlalchemy import func, select

from dlq_dashboard.actions import publishing
from dlq_dashboard.actions.bulk import jobs, listing, pacing, publisher, work
from dlq_dashboard.actions.bulk.runner import JobRunner
from dlq_dashboard.actions.close import close_entry, reopen_entry
from dlq_dashboard.db.models import Action, Entry, Republish

from . import support

pytestmark = pytest.mark.both_databases

RATE = 2000
PAYLOAD = b'{"order_id": "o-%d", "customer_id": "c-1"}'


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """Settings with a bulk rate of 2,000 republishes a second."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, republish_rate=RATE,
                                 request_timeout=2.0,
                         schemas_dir=support.orders_schema_folder(tmp_path))


def payloads(n: int, start: int = 0) -> list[bytes]:
    return [PAYLOAD % i for i in range(start, start + n)]


def job_done(client, job_id, token):
    status = client.get(f"/api/jobs/{job_id}?limit=0", headers=support.bearer(token)).get_json()
    return status if status["state"] in ("done", "cancelled") else None


def count(rt, model, *conds):
    with rt.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(model).where(*conds)).scalar()


@pytest.mark.slow
def test_a_bulk_job_over_2000_entries_publishes_exactly_2000_messages_at_the_rate_limit(
        app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, payloads(2000))
    client = app.test_client()
    started = time.monotonic()
    response = client.post("/api/bulk", json={"action": "republish", "filter": {"subject": "orders.created"}},
                           headers=support.bearer(tokens["operator"]))
    assert response.status_code == 202
    job_id = response.get_json()["job"]
    # Entries that arrive while the job runs are not swept in.
    late = support.dead_letter_orders(app, nats_server.url, payloads(5, start=5000))

    status = support.wait_for(lambda: job_done(client, job_id, tokens["viewer"]), timeout=30, message="the job to finish")
    elapsed = time.monotonic() - started
    burst = pacing.window_size(RATE)
    assert elapsed >= (2000 - burst) / RATE  # the limiter's guarantee: no faster than the rate allows
    assert (status["state"], status["total"], status["done"], status["failed"]) == ("done", 2000, 2000, 0)
    published = support.stream_messages(nats_server.url)
    assert len(published) == 2000
    assert len({m.headers["Nats-Msg-Id"] for m in published}) == 2000
    assert count(rt, Entry, Entry.id.in_(ids), Entry.status == "republished") == 2000
    assert count(rt, Entry, Entry.id.in_(late), Entry.status == "open") == 5
    assert count(rt, Action, Action.job_id == job_id, Action.action == "republish") == 2000


def test_cancelling_a_job_stops_it_cleanly(app, rt, nats_server, tokens, auth, monkeypatch):
    support.make_orders_stream(nats_server.url)
    support.dead_letter_orders(app, nats_server.url, payloads(2000))
    client = auth.client("operator")
    # The job holds after its 200th answer until the cancel is asked, however fast the machine is.
    published, held = [], threading.Event()

    def hold(stage, intent):
        if stage == "after_publish":
            published.append(intent.msg_id)
            if len(published) > 200:
                held.wait(30)
    monkeypatch.setattr(publishing, "fault_point", hold)
    job_id = jobs.create_job(rt, "republish", actor="alice", filter_args={"subject": "orders.created"})
    support.wait_for(lambda: len(published) > 200, message="the job to make progress")

    token = support.csrf_token(client, f"/jobs/{job_id}")
    assert client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": token}).status_code == 303
    held.set()
    status = support.wait_for(lambda: job_done(client, job_id, tokens["viewer"]), message="the job to stop")
    assert status["state"] == "cancelled"
    assert status["done"] + status["cancelled"] == 2000 and status["cancelled"] > 0 and status["pending"] == 0
    assert len(support.stream_messages(nats_server.url)) == status["done"]
    assert count(rt, Republish, Republish.state == "pending") == 0
    assert count(rt, Action, Action.job_id == job_id, Action.action == "cancel_job") == 1


def test_a_crash_mid_job_resumes_without_publishing_anything_twice(app, rt, nats_server, monkeypatch):
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, payloads(600))
    windows = []

    def crash_on_the_third_window(where, intent):
        if where == "after_publish" and intent.entry_id not in windows:
            windows.append(intent.entry_id)
            if len(windows) == 2 * pacing.window_size(RATE) + 1:
                raise RuntimeError("simulated crash after the publish, before the commit")

    monkeypatch.setattr(publishing, "fault_point", crash_on_the_third_window)
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=ids)
    rt.jobs.join(job_id, timeout=30)
    assert jobs.job_status(rt, job_id, limit=0)["state"] == "running"
    assert count(rt, Republish, Republish.state == "pending") >= pacing.window_size(RATE)

    # A restart: a new runner recovers the pending intents, then resumes the job.
    monkeypatch.setattr(publishing, "fault_point", lambda where, intent: None)
    rt.jobs.stop()
    rt.jobs = JobRunner(rt).start()
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s,
                      timeout=30, message="the resumed job to finish")
    assert status["done"] == 600
    published = support.stream_messages(nats_server.url)
    assert len(published) == 600
    assert len({m.headers["Nats-Msg-Id"] for m in published}) == 600
    assert count(rt, Action, Action.action == "republish") == 600


def test_a_big_job_publishes_from_a_process_of_its_own_exactly_once(app, rt, nats_server, monkeypatch):
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, payloads(2000))
    monkeypatch.setattr(work, "OWN_PUBLISHER_FROM", 1)
    sent = []
    original = publisher.Publisher.publish
    monkeypatch.setattr(publisher.Publisher, "publish", lambda self, messages: sent.append(len(messages))
                        or original(self, messages))
    support.publish_once_connected(monkeypatch)  # every window then is the process's
    job_id = jobs.create_job(rt, "republish", actor="alice", filter_args={"subject": "orders.created"})
    rt.jobs.join(job_id, timeout=90)
    status = jobs.job_status(rt, job_id, limit=5)
    assert (status["state"], status["done"], status["failed"]) == ("done", 2000, 0)
    assert sum(sent) == 2000  # every message from the process of its own
    assert all(i["result"].startswith("Published to ORDERS seq ") for i in status["items"])
    published = support.stream_messages(nats_server.url)
    assert len(published) == 2000 and len({m.headers["Nats-Msg-Id"] for m in published}) == 2000
    assert count(rt, Entry, Entry.id.in_(ids), Entry.status == "republished", Entry.version == 2) == 2000
    assert count(rt, Action, Action.job_id == job_id, Action.action == "republish") == 2000
    assert count(rt, Republish, Republish.state == "published", Republish.seq.isnot(None)) == 2000


@pytest.mark.slow
def test_a_publishing_process_that_dies_mid_job_publishes_nothing_twice(app, rt, nats_server, monkeypatch):
    support.make_orders_stream(nats_server.url)
    support.dead_letter_orders(app, nats_server.url, payloads(2000))
    monkeypatch.setattr(work, "OWN_PUBLISHER_FROM", 1)
    original, sent = publisher.Publisher.publish, []

    def publish_then_die(self, messages):
        future = original(self, messages)
        sent.append(len(messages))
        if len(sent) == 2:  # killed with two windows sent: their answers never come
            self._proc.kill()
        return future

    monkeypatch.setattr(publisher.Publisher, "publish", publish_then_die)
    support.publish_once_connected(monkeypatch)
    job_id = jobs.create_job(rt, "republish", actor="alice", filter_args={"subject": "orders.created"})
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id, limit=0))["state"] == "done" and s,
                              timeout=60, message="the job to finish through the bridge")
    assert (status["done"], status["failed"]) == (2000, 0)
    assert len(sent) == 2
    published = support.stream_messages(nats_server.url)
    assert len(published) == 2000 and len({m.headers["Nats-Msg-Id"] for m in published}) == 2000
    assert count(rt, Republish, Republish.state == "pending") == 0
    assert count(rt, Action, Action.job_id == job_id, Action.action == "republish") == 2000


def test_a_bulk_close_by_selection_closes_those_entries_with_the_note(app, rt, nats_server, tokens):
    ids = support.dead_letter_orders(app, nats_server.url, payloads(30))
    client = app.test_client()
    chosen = [{"id": i, "version": 1} for i in ids[:10]]
    job_id = client.post("/api/bulk", json={"action": "close", "ids": chosen, "note": "known outage"},
                         headers=support.bearer(tokens["operator"])).get_json()["job"]
    status = support.wait_for(lambda: job_done(client, job_id, tokens["viewer"]))
    assert (status["state"], status["done"]) == ("done", 10)
    for entry_id in ids[:10]:
        entry = rt.store.get_entry(entry_id)
        assert (entry.status, entry.close_note, entry.closed_by) == ("closed", "known outage", "token:test-operator")
    assert count(rt, Entry, Entry.status == "open") == 20
    assert count(rt, Action, Action.job_id == job_id, Action.action == "close") == 10


def test_entries_changed_since_the_job_was_made_are_skipped_with_the_reason(app, rt, nats_server):
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, payloads(5))
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=ids, start=False)
    close_entry(rt, ids[0], 1, actor="bob", note="not this one")
    rt.jobs.submit(job_id)
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id))["state"] == "done" and s)
    assert (status["done"], status["skipped"]) == (4, 1)
    [skipped] = [i for i in status["items"] if i["state"] == "skipped"]
    assert skipped["entry_id"] == ids[0] and "changed since you saw it" in skipped["result"]
    assert len(support.stream_messages(nats_server.url)) == 4


def test_a_bulk_republish_fails_a_compressed_payload_with_the_reason_and_sends_the_rest(app, rt, nats_server, auth):
    import gzip

    support.make_orders_stream(nats_server.url)
    plain = support.dead_letter_orders(app, nats_server.url, payloads(2))
    by_header = support.dead_letter_orders(app, nats_server.url, [PAYLOAD % 7], headers={"Content-Encoding": "gzip"})
    by_bytes = support.dead_letter_orders(app, nats_server.url, [gzip.compress(PAYLOAD % 8)])
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=plain + by_header + by_bytes, force=True)
    status = support.wait_for(lambda: (s := jobs.job_status(rt, job_id))["state"] == "done" and s)
    assert (status["done"], status["failed"]) == (2, 2)
    failed = {i["entry_id"]: i["result"] for i in status["items"] if i["state"] == "failed"}
    assert set(failed) == set(by_header + by_bytes)
    assert "compressed (Content-Encoding: gzip)" in failed[by_header[0]]
    assert "compressed (gzip bytes)" in failed[by_bytes[0]]
    assert sorted(m.data for m in support.stream_messages(nats_server.url)) == sorted(payloads(2))
    assert {rt.store.get_entry(i).status for i in by_header + by_bytes} == {"open"}
    # Its page counts the items of each state beside the state's link, and marks the one shown.
    viewer = auth.client("viewer")
    states = re.findall(r'<a href="[^"]*"( aria-current="true")?>(\w+ \(\d+\))</a>',
                        viewer.get(f"/jobs/{job_id}?state=failed").get_data(as_text=True).split('class="presets item-states"')[1])
    assert states == [("", "all (4)"), ("", "done (2)"), (' aria-current="true"', "failed (2)")]


def test_a_jobs_page_and_json_sum_its_failed_and_skipped_items_by_reason(app, rt, nats_server, auth):
    """After a job of thousands, "25 failed" needs its why without reading every item: the
    results by reason, most common first, on the page and in GET /api/jobs/<id>."""
    import gzip

    support.make_orders_stream(nats_server.url)
    plain = support.dead_letter_orders(app, nats_server.url, payloads(2))
    by_header = support.dead_letter_orders(app, nats_server.url, payloads(3, start=10),
                                           headers={"Content-Encoding": "gzip"})
    by_bytes = support.dead_letter_orders(app, nats_server.url, [gzip.compress(PAYLOAD % 8)])
    changed = support.dead_letter_orders(app, nats_server.url, payloads(2, start=20))
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=plain + by_header + by_bytes + changed,
                             force=True, start=False)
    for entry_id in changed:
        close_entry(rt, entry_id, 1, actor="bob", note="not this one")
    rt.jobs.submit(job_id)
    support.wait_for(lambda: jobs.job_status(rt, job_id, limit=0)["state"] == "done", message="the job to finish")
    viewer = auth.client("viewer")
    status = viewer.get(f"/api/jobs/{job_id}?limit=0").get_json()
    assert (status["done"], status["failed"], status["skipped"]) == (2, 4, 2)
    reasons = status["failure_reasons"]
    assert [r["count"] for r in reasons] == [3, 2, 1], reasons
    assert "compressed (Content-Encoding: gzip)" in reasons[0]["reason"]
    assert "changed since you saw it" in reasons[1]["reason"]
    assert "compressed (gzip bytes)" in reasons[2]["reason"]
    page = viewer.get(f"/jobs/{job_id}").get_data(as_text=True)
    shown = page.split('class="job-reasons"')[1].split("</div>")[0]
    assert "Why items failed or were skipped" in shown
    assert re.findall(r"<li>(\d+): ", shown) == ["3", "2", "1"]


def test_a_jobs_failed_and_skipped_items_are_listed_from_its_page_and_acted_on_as_a_selection(
        app, rt, nats_server, auth):
    """After "25 failed", the next step: the job's page links the list of those entries (the
    ``job`` filter), where they are selected and acted on like any others."""
    import gzip

    support.make_orders_stream(nats_server.url)
    plain = support.dead_letter_orders(app, nats_server.url, payloads(2))
    by_bytes = support.dead_letter_orders(app, nats_server.url, [gzip.compress(PAYLOAD % 8)])
    changed = support.dead_letter_orders(app, nats_server.url, payloads(1, start=20))
    job_id = jobs.create_job(rt, "republish", actor="alice", ids=plain + by_bytes + changed, start=False)
    close_entry(rt, changed[0], 1, actor="bob", note="not this one")
    rt.jobs.submit(job_id)
    support.wait_for(lambda: jobs.job_status(rt, job_id, limit=0)["state"] == "done", message="the job to finish")
    operator = support.logged_in(app, "operator")
    page = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    links = re.findall(r'<a href="([^"]+)">the (\d+) (failed|skipped)</a>', page.split('class="job-next"')[1])
    assert links == [(f"/?job={job_id}:failed", "1", "failed"), (f"/?job={job_id}:skipped", "1", "skipped")]
    listed = operator.get(links[0][0]).get_data(as_text=True)
    assert re.findall(r'<tr hx-disable data-id="(\d+)"', listed) == [str(i) for i in by_bytes]
    assert f'name="job" value="{job_id}:failed"' in listed
    answer = operator.get(f"/api/entries?job={job_id}&status=").get_json()
    assert sorted(e["id"] for e in answer["entries"]) == sorted(plain + by_bytes + changed)
    skipped = operator.get(f"/api/entries?job={job_id}:skipped").get_json()["entries"]
    assert [e["id"] for e in skipped] == changed
    # The list's selection by filter is the job's failures: a close job of exactly those.
    form = {"csrf_token": support.csrf_token(operator), "by": "filter", "action": "close", "job": f"{job_id}:failed"}
    preview = operator.post("/bulk/preview", data=form).get_data(as_text=True)
    assert "<strong>1</strong> entry will be closed" in preview
    again = jobs.create_job(rt, "close", actor="carol", filter_args={"job": f"{job_id}:failed"}, start=False)
    assert [i["entry_id"] for i in jobs.job_status(rt, again)["items"]] == by_bytes
    assert f"the failed items of job {job_id}" in operator.get(f"/jobs/{again}").get_data(as_text=True)
    # A job that is not there is a 400 that says so, not an empty list.
    missing = operator.get("/?job=999999:failed")
    assert missing.status_code == 400 and "job 999999 is not a bulk job" in missing.get_data(as_text=True)
    assert operator.get("/api/entries?job=999999").status_code == 400


def test_failure_reasons_are_one_where_their_texts_differ_only_in_their_values():
    texts = [{"reason": "'CUST-1' does not match '^C-'", "count": 2, "entry_id": 1},
             {"reason": "The entry no longer exists.", "count": 2, "entry_id": 3},
             {"reason": "'CUST-2' does not match '^C-'", "count": 1, "entry_id": 2},
             {"reason": "timeout after 3 s", "count": 1, "entry_id": 4}]
    assert listing.failure_reasons(texts) == [
        {"reason": "'…' does not match '…'", "count": 3},  # two texts: read as normalized
        {"reason": "The entry no longer exists.", "count": 2},  # one text: as it is
        {"reason": "timeout after 3 s", "count": 1}]
    assert listing.failure_reasons(texts, shown=1) == [{"reason": "'…' does not match '…'", "count": 3}]


def test_a_reason_told_in_more_texts_than_are_kept_is_counted_whole(app, rt, nats_server, monkeypatch):
    """Each "Entry N changed since you saw it" is a text of its own: beyond the distinct texts
    kept (REASON_TEXTS) the reason was counted short, and the page told the rest as "other
    reasons"."""
    from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
    from dlq_dashboard.times import utcnow

    monkeypatch.setattr(listing, "REASON_TEXTS", 5)
    ingest_dlq_batch(rt.engine, "DLQ", "e1", [StreamMessage(seq, "dlq.orders.created", support.dlq_headers(
        "orders.created"), b"{}", utcnow()) for seq in range(1, 31)])
    with rt.engine.connect() as conn:
        ids = conn.execute(select(Entry.id).order_by(Entry.id)).scalars().all()
    job_id = jobs.create_job(rt, "close", actor="ann", ids=ids, start=False)
    for entry_id in ids[:24]:
        close_entry(rt, entry_id, 1, actor="bob")
    for entry_id in ids[24:]:  # closed and reopened: at version 3
        close_entry(rt, entry_id, 1, actor="bob")
        reopen_entry(rt, entry_id, 2, actor="bob")
    rt.jobs.submit(job_id)
    support.wait_for(lambda: jobs.job_status(rt, job_id, limit=0)["state"] == "done", message="the job to finish")
    status = jobs.job_status(rt, job_id, limit=0)
    assert status["skipped"] == 30 and listing.failure_reasons(status["failure_reasons"]) == [
        {"reason": "Entry <n> changed since you saw it (version <n>, now <n>); nothing was done.", "count": 30}]


def test_by_filter_only_those_that_now_pass_the_current_schema_are_taken(app, rt, nats_server):
    valid = support.dead_letter_orders(app, nats_server.url, payloads(3))
    support.dead_letter_orders(app, nats_server.url, [b'{"order_id": "x"}', b"not json"])
    items, summary = jobs.select_items(rt, filter_args={"subject": "orders.created"}, only_valid=True)
    assert list(items.ids) == valid
    assert (summary["count"], summary["left_out_invalid"]) == (3, 2)


def test_beyond_the_payloads_judged_now_the_job_leaves_out_those_that_fail_as_it_reaches_them(
        app, rt, nats_server, auth, monkeypatch):
    # Every payload was judged in the request, and held in memory at once: a million selected
    # took minutes and about 800 MB before the preview answered.
    monkeypatch.setattr(jobs, "JUDGED_NOW", 3)
    support.make_orders_stream(nats_server.url)
    invalid = [b'{"order_id": "x%d"}' % i for i in range(4)]
    ids = support.dead_letter_orders(app, nats_server.url, [p for pair in zip(payloads(4), invalid) for p in pair])
    valid_ids, invalid_ids = ids[0::2], ids[1::2]
    # The newest three judged now (two fail), the five older ones taken unjudged; by ids alike.
    for selection in ({"filter_args": {"subject": "orders.created"}}, {"ids": ids}):
        items, summary = jobs.select_items(rt, only_valid=True, **selection)
        assert (summary["left_out_invalid"], summary["unjudged"], summary["count"]) == (2, 5, 6), selection
        assert list(items.ids) == ids[:5] + [ids[6]]
    client = auth.client("operator")
    form = {"csrf_token": support.csrf_token(client, "/"), "by": "filter", "action": "republish",
            "subject": "orders.*", "only_valid": "on"}
    page = client.post("/bulk/preview", data=form).get_data(as_text=True)
    assert "Up to <strong>6</strong> entries selected to be republished" in page
    assert "2 left out: they do not pass the current schema" in page
    assert "5 older ones not judged yet: the job leaves out those that do not pass" in page
    # What the job would refuse says they are left out, and no override is offered against the ask.
    assert ("<li>2: Left out: the payload does not pass the current schema orders.json, and only those "
            "that pass were asked for.</li>") in page
    assert "Republish with the override" not in page and "needs the override" not in page

    # The override sent anyway changes nothing: asked for only those that pass, they are left out.
    started = client.post("/bulk", data={**form, "upto": str(ids[-1]), "force": "on"})
    assert started.status_code == 303
    job_id = int(started.headers["Location"].rsplit("/", 1)[1])
    support.wait_for(lambda: jobs.job_status(rt, job_id, limit=0)["state"] == "done", message="the job to finish")
    status = jobs.job_status(rt, job_id, limit=100)
    assert (status["total"], status["done"], status["skipped"], status["failed"]) == (6, 4, 2, 0)
    skipped = {i["entry_id"]: i["result"] for i in status["items"] if i["state"] == "skipped"}
    assert sorted(skipped) == invalid_ids[:2]
    assert all(r.startswith("Left out: the payload does not pass the current schema") for r in skipped.values())
    published = sorted(m.headers["Dlq-Replay-Of"] for m in support.stream_messages(nats_server.url))
    assert len(published) == 4 == len(valid_ids)


def test_the_preview_counts_and_the_job_page_shows_progress(app, rt, nats_server, auth):
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, payloads(4))
    client = auth.client("operator")
    token = support.csrf_token(client, f"/entries/{ids[0]}/edit")
    preview = client.post("/bulk/preview", data={"csrf_token": token, "by": "filter", "action": "republish",
                                                 "subject": "orders.*", "only_valid": "on"})
    page = preview.get_data(as_text=True)
    assert preview.status_code == 200 and "<strong>4</strong> entries will be republished" in page
    assert f'name="upto" value="{ids[-1]}"' in page
    assert ('<td class="name"><code><bdi class="subject-name">orders.created</bdi></code></td><td>4</td>'
            '<td class="name">ORDERS</td>') in page  # where they go
    support.dead_letter_orders(app, nats_server.url, payloads(2, start=100))  # after the preview: not taken

    started = client.post("/bulk", data={"csrf_token": token, "by": "filter", "action": "republish",
                                         "subject": "orders.*", "only_valid": "on", "upto": str(ids[-1])})
    assert started.status_code == 303
    job_url = started.headers["Location"]
    job_id = int(job_url.rsplit("/", 1)[1])
    support.wait_for(lambda: jobs.job_status(rt, job_id, limit=0)["state"] == "done", message="the job to finish")
    fragment = client.get(job_url, headers={"HX-Request": "true"}).get_data(as_text=True)
    assert fragment.lstrip().startswith('<section id="job-progress"') and "hx-trigger" not in fragment
    assert "4 done, 0 failed, 0 skipped" in fragment
    assert len(support.stream_messages(nats_server.url)) == 4


@pytest.mark.parametrize("count, words", [(3, "They are:"), (25, "The first 20 of them, by number:")])
def test_the_preview_names_the_entries_it_takes_beside_their_count(offline_app, auth, count, words):
    # Below the refusals a list of ids read as the refused ones: it stands under the count.
    ids = [support.dead_letter(offline_app, seq, Dlq_Reason="fatal") for seq in range(1, count + 1)]
    client = auth.client("operator")
    preview = client.post("/bulk/preview", data={"csrf_token": support.csrf_token(client, "/"), "by": "filter",
                                                 "action": "close", "reason": "fatal"})
    page = preview.get_data(as_text=True)
    assert preview.status_code == 200, page
    named = page[page.index('<p class="preview-items">'):]
    named = named[:named.index("</p>")]
    assert words in named
    shown = [int(n) for n in re.findall(r'href="/entries/(\d+)"', named)]
    assert shown == sorted(ids)[:20]
    assert page.index(f"<strong>{count}</strong> entries will be closed") < page.index('<p class="preview-items">')


def test_the_token_bucket_never_runs_ahead_of_its_rate():
    import threading

    bucket = pacing.TokenBucket(rate=1000, burst=50)
    stop = threading.Event()
    started = time.monotonic()
    for _ in range(10):
        assert bucket.take(50, stop)
    assert time.monotonic() - started >= (500 - 50) / 1000


def test_a_bulk_selection_made_at_a_stale_version_publishes_nothing_for_that_entry(app, rt, nats_server, tokens):
    support.make_orders_stream(nats_server.url)
    fresh, stale = support.dead_letter_orders(app, nats_server.url, payloads(2))
    client = app.test_client()
    # The list's checkboxes carry "id:version"; the second entry changed after the page was read.
    response = client.post("/api/bulk", json={"action": "republish", "ids": [f"{fresh}:1", f"{stale}:7"]},
                           headers=support.bearer(tokens["operator"]))
    assert response.status_code == 202, response.get_data(as_text=True)
    status = support.wait_for(lambda: job_done(client, response.get_json()["job"], tokens["operator"]), timeout=30)
    assert (status["total"], status["done"], status["skipped"]) == (2, 1, 1)
    assert count(rt, Republish, Republish.entry_id == fresh) == 1
    assert count(rt, Republish, Republish.entry_id == stale) == 0
    assert len(support.stream_messages(nats_server.url, "ORDERS")) == 1
