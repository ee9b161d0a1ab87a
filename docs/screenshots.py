"""Take the screenshots in README.md and docs/: the list, the detail page, the payload editor, a
bulk patch's preview, the jobs page, and triage (the groups with their states, one group's page).

    python docs/screenshots.py [list] [detail] [editor] [patch-preview] [jobs] [groups] [group]
    (all of them by default)

Fills a temporary database with realistic dead letters (through the mirror's ingest), starts a
nats-server of its own with the shop's ORDERS stream and consumer (so the pages show NATS
connected and where a republish goes), adds a few bulk jobs, serves the app on 127.0.0.1, and
photographs it with Debian's Chromium through Playwright into docs/screenshot-<name>.png.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import tempfile
import threading
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema", "x-subjects": ["orders.*"],
          "type": "object", "required": ["order_id", "customer_id"],
          "properties": {"order_id": {"type": "string"}, "customer_id": {"type": "string"},
                         "items": {"type": "array", "items": {"type": "object", "required": ["sku", "price"],
                                                              "properties": {"sku": {"type": "string"},
                                                                             "price": {"type": "number"}}}}}}


def fill(engine) -> None:
    """Three hours of failures of a small shop, with a history for the photographed entry."""
    from dlq_dashboard.ingest.parse import Advisory
    from dlq_dashboard.ingest.writes import StreamMessage, ingest_advisory_batch, ingest_dlq_batch
    from dlq_dashboard.times import utcnow

    rng = random.Random(3)
    now = utcnow()
    messages = []
    for seq in range(1, 181):
        at = now - timedelta(minutes=180 - seq + rng.random())
        kind = rng.random()
        order = {"order_id": f"ord-{4100 + seq}", "customer_id": f"cus-{rng.randint(100, 999)}",
                 "items": [{"sku": rng.choice(["gizmo", "widget", "sprocket"]), "qty": rng.randint(1, 4),
                            "price": "12.50" if kind < 0.45 else 12.5}]}
        headers = {"Dlq-Original-Stream": "ORDERS", "Dlq-Original-Seq": str(9000 + seq), "Dlq-Failed-At":
                   at.isoformat() + "Z", "traceparent": f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01"}
        if kind < 0.45:
            subject = "orders.created"
            headers.update({"Dlq-Reason": "schema_invalid", "Dlq-Consumer": "order-service", "Dlq-Deliveries": "1",
                            "Dlq-Error": "payload failed schema validation", "Dlq-Schema-Errors": json.dumps(
                                [{"path": "/items/0/price", "message": "'12.50' is not of type 'number'"}])})
        elif kind < 0.75:
            subject = "payments.captured"
            headers.update({"Dlq-Reason": "max_deliveries", "Dlq-Consumer": "billing", "Dlq-Deliveries": "5",
                            "Dlq-Error": f"gateway timeout after 30000 ms (request {rng.getrandbits(32):08x})"})
        elif kind < 0.92:
            subject = "shipping.label.created"
            headers.update({"Dlq-Reason": "fatal", "Dlq-Consumer": "shipper", "Dlq-Deliveries": "2",
                            "Dlq-Error": f"carrier rejected address for {order['order_id']}: unknown postcode"})
        else:
            subject = "orders.cancelled"
            headers.update({"Dlq-Reason": "terminated", "Dlq-Consumer": "order-service", "Dlq-Deliveries": "1",
                            "Dlq-Error": "validation failed: missing customer_id"})
        headers["Dlq-Original-Subject"] = subject
        messages.append(StreamMessage(seq, f"dlq.{subject}", headers, json.dumps(order).encode(), at))
    # As if the dashboard had been running all along: each message mirrored as it failed (the
    # chart counts entries by the minute they were received).
    from dlq_dashboard.ingest import writes

    try:
        for m in messages:
            writes.utcnow = lambda at=m.stored_at: at
            ingest_dlq_batch(engine, "DLQ", "demo", [m])
    finally:
        writes.utcnow = utcnow
    photographed = messages[-2]
    seq = int(photographed.headers["Dlq-Original-Seq"])
    naks = [(Advisory("nak", f"nak-{n}", photographed.stored_at - timedelta(seconds=30 - n * 5), "ORDERS",
                      photographed.headers["Dlq-Consumer"], seq, n, None, {}), None, None) for n in (1, 2)]
    ingest_advisory_batch(engine, "DLQ_ADVISORIES", "demo", naks, 2)


async def _orders_stream(url: str) -> None:
    """The shop's stream and the consumer a republish of orders.created reaches."""
    import nats
    from nats.js.api import ConsumerConfig

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        await js.add_consumer("ORDERS", ConsumerConfig(durable_name="order-service", filter_subject="orders.created"))
    finally:
        await nc.close()


def patch_preview(page, base: str) -> None:
    """One JSON Patch for every orders.created entry with a string price: its preview."""
    page.goto(f"{base}/?subject=orders.created&reason=schema_invalid")
    by_filter = page.locator("form:has(input[name=by][value=filter])")
    by_filter.locator("select[name=action]").select_option("patch")
    by_filter.get_by_role("button", name="Preview for all matching").click()
    page.get_by_label("JSON Patch (RFC 6902)").fill('[{"op": "replace", "path": "/items/0/price", "value": 12.5}]')
    page.get_by_role("button", name="Preview the patch").click()
    page.locator(".patch-preview").wait_for()
    page.screenshot(path=str(ROOT / "docs" / "screenshot-patch-preview.png"), full_page=True)




def jobs_for_the_photo(rt) -> None:
    """A finished bulk close, a cancelled one, and a patch job under way."""
    from sqlalchemy import select

    from dlq_dashboard.actions.bulk import jobs
    from dlq_dashboard.db.models import Entry, FailureGroup

    with rt.engine.connect() as conn:
        cancelled_ids = conn.execute(select(Entry.id).where(Entry.original_subject == "orders.cancelled")
                                     .order_by(Entry.id)).scalars().all()
        group = conn.execute(select(FailureGroup.id).where(FailureGroup.subject == "shipping.label.created")
                             .order_by(FailureGroup.id)).scalars().first()
    closed = jobs.create_job(rt, "close", actor="mara", ids=cancelled_ids[:6], note="orders cancelled upstream")
    stopped = jobs.create_job(rt, "close", actor="mara", filter_args={"group": str(group)}, start=False)
    jobs.cancel_job(rt, stopped, actor="lee")
    rt.jobs.submit(stopped)
    for job_id in (closed, stopped):
        rt.jobs.join(job_id, 30)
    # A patch job under way: the photo's settings pace republishes at one a second.
    jobs.create_job(rt, "patch", actor="lee", filter_args={"subject": "orders.created", "reason": "schema_invalid"},
                    patch=[{"op": "replace", "path": "/items/0/price", "value": 12.5}], only_valid=True)


def triage_for_the_photo(engine) -> int:
    """An incident under way (docs/triage.md): the gateway timeouts assigned and noted, the
    schema failures resolved in v2, the cancellations ignored for a day; the timeouts' group id."""
    from sqlalchemy import select

    from dlq_dashboard.actions.triage import add_note, change_state, parse_state_change
    from dlq_dashboard.db.models import FailureGroup
    from dlq_dashboard.times import utcnow

    with engine.connect() as conn:
        by_subject = {s: (i, v) for s, i, v in conn.execute(
            select(FailureGroup.subject, FailureGroup.id, FailureGroup.version).order_by(FailureGroup.id.desc()))}
    now = utcnow()
    timeouts, version = by_subject["payments.captured"]
    change_state(engine, timeouts, version, parse_state_change({"state": "investigating", "assignee": "mara"}, now),
                 actor="mara")
    add_note(engine, timeouts, "The gateway answers in 31 s since 09:40; the provider's status page says degraded.",
             actor="mara")
    add_note(engine, timeouts, "Retry after the provider's fix; closing the duplicates first.", actor="lee")
    schema, version = by_subject["orders.created"]
    change_state(engine, schema, version, parse_state_change(
        {"state": "resolved", "resolved_in": "v2", "note": "prices are numbers again since order-service v2"}, now),
        actor="lee")
    cancelled, version = by_subject["orders.cancelled"]
    change_state(engine, cancelled, version, parse_state_change(
        {"state": "ignored", "until": "24h", "note": "known: the old mobile app"}, now), actor="lee")
    return timeouts


def main(shots: list[str]) -> int:
    import waitress
    from playwright.sync_api import sync_playwright
    from sqlalchemy import select

    from dlq_dashboard import create_app
    from dlq_dashboard.accounts import create_user
    from dlq_dashboard.config import Settings
    from dlq_dashboard.db.models import Entry
    from dlq_dashboard.nats.server import NatsServer
    from dlq_dashboard.runtime import runtime_of
    from dlq_dashboard.web.security import WAITRESS_OPTIONS

    with tempfile.TemporaryDirectory() as workdir:
        work = Path(workdir)
        nats_server = NatsServer(store_dir=work / "nats", log_path=work / "nats.log").start()
        asyncio.run(_orders_stream(nats_server.url))
        (work / "schemas").mkdir()
        (work / "schemas" / "orders.json").write_text(json.dumps(SCHEMA))
        # The mirror follows streams of its own: the entries filled in below stand for DLQ's.
        settings = Settings(database_url=f"sqlite:///{work}/dlq.sqlite3", nats_urls=(nats_server.url,),
                            instance_path=str(work / "instance"), secret_key="screenshots",
                            schemas_dir=str(work / "schemas"), dlq_stream="SHOTS",
                            advisory_stream="SHOTS_ADVISORIES", republish_rate=1.0, list_fields=(("Customer", "/customer_id"),))
        app = create_app({"SETTINGS": settings})
        engine = runtime_of(app).engine
        fill(engine)
        runtime_of(app).start()
        runtime_of(app).bridge.wait_connected(10)
        create_user(engine, "mara", "screenshots-password", "operator")
        jobs_for_the_photo(runtime_of(app))
        group_id = triage_for_the_photo(engine)
        with engine.connect() as conn:
            detail_id = conn.execute(select(Entry.id).where(Entry.reason == "schema_invalid")
                                     .order_by(Entry.id.desc())).scalars().first()
        server = waitress.create_server(app, host="127.0.0.1", port=0, threads=4, **WAITRESS_OPTIONS)
        threading.Thread(target=server.run, daemon=True).start()
        base = f"http://127.0.0.1:{server.effective_port}"
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                             args=["--headless", "--no-sandbox", "--disable-gpu",
                                                   "--disable-background-networking"])
                page = browser.new_page(viewport={"width": 1280, "height": 860})
                page.goto(f"{base}/login")
                page.fill("input[name=username]", "mara")
                page.fill("input[name=password]", "screenshots-password")
                page.click("button[type=submit]")
                page.wait_for_url(lambda url: "/login" not in url)
                if "list" in shots:
                    page.goto(f"{base}/?status=open")
                    page.locator(".chart svg").wait_for()
                    page.screenshot(path=str(ROOT / "docs" / "screenshot-list.png"))
                if "detail" in shots:
                    page.goto(f"{base}/entries/{detail_id}")
                    page.screenshot(path=str(ROOT / "docs" / "screenshot-detail.png"), full_page=True)
                if "editor" in shots:
                    # A string price fixed to a number: one line out, one in, and the schema passes.
                    page.goto(f"{base}/entries/{detail_id}/edit")
                    editor = page.locator("#payload")
                    editor.fill(editor.input_value().replace('"12.50"', "12.50"))
                    page.locator("#payload-check .ok").wait_for()
                    page.screenshot(path=str(ROOT / "docs" / "screenshot-editor.png"), full_page=True)
                if "patch-preview" in shots:
                    patch_preview(page, base)
                if "jobs" in shots:
                    page.goto(f"{base}/jobs")
                    page.screenshot(path=str(ROOT / "docs" / "screenshot-jobs.png"))
                if "groups" in shots:
                    page.goto(f"{base}/groups?status=")
                    page.screenshot(path=str(ROOT / "docs" / "screenshot-groups.png"))
                if "group" in shots:
                    page.goto(f"{base}/groups/{group_id}")
                    page.screenshot(path=str(ROOT / "docs" / "screenshot-group.png"), full_page=True)
                browser.close()
        finally:
            server.close()
            runtime_of(app).stop()
            nats_server.stop()
    print("wrote " + ", ".join(f"docs/screenshot-{name}.png" for name in shots))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["list", "detail", "editor", "patch-preview", "jobs", "groups", "group"]))
