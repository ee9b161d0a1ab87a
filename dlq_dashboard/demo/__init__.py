"""The demo (``python app.py --demo``): a shop publishing orders and a fulfilment service on the
consumer library that dead-letters every kind of failure (service.py), with the orders, the
simulated services and the order table it writes (orders.py)."""

from .service import (
    CONSUMER, DEMO_SCHEMAS, OPERATOR, STREAM, SUBJECT, Demo, demo_settings, ensure_demo_operator, order_schema,
)

__all__ = ["CONSUMER", "DEMO_SCHEMAS", "OPERATOR", "STREAM", "SUBJECT", "Demo", "demo_settings",
           "ensure_demo_operator", "order_schema"]
