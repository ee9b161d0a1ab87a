"""The demo against a real nats-server: every kind of dead letter reaches the dashboard, the
fulfilment service upserts one row per order, a corrected republish is stored, and it stops."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import nats
import pytest
from sqlalchemy import select

from dlq_dashboard import create_app
from dlq_dashboard.accounts import verify_password
from dlq_dashboard.actions.republish import republish_entry
from dlq_dashboard.db.models import Action
from dlq_dashboard.demo import CONSUMER, Demo, DEMO_SCHEMAS, STREAM, demo_settings, ensure_demo_operator
from dlq_dashboard.demo.orders import OUTAGE_CUSTOMER, read_orders
from dlq_dashboard.nats.server import NatsServer
from dlq_dashboard.entries.schemas import SchemaRegistry
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.timeout(60)

OUTAGE_SECONDS = 8.0


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """One dashboard (bridge and mirror) with the demo's opening burst, shared by this module."""
    tmp_path = tmp_path_factory.mktemp("demo")
    server = NatsServer(store_dir=tmp_path / "nats", log_path=tmp_path / "nats.log").start()
    app = create_app({"SETTINGS": demo_settings(support.make_settings(tmp_path, server.url)), "TESTING": True})
    runtime = runtime_of(app)
    runtime.start()
    assert runtime.bridge.wait_connected(10), "the bridge did not connect"
    demo = Demo(runtime, trickle=None, outage_seconds=OUTAGE_SECONDS, seed=7).start()
    assert demo.ready.wait(10), f"the demo did not start: {demo.error!r}"
    yield runtime, demo, server
    demo.stop()
    runtime.stop()
    server.stop()


def entries(runtime) -> list:
    return runtime.store.list_entries(EntryFilter(limit=500)).entries


def entry_of(runtime, demo, kind: str):
    """The dashboard entry of the first order of ``kind`` the demo sent (None until mirrored)."""
    seqs = {s.seq for s in demo.sent if s.kind == kind}
    found = [e for e in entries(runtime) if e.original_stream == STREAM and e.original_seq in seqs]
    return runtime.store.get_entry(found[0].id) if found else None


def settled_entry_of(runtime, demo, kind: str):
    """The entry once both the dead letter and the TERM advisory are in it (no more changes)."""
    entry = entry_of(runtime, demo, kind)
    return entry if entry and entry.sources == "dlq,advisory" else None


def republish(runtime, entry, payload: bytes | None = None):
    """The dashboard's Republish: original subject, a fresh msgId, Dlq-Replay-Of."""
    return republish_entry(runtime, entry.id, entry.version, actor="test-operator", payload=payload)


def settled(server_url: str) -> bool:
    async def main():
        nc = await nats.connect(server_url)
        try:
            info = await nc.jetstream().consumer_info(STREAM, CONSUMER)
            return info.num_pending == 0 and info.num_ack_pending == 0
        finally:
            await nc.close()

    return support.run(main())


def test_the_demo_fills_the_dashboard_with_every_kind_of_dead_letter(running):
    runtime, demo, _ = running
    kinds = ("price_as_string", "missing_customer", "garbled", "outage", "poison")
    # A dead letter and its TERM advisory may reach the mirror in either order: wait for both.
    def every_kind_settled():
        # One reading for all the kinds: a later order of a kind may arrive between two readings.
        settled_now = {k: settled_entry_of(runtime, demo, k) for k in kinds}
        return settled_now if all(settled_now.values()) else None

    found = support.wait_for(every_kind_settled, timeout=20,
                             message="one entry, dead letter and advisory, for every kind of failure")

    assert found["price_as_string"].reason == "schema_invalid"
    assert [e["path"] for e in found["price_as_string"].schema_errors] == ["/items/0/price"]
    assert found["missing_customer"].reason == "schema_invalid"
    assert "customer_id" in found["missing_customer"].error
    assert found["garbled"].reason == "schema_invalid"
    assert found["garbled"].payload_text is None  # gzip bytes, shown as bytes
    assert found["outage"].reason == "max_deliveries"
    assert found["outage"].deliveries == 4
    assert "CRM shard" in found["outage"].error
    assert found["poison"].reason == "fatal"
    assert found["poison"].error.startswith("OverflowError")
    # The original headers travel with the dead letter.
    assert "traceparent" in found["poison"].headers


def test_naks_of_the_retried_orders_reach_the_entry_history(running):
    runtime, demo, _ = running

    def naks():
        entry = entry_of(runtime, demo, "outage")
        return entry and [h for h in entry.history if h["kind"] == "nak"]

    history = support.wait_for(lambda: naks() and len(naks()) == 3 and naks(), timeout=20,
                       message="three naks in the exhausted order's history")
    assert [h["deliveries"] for h in history] == [1, 2, 3]


def test_the_order_table_holds_one_row_per_order_across_redeliveries_and_resends(running):
    runtime, demo, server = running
    support.wait_for(lambda: settled(server.url), timeout=20, message="every order settled")
    # Rows made by a republish (the tests below) say so; the shop's own orders do not.
    orders = {k: row for k, row in read_orders(demo.db_path).items() if row["replay_of"] is None}

    stored_kinds = {"ok", "flaky", "resent"}
    assert set(orders) == {s.order_id for s in demo.sent if s.kind in stored_kinds}
    # Flaky orders were stored, then delivered again after the inventory timeout: same row.
    assert all(orders[s.order_id]["upserts"] >= 2 for s in demo.sent if s.kind == "flaky")
    [resent] = [s for s in demo.sent if s.kind == "resent"]
    assert orders[resent.order_id]["upserts"] >= 2
    # Nothing that was dead-lettered was stored.
    assert all(s.order_id not in orders for s in demo.sent if s.kind not in stored_kinds)


def test_republishing_a_corrected_schema_invalid_order_stores_it(running):
    runtime, demo, _ = running
    entry = support.wait_for(lambda: settled_entry_of(runtime, demo, "price_as_string"), timeout=20)
    order = json.loads(entry.payload)
    order["items"][0]["price"] = float(order["items"][0]["price"])
    assert runtime.schemas.validate(entry.original_subject, json.dumps(order).encode()).valid

    outcome = republish(runtime, entry, json.dumps(order).encode())

    stored = support.wait_for(lambda: read_orders(demo.db_path).get(order["order_id"]), timeout=10,
                      message="the corrected order in the order table")
    assert outcome.entry.status == "republished"
    assert stored["replay_of"] == entry.dlq_ref
    assert stored["source"] == f"{STREAM}:{outcome.publish.seq}"
    assert stored["customer_id"] == order["customer_id"]


def test_an_invalid_order_republished_with_the_override_comes_back_as_a_linked_entry(running):
    runtime, demo, _ = running
    entry = support.wait_for(lambda: settled_entry_of(runtime, demo, "missing_customer"), timeout=20)

    republish_entry(runtime, entry.id, entry.version, actor="test-operator", force=True)

    # The replay's DLQ copy may come after its terminated advisory made the entry: wait for it.
    again = support.wait_for(lambda: [e for e in runtime.store.replays_of(entry.dlq_ref) if e.dlq_seq], timeout=10,
                     message="the replay's own dead letter")
    assert [e.reason for e in again] == ["schema_invalid"]
    assert again[0].payload == entry.payload


def test_an_exhausted_order_republished_after_the_crm_outage_is_stored(running):
    runtime, demo, _ = running
    entry = support.wait_for(lambda: settled_entry_of(runtime, demo, "outage"), timeout=20)
    support.wait_for(demo.outage_over, timeout=OUTAGE_SECONDS + 5, interval=0.2, message="the end of the outage")

    republish(runtime, entry)

    order_id = json.loads(entry.payload)["order_id"]
    stored = support.wait_for(lambda: read_orders(demo.db_path).get(order_id), timeout=10)
    assert stored["customer_id"] == OUTAGE_CUSTOMER


def test_the_demo_makes_an_operator_login_once_and_stops_cleanly(app, capsys):
    runtime = runtime_of(app)
    before = set(threading.enumerate())  # the module's shared demo may be running too

    def demo_threads():
        return [t.name for t in threading.enumerate() if t not in before and t.name.startswith("dlq-demo")]

    demo = Demo(runtime, trickle=(0.05, 0.1), seed=1).start()
    assert demo_threads()
    assert demo.ready.wait(10), f"the demo did not start: {demo.error!r}"
    support.wait_for(lambda: read_orders(demo.db_path), timeout=10, message="a stored order")
    demo.stop()

    assert demo_threads() == []
    assert demo.error is None
    assert demo.login and demo.login[0] == "demo" and len(demo.login[1]) >= 16
    assert demo.login[1] not in capsys.readouterr().out  # printed by the start, last (cli/main.py)

    again = Demo(runtime, trickle=None, seed=2).start()  # the durable consumer exists now
    assert again.ready.wait(10), f"the demo did not restart: {again.error!r}"
    again.stop()
    assert again.login is None
    assert demo_threads() == []


def test_the_demo_operator_is_created_once_with_the_operator_role(offline_app):
    engine = runtime_of(offline_app).engine
    password = ensure_demo_operator(engine)

    assert password and ensure_demo_operator(engine) is None
    assert verify_password(engine, "demo", password).role == "operator"
    with engine.connect() as conn:  # in the audit, as every change of a user is
        assert conn.execute(select(Action.action, Action.actor)).all() == [("user_create", "dashboard")]


def test_demo_settings_use_the_packaged_schemas_unless_dlq_schemas_is_set(tmp_path):
    settings = demo_settings(support.make_settings(tmp_path))
    registry = SchemaRegistry.load(settings.schemas_dir)

    assert settings.schemas_dir == str(DEMO_SCHEMAS)
    assert registry.problems == [] and registry.for_subject("orders.created").name == "orders.json"
    own = support.make_settings(tmp_path, schemas_dir=str(tmp_path))
    assert demo_settings(own).schemas_dir == str(tmp_path)


def test_the_admin_commands_beside_a_running_demo_read_its_schemas_and_key_fields(tmp_path, monkeypatch):
    """``python app.py --demo`` leaves a mark in its instance folder; the admin commands' app
    (``flask --app app``) then reads the demo's settings, and answers what the pages answer."""
    from dlq_dashboard.cli import main as cli_main
    from dlq_dashboard.demo.service import DEMO_LIST_FIELDS

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'dlq.sqlite3'}")
    for name in ("DLQ_SCHEMAS", "DLQ_LIST_FIELDS", "DLQ_CONFIG"):
        monkeypatch.delenv(name, raising=False)

    def settings():
        app = cli_main.create_app()
        try:
            return runtime_of(app).settings
        finally:
            runtime_of(app).stop()

    plain = settings()
    assert (plain.schemas_dir, plain.list_fields) == (None, ())
    cli_main.mark_demo(plain, True)
    beside = settings()
    assert beside.schemas_dir == str(DEMO_SCHEMAS) and beside.list_fields == DEMO_LIST_FIELDS
    cli_main.mark_demo(plain, False)  # a start without --demo takes the mark away
    assert settings().list_fields == () and not (tmp_path / "instance" / cli_main.DEMO_MARK).exists()


def test_the_demo_mark_is_written_for_its_owner_alone(tmp_path):
    """It was 0644 (the umask's), beside an instance folder whose files are all 0600."""
    from dlq_dashboard.cli import main as cli_main

    settings = support.make_settings(tmp_path)
    mark = Path(settings.instance_path) / cli_main.DEMO_MARK
    before = os.umask(0o022)
    try:
        cli_main.mark_demo(settings, True)
        assert stat.S_IMODE(mark.stat().st_mode) == 0o600
        mark.chmod(0o644)  # left by an earlier version: narrowed as it is written again
        cli_main.mark_demo(settings, True)
        assert stat.S_IMODE(mark.stat().st_mode) == 0o600
    finally:
        os.umask(before)
