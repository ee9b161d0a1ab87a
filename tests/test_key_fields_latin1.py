"""One dead letter whose payload is JSON in LATIN-1 (``"C\\xe9"``, not UTF-8) made, on SQLite, every
list holding it a 503 "The database is not reachable" for everyone: the list and the API, a key
field's filter, the search, the exports, a group's page, and the command line's ``entries list``
a traceback ("Could not decode to UTF-8 column 'f0'"). json_extract answered the payload's bytes
as they are, and entry_fields stored them: text no read of it could decode. A key field's value is
now its bytes read as UTF-8, or as LATIN-1 where they are not (as PostgreSQL reads them): "Cé"
on both databases, stored, shown and filtered by alike (SPEC section 4: such a payload is still
stored and shown)."""

from __future__ import annotations

import csv
import io
import json
from urllib.parse import quote

import pytest
from sqlalchemy import select

from dlq_dashboard.db.models import Entry, EntryField, KeyFieldState
from dlq_dashboard.ingest.key_fields import record_key_fields
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases

FIELDS = (("Customer", "/customer/id"), ("order_id", "/order_id"))
LATIN1 = b'{"order_id":"lat79","customer":{"id":"C\xe9"}}'
PLAIN = [b'{"order_id":"o-1","customer":{"id":"C-1"}}', '{"order_id":"o-2","customer":{"id":"Zoë"}}'.encode()]


def _ids(answer) -> list[int]:
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    return [e["id"] for e in answer.get_json()["entries"]]


def test_a_latin1_payload_is_shown_and_found_by_its_key_fields_and_takes_no_list_down(
        make_app, nats_server, database_url):
    app = make_app(online=True, list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)  # stored at ingest, not by the backfill
    plain1, latin, plain2 = support.dead_letter_orders(app, nats_server.url, [PLAIN[0], LATIN1, PLAIN[1]])
    client = support.logged_in(app, "operator")

    listed = client.get("/api/entries?limit=200")
    assert _ids(listed) == [plain2, latin, plain1]
    shown = {e["id"]: e.get("fields") for e in listed.get_json()["entries"]}
    assert shown[latin] == {"Customer": "Cé", "order_id": "lat79"}
    assert shown[plain2] == {"Customer": "Zoë", "order_id": "o-2"}
    page = client.get("/?limit=200")
    assert page.status_code == 200, page.get_data(as_text=True)[:300]
    assert "Cé" in page.get_data(as_text=True) and "lat79" in page.get_data(as_text=True)

    # What is shown is what a filter finds; the value is stored as such (valid text).
    assert _ids(client.get("/api/entries?field.order_id=lat79&status=any")) == [latin]
    assert _ids(client.get(f"/api/entries?field.Customer={quote('Cé')}")) == [latin]
    assert _ids(client.get(f"/api/entries?field.Customer={quote('Zoë')}")) == [plain2]
    assert _ids(client.get("/api/entries?q=lat79")) == [latin]
    kf, ef = KeyFieldState.__table__, EntryField.__table__
    with rt.engine.connect() as conn:
        values = conn.execute(select(ef.c.value).join(kf, kf.c.id == ef.c.field_id)
                              .where(ef.c.entry_id == latin, kf.c.label == "Customer")).scalars().all()
        group_id = conn.execute(select(Entry.group_id).where(Entry.id == latin)).scalar_one()
    assert values == ["Cé"]  # valid text: UTF-8 on SQLite, as PostgreSQL stores it
    summary = client.get(f"/api/summary?field.Customer={quote('Cé')}")
    assert summary.status_code == 200 and summary.get_json()["total"] == 1, summary.get_data(as_text=True)[:300]
    assert client.get("/summary?limit=200").status_code == 200

    for path in ("/api/export.ndjson", "/api/export.json", "/api/export.csv"):
        exported = client.get(path)
        assert exported.status_code == 200, (path, exported.get_data(as_text=True)[:300])
        text = exported.get_data(as_text=True)
        rows = (json.loads(text) if path.endswith(".json") else
                [json.loads(line) for line in text.splitlines()] if path.endswith(".ndjson") else
                list(csv.DictReader(io.StringIO(text))))
        assert sorted(int(r["id"]) for r in rows) == sorted([plain1, latin, plain2]), path
    assert client.get(f"/groups/{group_id}").status_code == 200
    assert client.get(f"/api/groups/{group_id}").status_code == 200
    assert client.get("/api/groups").status_code == 200
    assert client.get(f"/entries/{latin}").status_code == 200

    runner = app.test_cli_runner()
    table = runner.invoke(args=["entries", "list"])
    assert table.exit_code == 0, table.output
    assert f"{latin}   open" in table.output
    as_json = runner.invoke(args=["entries", "list", "--json", "--field", "Customer=Cé"])
    assert as_json.exit_code == 0, as_json.output
    [entry] = json.loads(as_json.output)["entries"]
    assert entry["id"] == latin and entry["fields"]["Customer"] == "Cé"


def test_a_stored_value_that_cannot_be_read_is_not_told_as_the_database_being_away(make_app, caplog):
    """A value SQLite holds as text that is not UTF-8 is an error about that value: the request is
    a 500 that says so (and the log names it), not a 503 "The database is not reachable". (SQLite
    alone: PostgreSQL stores no such text.)"""
    app = make_app()
    rt = runtime_of(app)
    entry_id = support.dead_letter(app, 1, payload=b"{}", Dlq_Reason="fatal")
    with rt.engine.begin() as conn:  # what no path of the dashboard writes: a defect's stand-in
        conn.exec_driver_sql(f"UPDATE entries SET error = CAST(X'43E9' AS TEXT) WHERE id = {entry_id}")
    client = support.logged_in(app, "operator")
    answer = client.get("/api/entries")
    assert answer.status_code == 500, answer.get_data(as_text=True)[:300]
    from dlq_dashboard.db.liveness import UNREADABLE

    assert answer.get_json() == {"error": UNREADABLE}
    page = client.get("/")
    assert page.status_code == 500 and "could not be read" in page.get_data(as_text=True)
    assert "a stored value could not be read: Could not decode to UTF-8" in caplog.text


def test_upgrading_fills_again_the_values_sqlite_stored_as_text_that_is_not_utf8(make_app):
    """Revision 0034: the values an older release stored as the payload's bytes (``C\\xe9``) are
    filled again, so the filter by what the list shows (``Cé``) finds the entry."""
    from dlq_dashboard.db.migrate import migrate

    app = make_app(list_fields=FIELDS)
    rt = runtime_of(app)
    record_key_fields(rt.engine, FIELDS)
    plain = support.dead_letter(app, 1, payload=PLAIN[1])
    latin = support.dead_letter(app, 2, payload=LATIN1)
    with rt.engine.begin() as conn:  # as the release before stored it, at revision 0033
        conn.exec_driver_sql(f"UPDATE entry_fields SET value = CAST(X'43E9' AS TEXT) WHERE entry_id = {latin} "
                             "AND value = 'Cé'")
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0033'")
    client = support.logged_in(app, "operator")
    assert _ids(client.get(f"/api/entries?field.Customer={quote('Cé')}")) == []
    assert migrate(rt.engine) == "0034"
    kf, ef = KeyFieldState.__table__, EntryField.__table__
    with rt.engine.connect() as conn:
        values = set(conn.execute(select(kf.c.label, ef.c.value, ef.c.entry_id).join(kf, kf.c.id == ef.c.field_id)))
    assert values == {("Customer", "Zoë", plain), ("order_id", "o-2", plain),
                      ("Customer", "Cé", latin), ("order_id", "lat79", latin)}
    assert _ids(client.get(f"/api/entries?field.Customer={quote('Cé')}")) == [latin]
