"""A scope of a renamed source (DLQ_CONFIG's renamed_from) covers the entries that still carry the
source's old name, as acting on them goes through that source (sources.acting_source); and a
scoped reader learns from the source filter nothing of a name outside their scopes."""

from __future__ import annotations

import json

import pytest

from dlq_dashboard.config import load_settings
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import Grant, parse_scopes
from dlq_dashboard.times import utcnow

from . import support


@pytest.fixture
def renamed_app(tmp_path, make_app, database_url):
    """An app of sources two (renamed from one) and other, with an entry of one (stored before the
    rename), of two and of other on orders.created, and one of gone (a source removed)."""
    path = support.sources_file(tmp_path, [
        {"name": "two", "nats_url": "nats://127.0.0.1:1", "stream": "DLQ", "renamed_from": ["one"]},
        {"name": "other", "nats_url": "nats://127.0.0.1:1", "stream": "DLQ_OTHER"}])
    app = make_app(sources=load_settings({"DLQ_CONFIG": path}).sources)
    engine = runtime_of(app).engine
    headers = support.dlq_headers("orders.created", Dlq_Reason="fatal", Dlq_Error="handler failed")
    ids = {}
    for source in ("one", "two", "other", "gone"):
        ingest_dlq_batch(engine, "DLQ", source, [StreamMessage(1, "dlq.orders.created", dict(headers), b"{}",
                                                               utcnow())], source=source)
        ids[source] = support.wait_for(lambda: [e["id"] for e in support.logged_in(app, "admin").get(
            f"/api/entries?source={source}").get_json()["entries"]], message=f"the entry of {source}")[0]
    return app, ids


@pytest.mark.both_databases
def test_a_reader_scoped_to_a_renamed_source_reads_the_entries_of_its_old_name(renamed_app, database_url):
    app, ids = renamed_app
    client = support.signed_in_with(app, (Grant("operator", parse_scopes(["two:orders.>"])),))
    listed = client.get("/api/entries").get_json()["entries"]
    assert sorted(e["id"] for e in listed) == sorted([ids["one"], ids["two"]])
    assert [e["id"] for e in client.get("/api/entries?source=one").get_json()["entries"]] == [ids["one"]]
    assert client.get(f"/api/entries/{ids['one']}").status_code == 200
    assert client.get(f"/entries/{ids['one']}").status_code == 200
    assert client.get(f"/api/entries/{ids['other']}").status_code == 404
    exported = client.get("/api/export.json").get_json()
    assert sorted(e["id"] for e in exported) == sorted([ids["one"], ids["two"]])
    groups = client.get("/api/groups").get_json()["groups"]
    assert sorted(g["source"] for g in groups) == ["one", "two"]
    assert client.get(f"/api/groups/{groups[0]['id']}").status_code == 200
    assert client.get("/api/summary").get_json()["total"] == 2
    # The command line's --scope reads alike.
    runner = app.test_cli_runner()
    shown = runner.invoke(args=["entries", "list", "--as", "viewer", "--scope", "two:orders.>", "--json"])
    assert shown.exit_code == 0, shown.output
    assert sorted(e["id"] for e in json.loads(shown.output)["entries"]) == sorted([ids["one"], ids["two"]])
    # It acts on them as on the source's own.
    republish = client.get(f"/api/entries/{ids['one']}/targets")
    assert republish.status_code != 403, republish.get_json()


@pytest.mark.both_databases
def test_the_source_filter_tells_a_scoped_reader_nothing_of_a_name_outside_their_scopes(renamed_app, database_url):
    app, _ = renamed_app
    elsewhere = support.signed_in_with(app, (Grant("viewer", parse_scopes(["other:orders.>"])),))
    unknown = elsewhere.get("/api/entries?source=nope")
    assert unknown.status_code == 400
    for name in ("one", "gone"):  # entries carry them, none inside this reader's scopes
        answer = elsewhere.get(f"/api/entries?source={name}")
        assert (answer.status_code, answer.get_json()) == (400, {
            **unknown.get_json(), "error": unknown.get_json()["error"].replace("'nope'", repr(name))})
    # An unscoped reader still finds them by their names.
    viewer = support.logged_in(app, "viewer")
    assert viewer.get("/api/entries?source=gone").status_code == 200
