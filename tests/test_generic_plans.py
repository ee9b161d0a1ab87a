"""No page walks the entries once its statements are prepared, just after a backlog is mirrored
(no statistics yet) or once autovacuum has analysed the table.

psycopg prepares a statement its connection has run five times (a read transaction commits, so
the prepared statement lives on), and from the sixth run PostgreSQL may keep a generic plan, made
without the parameters' values, which guesses what a range keeps (a third of the rows for
``id > $1``). Without statistics the search lag's count was planned that way as a walk of every
entry, on every search (docs/PERFORMANCE.md "The search lag's count"). Here every statement is
prepared at once, each page asked eight times, and each plan read back from the server
(auto_explain, sent to the client as notices); a node that filters out half the entries one by
one has walked them.
"""

from __future__ import annotations

import json
import re

import pytest
from sqlalchemy import event

from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

ENTRIES = 20_000
#: A statement that filters out this many entries one by one has walked (half) the table.
WALKED = ENTRIES // 2
#: The entries were received over the week up to two hours ago: ``since=1h`` and ``until=8d`` are
#: empty windows, ``since=3h`` and ``until=7d`` hold a few entries.
LIST_QUERIES = ["", "?status=open", "?q=c-417", "?q=o-4170", "?subject=orders.*", "?reason=schema_invalid",
                "?consumer=billing", "?since=1h", "?until=8d", "?since=3h", "?until=7d", "?since=2d&until=1d",
                "?status=open&q=c-41", "?status=open&since=1h"]


def _dead_letters(first: int, count: int) -> list[StreamMessage]:
    return [StreamMessage(i, "dlq.orders.created",
                          {"Dlq-Original-Subject": "orders.created", "Dlq-Original-Stream": "ORDERS",
                           "Dlq-Original-Seq": str(i), "Dlq-Consumer": "billing", "Dlq-Reason": "schema_invalid",
                           "Dlq-Error": "price is a string"},
                          b'{"order_id": "o-%d", "customer_id": "c-%d", "currency": "EUR"}' % (i, i % 1000), utcnow())
            for i in range(first, first + count)]


@pytest.mark.parametrize("analysed", [False, True], ids=["just-mirrored", "analysed"])
def test_no_page_walks_the_entries_once_its_statements_are_prepared(make_app, database_url, analysed):
    app = make_app()
    engine = runtime_of(app).engine
    for first in range(1, ENTRIES + 1, 2000):
        ingest_dlq_batch(engine, "DLQ", "e1", _dead_letters(first, 2000))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"UPDATE entries SET received_at = now() - interval '2 hours' "
                             f"- ({ENTRIES} - id) * interval '30 seconds'")  # a week, up to two hours ago
        if analysed:  # as autovacuum leaves a table that grew by a tenth
            conn.exec_driver_sql("ANALYZE entries")
    notices: list[str] = []

    @event.listens_for(engine, "connect")
    def explained(dbapi_connection, _record):
        dbapi_connection.prepare_threshold = 0  # every statement prepared at once
        dbapi_connection.add_notice_handler(lambda diagnostic: notices.append(diagnostic.message_primary))
        with dbapi_connection.cursor() as cursor:
            for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                            "SET auto_explain.log_analyze = on", "SET auto_explain.log_format = json",
                            "SET client_min_messages = log"):
                cursor.execute(setting)
        dbapi_connection.commit()

    engine.dispose()  # the connections from now on are the explained ones
    client = support.logged_in(app, "admin")
    # Without statistics an empty time window is walked by any plan (the planner guesses a third
    # of the entries in it): that lasts until autovacuum analyses the grown table.
    queries = [q for q in LIST_QUERIES if analysed or not re.search(r"since|until", q)]
    paths = [f"/{q}" for q in queries] + [f"/api/entries{q}" for q in queries]
    paths += [path for rule, path in support.signed_in_routes(app, ENTRIES // 3)
              if "GET" in rule.methods and "export" not in rule.rule]
    paths += ["/api/export.ndjson?limit=100", "/summary?q=c-417", "/api/summary?q=c-417", "/api/groups?status=open",
              "/healthz", "/metrics"]
    walked, statements = [], 0
    for path in paths:
        notices.clear()
        for _ in range(8):  # the server weighs a generic plan from the sixth run of a prepared statement on
            answer = client.get(path)
            answer.get_data()
            answer.close()
            assert answer.status_code < 500 or path == "/healthz", path  # no NATS here: 503 and why
        for notice in notices:
            found = re.search(r"\{.*\}", notice, re.S)
            if not found:
                continue
            explained_plan = json.loads(found.group(0))
            statements += 1
            for node in support.plan_nodes(explained_plan["Plan"]):
                if node.get("Relation Name") == "entries" and node.get("Rows Removed by Filter", 0) >= WALKED:
                    walked.append((path, node["Node Type"], node["Rows Removed by Filter"],
                                   explained_plan["Query Text"][:300]))
    assert statements > 400 and len(paths) > 40
    assert walked == [], "\n".join(map(str, walked))
