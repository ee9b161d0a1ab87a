"""The demo's world: realistic orders (and the ways they go wrong), the fulfilment service's
simulated dependencies, and its own order table, upserted on the natural key ``order_id``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import sqlite3
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from ..files import private_sqlite

# (customer id, name, street, city, postcode, country, currency)
CUSTOMERS = (
    ("C-1001", "Ada Fischer", "Lindenstraße 12", "Berlin", "10969", "DE", "EUR"),
    ("C-1007", "Tomás Ruiz", "Calle de Alcalá 48", "Madrid", "28014", "ES", "EUR"),
    ("C-1013", "Grace Okafor", "14 Wharf Road", "London", "N1 7GR", "GB", "GBP"),
    ("C-1021", "Lena Virtanen", "Mannerheimintie 5", "Helsinki", "00100", "FI", "EUR"),
    ("C-1029", "Sam Patel", "220 Pine Street", "Seattle", "98101", "US", "USD"),
    ("C-1034", "Chloé Martin", "8 rue Oberkampf", "Paris", "75011", "FR", "EUR"),
    ("C-1042", "Noor Haddad", "Keizersgracht 301", "Amsterdam", "1016 ED", "NL", "EUR"),
    ("C-1050", "Jonas Berg", "Drottninggatan 77", "Stockholm", "111 60", "SE", "EUR"),
)
# The customer whose account lives on the CRM shard that is down while the demo's outage lasts.
OUTAGE_CUSTOMER = "C-1042"
CRM_SHARD = "eu-3"

# (sku, name, price in EUR)
CATALOGUE = (
    ("TEA-101", "Darjeeling first flush, 100 g", 12.50),
    ("TEA-117", "Sencha, 200 g", 15.90),
    ("COF-330", "Espresso beans, 1 kg", 21.90),
    ("MUG-204", "Stoneware mug", 9.90),
    ("KET-310", "Gooseneck kettle", 59.00),
    ("BRW-220", "Pour-over brewer", 24.00),
    ("FLT-115", "Paper filters, 100", 4.20),
    ("GRD-402", "Hand grinder", 79.00),
    ("SCL-118", "Brew scale", 34.50),
    ("TIN-140", "Tea tin", 7.80),
)
RATES = {"EUR": 1.0, "USD": 1.08, "GBP": 0.85}

# A quantity of -1 that went through an unsigned 64-bit integer in a buggy mobile client: the
# schema allows it (an integer of at least 1), the order table cannot store it.
POISON_QTY = 2**64 - 1

# What the producer sends, and the failure each kind shows on the dashboard.
KINDS = {
    "ok": "stored",
    "flaky": "stored after one or two inventory timeouts (naks in the history)",
    "resent": "the same order sent again by the shop: upserted into the same row",
    "price_as_string": "schema_invalid: /items/0/price is a string",
    "missing_customer": "schema_invalid: customer_id is missing",
    "garbled": "schema_invalid: gzip bytes from a misconfigured producer, not JSON",
    "outage": "max_deliveries while the CRM shard of customer C-1042 is down",
    "poison": "fatal: a quantity of 2^64-1 that the order table cannot store",
}
# The scripted opening burst: every kind at least once, the poison pill exactly once.
BURST = ("ok",) * 10 + ("flaky",) * 3 + (
    "price_as_string", "price_as_string", "missing_customer", "garbled", "outage", "outage", "poison")
# The steady trickle afterwards.
TRICKLE_WEIGHTS = {"ok": 62, "flaky": 12, "resent": 4, "price_as_string": 8, "missing_customer": 4,
                   "garbled": 2, "outage": 8}


@dataclass(frozen=True)
class OutgoingOrder:
    """One message the demo's shop publishes: its payload, headers and msgId, and what it is."""

    kind: str
    order_id: str
    payload: bytes
    headers: dict[str, str]
    msg_id: str


class OrderFactory:
    """Makes realistic orders, and orders broken in the ways the demo shows."""

    def __init__(self, rng: random.Random, now: Callable[[], datetime] | None = None):
        self.rng = rng
        self.now = now or (lambda: datetime.now(timezone.utc))
        self._recent: list[OutgoingOrder] = []  # good orders the shop may send again

    def order(self, customer: tuple | None = None) -> dict[str, Any]:
        """A valid order of one to four catalogue items."""
        rng = self.rng
        cid, name, street, city, postcode, country, currency = customer or rng.choice(
            [c for c in CUSTOMERS if c[0] != OUTAGE_CUSTOMER])
        items = []
        for sku, title, price in rng.sample(CATALOGUE, rng.randint(1, 4)):
            items.append({"sku": sku, "name": title, "qty": rng.choice((1, 1, 1, 2, 3)),
                          "price": round(price * RATES[currency], 2)})
        return {
            "order_id": f"ORD-{rng.getrandbits(32):08X}",
            "customer_id": cid,
            "placed_at": self.now().isoformat(timespec="seconds").replace("+00:00", "Z"),
            "currency": currency,
            "items": items,
            "shipping": {"name": name, "street": street, "city": city, "postcode": postcode,
                         "country": country},
            "coupon": rng.choice((None, None, None, "WELCOME10", "SPRING5")),
        }

    def make(self, kind: str) -> OutgoingOrder:
        """The message for one order of ``kind`` (see KINDS)."""
        if kind == "resent":
            if not self._recent:
                kind = "ok"
            else:
                # The shop timed out waiting for a reply and sent the order again as a new
                # message (a new msgId), so the stream stores it twice; the upsert absorbs it.
                earlier = self.rng.choice(self._recent)
                return OutgoingOrder("resent", earlier.order_id, earlier.payload,
                                     {**earlier.headers, "traceparent": self._traceparent()},
                                     f"{earlier.order_id}:resent:{self.rng.getrandbits(32):08x}")
        customer = next(c for c in CUSTOMERS if c[0] == OUTAGE_CUSTOMER) if kind == "outage" else None
        order = self.order(customer)
        if kind == "price_as_string":
            order["items"][0]["price"] = f"{order['items'][0]['price']:.2f}"
        elif kind == "missing_customer":
            del order["customer_id"]
        elif kind == "poison":
            order["items"][0]["qty"] = POISON_QTY
        payload = json.dumps(order, ensure_ascii=False).encode()
        if kind == "garbled":
            payload = gzip.compress(payload, mtime=0)
        headers = {"Content-Type": "application/json", "traceparent": self._traceparent(),
                   "Shop-Channel": self.rng.choice(("web", "web", "ios", "android"))}
        outgoing = OutgoingOrder(kind, order["order_id"], payload, headers, order["order_id"])
        if kind in ("ok", "flaky"):
            self._recent = (self._recent + [outgoing])[-20:]
        return outgoing

    def _traceparent(self) -> str:
        return f"00-{self.rng.getrandbits(128):032x}-{self.rng.getrandbits(64):016x}-01"


class SimulatedServices:
    """The fulfilment service's dependencies: a CRM with one shard down for a while, and an
    inventory service that times out on some reservations before it answers."""

    def __init__(self, outage_seconds: float, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.outage_until = clock() + outage_seconds
        self.inventory_timeouts: dict[str, int] = {}

    def outage_over(self) -> bool:
        """True once the CRM shard of OUTAGE_CUSTOMER answers again."""
        return self.clock() >= self.outage_until

    async def look_up_customer(self, customer_id: str) -> None:
        """Fetch the customer's account; times out for OUTAGE_CUSTOMER during the outage."""
        await asyncio.sleep(0.01)
        if customer_id == OUTAGE_CUSTOMER and not self.outage_over():
            raise TimeoutError(f"CRM shard {CRM_SHARD} did not answer for customer {customer_id}")

    async def reserve_stock(self, order_id: str) -> None:
        """Reserve the order's items; times out as often as planned for this order."""
        await asyncio.sleep(0.01)
        left = self.inventory_timeouts.get(order_id, 0)
        if left:
            self.inventory_timeouts[order_id] = left - 1
            raise TimeoutError(f"inventory service timed out reserving stock for {order_id}")


class OrderTable:
    """The fulfilment service's own SQLite table of orders, upserted on ``order_id``.

    Use it from one thread only (the demo gives it a single-thread executor).
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None

    def open(self) -> None:
        """Open (and create) the table."""
        private_sqlite(self.path)  # in instance/ beside the dashboard's database, and as private
        self._db = sqlite3.connect(self.path, timeout=10)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("""CREATE TABLE IF NOT EXISTS orders (
            order_id TEXT PRIMARY KEY,
            customer_id TEXT NOT NULL,
            currency TEXT NOT NULL,
            total_cents INTEGER NOT NULL,
            item_count INTEGER NOT NULL,
            placed_at TEXT NOT NULL,
            source TEXT NOT NULL,
            replay_of TEXT,
            upserts INTEGER NOT NULL DEFAULT 1,
            stored_at TEXT NOT NULL,
            updated_at TEXT NOT NULL)""")

    def upsert(self, order: dict[str, Any], source: str, replay_of: str | None) -> None:
        """Insert the order or update its row; commits before it returns."""
        now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        total = sum(round(item["price"] * 100) * item["qty"] for item in order["items"])
        item_count = sum(item["qty"] for item in order["items"])
        with self._db:  # commit (or roll back) here; the lifecycle acks only after this
            self._db.execute(
                "INSERT INTO orders (order_id, customer_id, currency, total_cents, item_count, placed_at,"
                " source, replay_of, stored_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(order_id) DO UPDATE SET customer_id = excluded.customer_id,"
                " currency = excluded.currency, total_cents = excluded.total_cents,"
                " item_count = excluded.item_count, placed_at = excluded.placed_at,"
                " source = excluded.source, replay_of = excluded.replay_of,"
                " upserts = orders.upserts + 1, updated_at = excluded.updated_at",
                (order["order_id"], order["customer_id"], order["currency"], total, item_count,
                 order["placed_at"], source, replay_of, now, now))

    def close(self) -> None:
        """Close the connection."""
        if self._db is not None:
            self._db.close()
            self._db = None


def read_orders(path: Path) -> dict[str, dict[str, Any]]:
    """Every stored order by order_id (for people and tests; opens its own connection)."""
    if not Path(path).exists():
        return {}
    db = sqlite3.connect(path, timeout=10)
    db.row_factory = sqlite3.Row
    try:
        return {row["order_id"]: dict(row) for row in db.execute("SELECT * FROM orders")}
    except sqlite3.OperationalError:  # the table is not created yet
        return {}
    finally:
        db.close()
