"""Take the README's screenshots of the list and the detail page.

    python docs/screenshots.py

Fills a temporary database with realistic dead letters (through the mirror's ingest, no NATS
needed), serves the app on 127.0.0.1, and photographs it with Debian's Chromium through
Playwright into docs/screenshot-list.png and docs/screenshot-detail.png.
"""

from __future__ import annotations

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
    ingest_dlq_batch(engine, "DLQ", "demo", messages)
    # As if the dashboard had been running all along: each message mirrored as it failed.
    from sqlalchemy import update

    from dlq_dashboard.db.engine import write_transaction
    from dlq_dashboard.db.models import Entry

    with write_transaction(engine) as conn:
        conn.execute(update(Entry).values(received_at=Entry.failed_at))
    photographed = messages[-2]
    seq = int(photographed.headers["Dlq-Original-Seq"])
    naks = [(Advisory("nak", f"nak-{n}", photographed.stored_at - timedelta(seconds=30 - n * 5), "ORDERS",
                      photographed.headers["Dlq-Consumer"], seq, n, None, {}), None, None) for n in (1, 2)]
    ingest_advisory_batch(engine, "DLQ_ADVISORIES", "demo", naks, 2)


def main() -> int:
    import waitress
    from playwright.sync_api import sync_playwright
    from sqlalchemy import select

    from dlq_dashboard import create_app
    from dlq_dashboard.accounts import create_user
    from dlq_dashboard.config import Settings
    from dlq_dashboard.db.models import Entry
    from dlq_dashboard.runtime import runtime_of

    with tempfile.TemporaryDirectory() as workdir:
        work = Path(workdir)
        (work / "schemas").mkdir()
        (work / "schemas" / "orders.json").write_text(json.dumps(SCHEMA))
        settings = Settings(database_url=f"sqlite:///{work}/dlq.sqlite3", nats_urls=("nats://127.0.0.1:1",),
                            instance_path=str(work / "instance"), secret_key="screenshots",
                            schemas_dir=str(work / "schemas"), list_fields=(("Customer", "/customer_id"),))
        app = create_app({"SETTINGS": settings})
        engine = runtime_of(app).engine
        fill(engine)
        create_user(engine, "mara", "screenshots-password", "operator")
        with engine.connect() as conn:
            detail_id = conn.execute(select(Entry.id).where(Entry.reason == "schema_invalid")
                                     .order_by(Entry.id.desc())).scalars().first()
        server = waitress.create_server(app, host="127.0.0.1", port=0, threads=4)
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
                page.goto(f"{base}/?status=open")
                page.locator(".chart svg").wait_for()
                page.screenshot(path=str(ROOT / "docs" / "screenshot-list.png"))
                page.goto(f"{base}/entries/{detail_id}")
                page.screenshot(path=str(ROOT / "docs" / "screenshot-detail.png"), full_page=True)
                browser.close()
        finally:
            server.close()
            runtime_of(app).stop()
    print("wrote docs/screenshot-list.png and docs/screenshot-detail.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
