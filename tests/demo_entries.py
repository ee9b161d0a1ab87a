"""Dead letters like the demo's (its orders, broken in its ways, with its key fields), stored as
the mirror stores them, in batches: a few dozen for "the demo", 50,000 in seconds for a big list.
"""

from __future__ import annotations

import json
import random
from datetime import timedelta

from dlq_dashboard.demo.orders import OrderFactory
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.times import utcnow

# The demo's failing kinds, and what its fulfilment service says of each.
FAILURES = {
    "price_as_string": ("schema_invalid", "payload failed schema validation",
                        [{"path": "/items/0/price", "message": "'{price}' is not of type 'number'"}]),
    "missing_customer": ("schema_invalid", "payload failed schema validation",
                         [{"path": "", "message": "'customer_id' is a required property"}]),
    "garbled": ("schema_invalid", "payload is not JSON: 'utf-8' codec can't decode byte 0x8b in position 1", None),
    "outage": ("max_deliveries", "TimeoutError: CRM shard eu-3 did not answer for customer C-1042 within 2.0 s", None),
    "poison": ("fatal", "OverflowError: Python int too large to convert to SQLite INTEGER", None),
}
WEIGHTS = {"price_as_string": 8, "missing_customer": 4, "garbled": 2, "outage": 8, "poison": 1}


def demo_messages(count: int, *, first_seq: int = 1, seed: int = 28, span=timedelta(hours=3)) -> list[StreamMessage]:
    """``count`` dead letters of the demo's shop, received over ``span`` up to now."""
    rng = random.Random(seed)
    factory = OrderFactory(rng)
    kinds = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()), k=count)
    now = utcnow()
    messages = []
    for n, kind in enumerate(kinds):
        order = factory.make(kind)
        reason, error, schema_errors = FAILURES[kind]
        headers = {**order.headers, "Dlq-Original-Subject": "orders.created", "Dlq-Original-Stream": "ORDERS",
                   "Dlq-Original-Seq": str(first_seq + n), "Dlq-Consumer": "fulfilment",
                   "Dlq-Original-Msg-Id": order.msg_id, "Dlq-Reason": reason, "Dlq-Error": error,
                   "Dlq-Deliveries": "4" if kind == "outage" else "1"}
        if schema_errors:
            price = json.loads(order.payload)["items"][0]["price"] if kind == "price_as_string" else ""
            headers["Dlq-Schema-Errors"] = json.dumps(
                [{**e, "message": e["message"].format(price=price)} for e in schema_errors])
        at = now - span + span * (n + 1) / count
        messages.append(StreamMessage(first_seq + n, "dlq.orders.created", headers, order.payload, at))
    return messages


def store_demo_entries(engine, count: int, *, batch: int = 5000) -> None:
    """Store ``count`` demo dead letters through the mirror's own write, ``batch`` at a time."""
    for start in range(0, count, batch):
        ingest_dlq_batch(engine, "DLQ", "e1", demo_messages(min(batch, count - start), first_seq=start + 1,
                                                            seed=start))
