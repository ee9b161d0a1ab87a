"""Alerts (SPEC section 9): ``group.new`` and ``group.spike`` written to an outbox in the
transaction of the write that raised them (outbox.py), and POSTed to each DLQ_WEBHOOK_URL by
one sender across the replicas (sender.py), retried with backoff until delivered."""
