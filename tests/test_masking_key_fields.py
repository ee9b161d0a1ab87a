"""A key field's filter (DLQ_LIST_FIELDS, ``field.<label>``) tells a viewer nothing of a payload
DLQ_MASK hides whole: one giving a key twice, one that is not UTF-8, gzip bytes. Its key fields
read "•••" to them, so a filter by a value finds it no more than it would by any other value;
operators still find it by its values."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from sqlalchemy import select

from dlq_dashboard.access import visible
from dlq_dashboard.access.reader import Reader
from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
from dlq_dashboard.db.migrate import head, migrate
from dlq_dashboard.db.models import Entry
from dlq_dashboard.entries.fields import key_fields
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.entries.store import Store
from dlq_dashboard.ingest.key_fields import record_key_fields
from dlq_dashboard.masking import Mask
from dlq_dashboard.runtime import runtime_of

from . import support

MASK = ("/customer/email",)
FIELDS = (("order_id", "/order_id"),)
PAYLOADS = {
    "dup-1": b'{"order_id": "dup-1", "customer": {"email": "x@y"}, "customer": null}',
    "latin-1": b'{"order_id": "latin-1", "customer": {"email": "caf\xe9@y"}}',  # not UTF-8
    "zip-1": gzip.compress(b'{"order_id": "zip-1", "customer": {"email": "x@y"}}'),
}
SHOWN = b'{"order_id": "ok-1", "customer": {"email": "x@y"}}'
_TOKEN = re.compile(r"[\w-]{20,}\.[\w-]{4,}\.[\w-]{20,}")


def _answers(client, value: str) -> dict:
    """What each reading of a viewer's says to a filter by ``value`` (the value itself taken out)."""
    query = f"field.order_id={value}"
    answers = {
        "list": [e["id"] for e in client.get(f"/api/entries?{query}").get_json()["entries"]],
        "export": [e["id"] for e in client.get(f"/api/export.json?{query}").get_json()],
        "ndjson": client.get(f"/api/export.ndjson?{query}").get_data(as_text=True),
        "summary": client.get(f"/api/summary?{query}").get_json()["total"],
        "groups": [(g["id"], g["count"]) for g in client.get(f"/api/groups?{query}").get_json()["groups"]],
    }
    for page in ("/", "/summary", "/groups"):
        # The value taken out, and the session's CSRF token (signed with the second it is made).
        answers[page] = _TOKEN.sub("TOKEN", client.get(f"{page}?{query}").get_data(as_text=True).replace(value, "VALUE"))
    return answers


@pytest.mark.both_databases
@pytest.mark.parametrize("recorded", [True, False], ids=["stored", "read-from-payloads"])
def test_a_viewers_key_field_filter_finds_no_payload_the_mask_hides_whole(make_app, database_url, recorded):
    app = make_app(mask=MASK, list_fields=FIELDS)
    engine = runtime_of(app).engine
    if recorded:  # the values stored at ingest (else every filter reads the payloads)
        record_key_fields(engine, FIELDS)
    ids = {value: support.dead_letter(app, seq, payload=payload)
           for seq, (value, payload) in enumerate([*PAYLOADS.items(), ("ok-1", SHOWN)], start=1)}
    viewer, operator = support.logged_in(app, "viewer"), support.logged_in(app, "operator")
    nothing = _answers(viewer, "no-such-order")
    assert nothing["list"] == [] and nothing["summary"] == 0
    for value in PAYLOADS:
        assert _answers(viewer, value) == nothing, value
        shown = viewer.get(f"/api/entries/{ids[value]}").get_json()
        assert shown["payload_available"] is False and shown["notes"][-1].startswith("The payload is hidden")
    # What the viewer sees a value of, they find by it; an operator finds every entry by its value.
    assert _answers(viewer, "ok-1")["list"] == [ids["ok-1"]]
    for value in ("dup-1", "latin-1", "ok-1"):
        assert [e["id"] for e in operator.get(f"/api/entries?field.order_id={value}").get_json()["entries"]] == [
            ids[value]], value
    # The command line read as a viewer alike.
    runner = app.test_cli_runner()
    for value in PAYLOADS:
        shown = runner.invoke(args=["entries", "list", "--as", "viewer", "--field", f"order_id={value}", "--json"])
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.output)["entries"] == []


@pytest.mark.fresh_database
@pytest.mark.both_databases
def test_the_upgrade_to_revision_0032_marks_the_payloads_stored_before_it(database_url, monkeypatch):
    engine = create_db_engine(database_url)
    try:
        assert migrate(engine, "0031") == "0031"
        # Stored as the code before revision 0032 stored them: without entries.payload_opaque.
        with monkeypatch.context() as patch:
            patch.setattr(Mask, "hides_whole", staticmethod(lambda payload: False))
            ids = {value: support.dead_letter(engine, seq, payload=payload)
                   for seq, (value, payload) in enumerate([*PAYLOADS.items(), ("ok-1", SHOWN), ("none", b"")],
                                                          start=1)}
        assert migrate(engine) == head()
        with engine.connect() as conn:
            marked = dict(conn.execute(select(Entry.id, Entry.payload_opaque)).all())
        assert {value: marked[entry_id] for value, entry_id in ids.items()} == {
            "dup-1": True, "latin-1": True, "zip-1": True, "ok-1": False, "none": False}
        viewer, operator = (Reader.of(role, Mask.parse(MASK)) for role in ("viewer", "operator"))
        field = key_fields(FIELDS)[0]
        for value in ("dup-1", "latin-1", "ok-1"):
            flt = EntryFilter(field_values=((field, value),))
            assert [e.id for e in visible.page(operator, Store(engine), flt).entries] == [ids[value]]
            assert [e.id for e in visible.page(viewer, Store(engine), flt).entries] == (
                [ids[value]] if value == "ok-1" else [])
    finally:
        dispose_quietly(engine)


@pytest.mark.both_databases
def test_an_advisorys_entry_is_marked_by_its_payload_and_again_by_its_dlq_copys(make_app, database_url):
    from dlq_dashboard.ingest.parse import Advisory
    from dlq_dashboard.ingest.writes import FetchedMessage, StreamMessage, ingest_advisory_batch, ingest_dlq_batch
    from dlq_dashboard.times import utcnow

    engine = runtime_of(make_app(mask=MASK, list_fields=FIELDS)).engine
    now = utcnow()

    def terminated(seq: int, payload: bytes) -> tuple:
        advisory = Advisory("terminated", f"adv-{seq}", now, "PAY", "payer", seq, 1, "bad", {})
        return advisory, FetchedMessage("pay.captured", None, payload), None

    def copy(seq: int, payload: bytes) -> StreamMessage:
        return StreamMessage(seq, "dlq.pay.captured", support.dlq_headers(
            "pay.captured", Dlq_Original_Stream="PAY", Dlq_Original_Seq=str(seq), Dlq_Consumer="payer",
            Dlq_Reason="fatal", Dlq_Error="failed"), payload, now)

    def marks() -> list[bool]:
        with engine.connect() as conn:
            return conn.execute(select(Entry.payload_opaque).order_by(Entry.id)).scalars().all()

    ingest_advisory_batch(engine, "DLQ_ADVISORIES", "e1", [terminated(1, PAYLOADS["dup-1"]), terminated(2, SHOWN)], 2)
    assert marks() == [True, False]
    ingest_dlq_batch(engine, "DLQ", "e1", [copy(1, SHOWN), copy(2, PAYLOADS["latin-1"])])
    assert marks() == [False, True]  # merged: the copy's payload, and its mark
