"""The demo's orders against its schema, its simulated services, and its order table."""

from __future__ import annotations

import json
import random

import pytest

from dlq_consumer import make_validator, parse_and_validate
from dlq_dashboard.demo import order_schema
from dlq_dashboard.demo.orders import (
    BURST,
    OUTAGE_CUSTOMER,
    OrderFactory,
    OrderTable,
    SimulatedServices,
    read_orders,
)

from . import support

VALIDATE = make_validator(order_schema())


def violations(payload: bytes) -> list[str]:
    return [v.path for v in parse_and_validate(payload, VALIDATE)[1]]


@pytest.mark.parametrize("seed", range(20))
def test_good_orders_pass_the_schema(seed):
    factory = OrderFactory(random.Random(seed))
    for kind in ("ok", "flaky", "outage", "resent"):
        assert violations(factory.make(kind).payload) == [], kind


def test_each_broken_kind_fails_the_schema_where_the_demo_says():
    factory = OrderFactory(random.Random(1))

    assert violations(factory.make("price_as_string").payload) == ["/items/0/price"]
    assert violations(factory.make("missing_customer").payload) == [""]
    assert violations(factory.make("garbled").payload) == [""]


def test_the_poison_pill_passes_the_schema_but_the_order_table_cannot_store_it(tmp_path):
    poison = OrderFactory(random.Random(2)).make("poison")
    table = OrderTable(tmp_path / "orders.sqlite3")
    table.open()

    assert violations(poison.payload) == []
    with pytest.raises(OverflowError):
        table.upsert(json.loads(poison.payload), "ORDERS:1", None)
    table.close()
    assert read_orders(tmp_path / "orders.sqlite3") == {}


def test_a_resent_order_keeps_its_order_id_under_a_new_msg_id():
    factory = OrderFactory(random.Random(3))
    first = factory.make("ok")
    again = factory.make("resent")

    assert again.order_id == first.order_id and again.payload == first.payload
    assert again.msg_id != first.msg_id


def test_upserting_an_order_twice_leaves_one_row_that_counts_both(tmp_path):
    order = OrderFactory(random.Random(4)).order()
    table = OrderTable(tmp_path / "orders.sqlite3")
    table.open()
    table.upsert(order, "ORDERS:1", None)
    table.upsert(order, "ORDERS:1", "DLQ:7")
    table.close()

    rows = read_orders(tmp_path / "orders.sqlite3")
    assert list(rows) == [order["order_id"]]
    assert rows[order["order_id"]]["upserts"] == 2
    assert rows[order["order_id"]]["replay_of"] == "DLQ:7"


def test_the_crm_times_out_for_the_outage_customer_until_the_outage_ends():
    now = [0.0]
    services = SimulatedServices(outage_seconds=10, clock=lambda: now[0])

    with pytest.raises(TimeoutError):
        support.run(services.look_up_customer(OUTAGE_CUSTOMER))
    support.run(services.look_up_customer("C-1001"))
    now[0] = 10.0
    support.run(services.look_up_customer(OUTAGE_CUSTOMER))
    assert services.outage_over()


def test_the_inventory_times_out_as_often_as_planned_then_reserves():
    services = SimulatedServices(outage_seconds=0)
    services.inventory_timeouts["ORD-00000001"] = 2

    for _ in range(2):
        with pytest.raises(TimeoutError):
            support.run(services.reserve_stock("ORD-00000001"))
    support.run(services.reserve_stock("ORD-00000001"))


def test_the_opening_burst_has_exactly_one_poison_pill_and_every_failure():
    assert BURST.count("poison") == 1
    assert {"price_as_string", "missing_customer", "garbled", "outage", "flaky"} <= set(BURST)
