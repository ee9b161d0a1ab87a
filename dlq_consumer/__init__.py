"""Dead-lettering consumers for Python services on NATS JetStream.

Validate, run the handler, acknowledge only after it returns; nak a transient failure with
backoff; dead-letter (SPEC section 4) and terminate a message that can never succeed or has
used its last delivery. Depends on nats-py and jsonschema only (pydantic models optional):

    from dlq_consumer import ConsumerRunner, Lifecycle

    lifecycle = Lifecycle(nc, handle_order, schema=ORDER_SCHEMA)
    runner = ConsumerRunner(nc, "ORDERS", ConsumerConfig(durable_name="billing", max_deliver=5),
                            lifecycle)
    await runner.run()   # until runner.stop()
"""

from __future__ import annotations

from . import headers
from .headers import dead_letter_msg_id, describe_error
from .lifecycle import Backoff, ConsumerLimits, Lifecycle, Outcome, TransientError, default_is_transient
from .publishing import dead_letter, dead_letter_headers, dlq_subject, ensure_stream, publish_with_retry
from .runner import ConsumerRunner
from .validation import SchemaViolation, Validator, json_pointer, make_validator, parse_and_validate

__all__ = [
    "Backoff", "ConsumerLimits", "ConsumerRunner", "Lifecycle", "Outcome", "SchemaViolation",
    "TransientError", "Validator", "dead_letter", "dead_letter_headers", "dead_letter_msg_id",
    "default_is_transient", "describe_error", "dlq_subject", "ensure_stream", "headers", "json_pointer",
    "make_validator", "parse_and_validate", "publish_with_retry",
]
