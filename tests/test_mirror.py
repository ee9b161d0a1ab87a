"""The mirror against a real nats-server: the DLQ stream and the advisories become entries,
commit first, nothing twice, nothing lost."""

from __future__ import annotations

import asyncio
import base64
import json

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy
from sqlalchemy import func, select

from dlq_dashboard.ingest.writes import read_position
from dlq_dashboard.db.models import Entry
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases


def entry_count(app) -> int:
    with runtime_of(app).engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Entry)).scalar_one()


def api_entries(client, token, **args):
    response = client.get("/api/entries", query_string={"limit": 500, **args}, headers=support.bearer(token))
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()["entries"]


def test_every_contract_field_reaches_the_api(app, nats_server, tokens):
    headers = support.dlq_headers("orders.created", Dlq_Original_Stream="ORDERS", Dlq_Original_Seq="42",
                          Dlq_Consumer="billing", Dlq_Original_Msg_Id="order-1", Dlq_Reason="schema_invalid",
                          Dlq_Error="price is a string",
                          Dlq_Schema_Errors='[{"path": "/items/0/price", "message": "not a number"}]',
                          Dlq_Deliveries="1", Dlq_Failed_At="2026-11-29T10:00:00Z", Dlq_Replay_Of="DLQ:1")
    headers["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    payload = b'{"order_id": "o-1", "items": [{"price": "12.50"}]}'
    support.run(support.publish_many(nats_server.url, [("dlq.orders.created", payload, headers)]))
    client = app.test_client()
    support.wait_for(lambda: api_entries(client, tokens["viewer"]), message="the entry")
    entry = client.get(f"/api/entries/{api_entries(client, tokens['viewer'])[0]['id']}",
                       headers=support.bearer(tokens["viewer"])).get_json()
    assert entry["status"] == "open" and entry["version"] == 1
    assert (entry["dlq_stream"], entry["dlq_seq"]) == ("DLQ", 1)
    assert entry["original_subject"] == "orders.created"
    assert (entry["original_stream"], entry["original_seq"], entry["consumer"]) == ("ORDERS", 42, "billing")
    assert entry["original_msg_id"] == "order-1" and entry["reason"] == "schema_invalid"
    assert entry["error"] == "price is a string"
    assert entry["schema_errors"] == [{"path": "/items/0/price", "message": "not a number"}]
    assert entry["deliveries"] == 1 and entry["failed_at"] == "2026-11-29T10:00:00.000000Z"
    assert entry["received_at"].endswith("Z") and entry["replay_of"] == "DLQ:1"
    assert entry["headers"]["traceparent"] == [headers["traceparent"]]
    assert base64.b64decode(entry["payload_base64"]) == payload and entry["payload_text"] == payload.decode()
    assert entry["payload_available"] is True
    assert entry["history"] == [] and entry["actions"] == []


BAD_INPUTS = [
    ("no headers", None, b'{"a": 1}'),
    ("unknown reason", {"Dlq-Original-Subject": "a.b", "Dlq-Reason": "cosmic_ray"}, b"{}"),
    ("malformed schema errors", {"Dlq-Original-Subject": "a.b", "Dlq-Schema-Errors": "[{oops"}, b"{}"),
    ("non-numeric deliveries", {"Dlq-Original-Subject": "a.b", "Dlq-Deliveries": "lots"}, b"{}"),
    ("empty payload", {"Dlq-Original-Subject": "a.b"}, b""),
    ("1 MiB payload", {"Dlq-Original-Subject": "a.b"}, bytes(range(256)) * 4096),
    ("non-UTF-8 payload", {"Dlq-Original-Subject": "a.b"}, b"\xff\xfe\xfd not utf-8"),
    ("odd header characters", {"Dlq-Original-Subject": "a.b", "Dlq-Error": "<script>alert(1)</script> ✓ \t tab",
                               "X-Weird": "ünïcödé \"quotes\" 'single' {{7*7}}"}, b"{}"),
    # Past what the columns hold (deliveries 32-bit on PostgreSQL, sequences 64-bit): one such
    # message stopped the mirror for good, every later dead letter behind it.
    ("numbers past the columns", {"Dlq-Original-Subject": "a.b", "Dlq-Deliveries": "2147483648",
                                  "Dlq-Original-Seq": "9223372036854775808",
                                  "Dlq-Replay-Of": "DLQ:99999999999999999999999"}, b"{}"),
    # PostgreSQL's text holds no NUL: one in a header value failed every write of its batch.
    ("NUL in headers", {"Dlq-Original-Subject": "a.b\x00c", "Dlq-Error": "bad\x00byte", "X-N": "v\x00"},
     b'{"note": "x\x00y", "escaped": "\\u0000"}'),
    # Each longer than a PostgreSQL index row holds (about 2.7 kB).
    ("long contract headers", {"Dlq-Original-Subject": "a." + "s" * 6_000, "Dlq-Original-Msg-Id": "m" * 6_000,
                               "Dlq-Consumer": "c" * 6_000, "Dlq-Reason": "r" * 6_000, "Dlq-Error": "e " * 3_000,
                               "Dlq-Original-Stream": "S" * 6_000, "Dlq-Replay-Of": "D" * 6_000 + ":1"}, b"{}"),
    # Schema errors JSON reads and no column keeps or JSON cannot write again: half a UTF-16 pair
    # (TypeError), a 5,000-deep array (RecursionError), each stopped the mirror for good; a NUL
    # written as JSON's escape stripped the entry on PostgreSQL.
    ("schema errors no column keeps", {"Dlq-Original-Subject": "a.b", "Dlq-Schema-Errors":
                                       '[{"path": "/price", "message": "\'\\udcff\' is not of type \'number\'"}, '
                                       '{"path": "/a", "message": "x\\u0000y"}]'}, b"{}"),
    ("schema errors nested deep", {"Dlq-Original-Subject": "a.b", "Dlq-Schema-Errors": "[" * 5000 + "]" * 5000},
     b"{}"),
]


def test_bad_input_is_stored_and_served_and_never_stalls_the_mirror(app, nats_server, tokens):
    messages = [(f"dlq.bad.{i}", payload, headers) for i, (_, headers, payload) in enumerate(BAD_INPUTS)]
    messages.append(("dlq.good", b'{"ok": true}', support.dlq_headers("good.one")))
    support.run(support.publish_many(nats_server.url, messages))
    client = app.test_client()
    entries = support.wait_for(lambda: (lambda e: e if len(e) == len(messages) else None)(
        api_entries(client, tokens["viewer"])), message="every message as an entry")
    by_seq = {e["dlq_seq"]: e for e in entries}
    for seq, (label, headers, payload) in enumerate(BAD_INPUTS, start=1):
        entry = by_seq[seq]
        assert base64.b64decode(entry["payload_base64"]) == payload, label
    assert by_seq[1]["original_subject"] is None and by_seq[1]["headers"] == {}
    assert by_seq[2]["reason"] == "cosmic_ray"
    assert by_seq[3]["schema_errors"] is None and by_seq[3]["headers"]["Dlq-Schema-Errors"] == ["[{oops"]
    assert any("Dlq-Schema-Errors" in n for n in by_seq[3]["notes"])
    assert by_seq[4]["deliveries"] is None and any("Dlq-Deliveries" in n for n in by_seq[4]["notes"])
    assert by_seq[7]["payload_text"] is None
    assert by_seq[8]["error"] == "<script>alert(1)</script> ✓ \t tab"
    assert by_seq[8]["headers"]["X-Weird"] == ["ünïcödé \"quotes\" 'single' {{7*7}}"]
    big = by_seq[9]
    assert (big["deliveries"], big["original_seq"]) == (None, None) and big["headers"]["Dlq-Deliveries"] == ["2147483648"]
    assert any("Dlq-Deliveries '2147483648' is larger than 2,147,483,647" in n for n in big["notes"])
    assert any("Dlq-Original-Seq '9223372036854775808' is larger than" in n for n in big["notes"])
    # Its Dlq-Replay-Of names no message a stream could hold: its page and JSON still answer.
    assert client.get(f"/api/entries/{big['id']}", headers=support.bearer(tokens["viewer"])).status_code == 200
    nul = by_seq[10]
    assert (nul["original_subject"], nul["error"]) == ("a.b\ufffdc", "bad\ufffdbyte")
    assert nul["headers"]["X-N"] == ["v\x00"] and nul["headers"]["Dlq-Error"] == ["bad\x00byte"]
    assert any("Dlq-Error, Dlq-Original-Subject held NUL characters" in n for n in nul["notes"])
    long = by_seq[11]
    assert [long[f] for f in ("original_subject", "original_stream", "consumer", "original_msg_id", "replay_of")] \
        == [None] * 5 and long["reason"] == "r" * 255 and long["error"] == ("e " * 3_000).strip()
    assert long["headers"]["Dlq-Consumer"] == ["c" * 6_000]
    assert any("Dlq-Original-Subject is longer than 1,024 bytes" in n and "cannot be republished" in n
               for n in long["notes"])
    assert not any(n.startswith("No Dlq-Original-Subject") for n in long["notes"])
    # Its failure group is the one the list's group filter finds it by.
    group = client.get(f"/api/entries/{long['id']}", headers=support.bearer(tokens["viewer"])).get_json()["group"]
    assert [e["id"] for e in api_entries(client, tokens["viewer"], group=group["id"])] == [long["id"]]
    odd = by_seq[12]
    assert odd["original_subject"] == "a.b" and [e["message"] for e in odd["schema_errors"]] == [
        "'\ufffd' is not of type 'number'", "x\ufffdy"]
    assert any("half a UTF-16 pair" in n for n in odd["notes"])
    assert by_seq[13]["original_subject"] == "a.b" and by_seq[13]["schema_errors"] == [
        {"path": "", "message": "(nested too deep to show)"}]
    assert by_seq[len(BAD_INPUTS) + 1]["original_subject"] == "good.one"


async def _publish_raw_blocks(url: str, messages: list[tuple[str, bytes, bytes]]) -> None:
    """Each (subject, header block, payload) as the NATS protocol's HPUB sends it, byte for byte:
    blocks no client library writes (a line without a colon, a name that is not ASCII)."""
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    await reader.readline()  # INFO
    writer.write(b'CONNECT {"verbose":false,"headers":true,"pedantic":false}\r\n')
    for subject, block, payload in messages:
        writer.write(b"HPUB %s %d %d\r\n%s%s\r\n" % (subject.encode(), len(block), len(block) + len(payload),
                                                      block, payload))
    writer.write(b"PING\r\n")
    await writer.drain()
    while (line := await asyncio.wait_for(reader.readline(), 10)) != b"PONG\r\n":
        assert not line.startswith(b"-ERR"), line
    writer.close()


def test_header_lines_that_cannot_be_read_are_said_on_the_entry_not_dropped_without_a_word(app, nats_server, tokens):
    contract = b"Dlq-Original-Subject: orders.created\r\nDlq-Reason: fatal\r\n"
    blocks = [b"NATS/1.0\r\n" + contract + b"no colon at all\r\nZo\xc3\xab: name\r\nX-Bytes: \xff\r\n\r\n",
              b"NATS/1.0\r\n" + contract + b"\r\n"]
    support.run(_publish_raw_blocks(nats_server.url, [("dlq.raw", block, b"{}") for block in blocks]))
    client = app.test_client()
    entries = support.wait_for(lambda: (lambda e: e if len(e) == 2 else None)(api_entries(client, tokens["viewer"])),
                               message="both messages as entries")
    odd, plain = sorted(entries, key=lambda e: e["dlq_seq"])
    assert (odd["original_subject"], odd["reason"]) == ("orders.created", "fatal")
    assert odd["headers"] == {"Dlq-Original-Subject": ["orders.created"], "Dlq-Reason": ["fatal"],
                              "X-Bytes": ["\ufffd"]}
    assert odd["notes"] == ["Some header lines could not be read as they came (line 3 has no colon ('no colon at "
                            "all'); line 4's name is not ASCII ('Zoë: name'); bytes of values that are not UTF-8 "
                            "are shown as U+FFFD and republished as given); the stream holds the message as it "
                            "came."]
    assert plain["notes"] == [] and plain["headers"] == {"Dlq-Original-Subject": ["orders.created"],
                                                         "Dlq-Reason": ["fatal"]}


def test_a_header_given_more_than_once_keeps_every_value_stored_and_republished(app, nats_server, tokens):
    """nats-py keeps a name's last value; the entry keeps them all (SPEC: headers name -> list of
    values), and the republish sends each again, a line each."""
    support.make_orders_stream(nats_server.url)
    block = (b"NATS/1.0\r\nDlq-Original-Subject: orders.created\r\nDlq-Reason: fatal\r\nX-Multi: a\r\n"
             b"X-Multi: b\r\nx-multi: c\r\nDlq-Reason: again\r\n\r\n")
    support.run(_publish_raw_blocks(nats_server.url, [("dlq.orders.created", block, b'{"order_id": "o-1"}')]))
    client = app.test_client()
    [entry] = support.wait_for(lambda: api_entries(client, tokens["viewer"]) or None, message="the entry")
    assert entry["headers"] == {"Dlq-Original-Subject": ["orders.created"], "Dlq-Reason": ["fatal", "again"],
                                "X-Multi": ["a", "b"], "x-multi": ["c"]}
    assert entry["reason"] == "fatal"  # the first value counts, as for any header, and the entry says so
    assert entry["notes"] == ["Dlq-Reason was given 2 times ('fatal', 'again'): the first, 'fatal', is used."]

    async def republished() -> bytes:
        reader, writer = await asyncio.open_connection(*nats_server.url.removeprefix("nats://").rsplit(":", 1))
        await reader.readline()
        writer.write(b'CONNECT {"verbose":false,"headers":true}\r\nSUB orders.created 1\r\nPING\r\n')
        await writer.drain()
        assert await asyncio.wait_for(reader.readline(), 10) == b"PONG\r\n"
        answer = await asyncio.to_thread(client.post, f"/api/entries/{entry['id']}/republish", json={"version": 1},
                                         headers=support.bearer(tokens["operator"]))
        assert answer.status_code == 200, answer.get_data(as_text=True)
        frame = await asyncio.wait_for(reader.readline(), 10)
        header_size = int(frame.split()[-2])
        got = await asyncio.wait_for(reader.readexactly(header_size), 10)
        writer.close()
        return got

    block_sent = support.run(republished())
    assert b"\r\nX-Multi: a\r\nX-Multi: b\r\nx-multi: c\r\n" in block_sent
    assert b"Dlq-Reason" not in block_sent and b"Nats-Msg-Id: " in block_sent


def test_a_contract_header_given_twice_is_noted_and_two_subjects_are_not_republished(app, nats_server, tokens):
    """SPEC section 4 gives each contract header one value: a message that gives one twice is
    kept with its first value and a note saying so; two different subjects leave where it
    belongs uncertain, so it is not republished (and a note and the refusal say why)."""
    support.make_orders_stream(nats_server.url)
    block = (b"NATS/1.0\r\nDlq-Original-Subject: orders.created\r\nDlq-Deliveries: 3\r\n"
             b"Dlq-Original-Subject: orders.other\r\nDlq-Deliveries: 3\r\n\r\n")
    support.run(_publish_raw_blocks(nats_server.url, [("dlq.orders.created", block, b'{"order_id": "o-1"}')]))
    client = app.test_client()
    [entry] = support.wait_for(lambda: api_entries(client, tokens["viewer"]) or None, message="the entry")
    assert entry["original_subject"] == "orders.created" and entry["deliveries"] == 3
    assert entry["notes"] == [
        "Dlq-Original-Subject was given 2 times ('orders.created', 'orders.other'): the first, 'orders.created', "
        "is used; where to republish it is not certain, so it is not republished.",
        "Dlq-Deliveries was given 2 times, each '3'."]
    answer = client.post(f"/api/entries/{entry['id']}/republish", json={"version": 1},
                         headers=support.bearer(tokens["operator"]))
    assert answer.status_code in (409, 422), answer.get_data(as_text=True)
    assert ("gives Dlq-Original-Subject 2 different values ('orders.created', 'orders.other')"
            in answer.get_data(as_text=True))
    with runtime_of(app).engine.connect() as conn:
        assert conn.execute(select(Entry.status)).scalar_one() == "open"  # nothing was sent


@pytest.mark.slow
def test_ten_thousand_messages_become_ten_thousand_entries(app, nats_server):
    support.run(support.publish_fast(nats_server.url, "dlq.bulk", 10_000,
                     lambda i: (json.dumps({"n": i}).encode(), support.dlq_headers("bulk.x", Dlq_Reason="fatal"))))
    support.wait_for(lambda: entry_count(app) == 10_000, timeout=60, message="10,000 entries")
    with runtime_of(app).engine.connect() as conn:
        distinct = conn.execute(select(func.count(func.distinct(Entry.dlq_seq)))).scalar_one()
    assert distinct == 10_000
    assert read_position(runtime_of(app).engine, "DLQ")[1] == 10_000


def test_a_restarted_mirror_or_a_replay_stores_nothing_twice(app, nats_server, settings):
    from dlq_dashboard.ingest.writes import reset_position
    from dlq_dashboard.runtime import Runtime

    support.run(support.publish_many(nats_server.url, [(f"dlq.r.{i}", b"{}", support.dlq_headers("r.x")) for i in range(20)]))
    support.wait_for(lambda: entry_count(app) == 20, message="20 entries")
    runtime_of(app).stop()
    # Replay the whole stream: the position is rewound as if a crash had lost it.
    epoch, _ = read_position(runtime_of(app).engine, "DLQ")
    second = Runtime.create(settings)
    reset_position(second.engine, "DLQ", epoch)
    second.start()
    try:
        support.wait_for(lambda: second.mirror.progress["DLQ"].last_seq == 20, message="the replay")
        support.run(support.publish_many(nats_server.url, [("dlq.r.new", b"{}", support.dlq_headers("r.x"))]))
        support.wait_for(lambda: entry_count(app) == 21, message="the one new entry")
    finally:
        second.stop()
    assert entry_count(app) == 21


@pytest.mark.slow
def test_nats_server_restart_loses_nothing_and_healthz_shows_the_outage(app, nats_server):
    client = app.test_client()
    assert client.get("/healthz").get_json()["status"] == "ok"
    support.run(support.publish_fast(nats_server.url, "dlq.o", 3000, lambda i: (b"{}", support.dlq_headers("o.x"))))
    support.wait_for(lambda: entry_count(app) > 0, message="ingest to begin")
    nats_server.kill()
    body = support.wait_for(lambda: (lambda r: r.get_json() if r.status_code == 503 and not r.get_json()["nats"]["connected"]
                             else None)(client.get("/healthz")), message="/healthz to report the outage")
    assert body["status"] == "degraded" and body["nats"]["last_error"]
    nats_server.start()
    support.wait_for(lambda: client.get("/healthz").status_code == 200, timeout=30, message="/healthz to recover")
    support.run(support.publish_fast(nats_server.url, "dlq.o", 1000, lambda i: (b"{}", support.dlq_headers("o.x"))))
    support.wait_for(lambda: entry_count(app) == 4000, timeout=60, message="all 4,000 entries")
    # The rows are committed a moment before the mirror hears that they are.
    support.wait_for(lambda: client.get("/healthz").get_json()["mirror_lag"] == 0, message="no lag")


def test_a_recreated_stream_neither_overwrites_old_entries_nor_skips_new_ones(app, nats_server, tokens):
    support.run(support.publish_many(nats_server.url, [(f"dlq.old.{i}", f"old {i}".encode(), support.dlq_headers("old.x")) for i in range(3)]))
    support.wait_for(lambda: entry_count(app) == 3, message="3 old entries")

    async def recreate():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await js.delete_stream("DLQ")
        await js.add_stream(name="DLQ", subjects=["dlq.>"])
        for i in range(5):
            await js.publish(f"dlq.new.{i}", f"new {i}".encode(), headers=support.dlq_headers("new.x"))
        await nc.close()

    support.run(recreate())
    support.wait_for(lambda: entry_count(app) == 8, timeout=30, message="5 new entries beside 3 old ones")
    payloads = sorted(base64.b64decode(e["payload_base64"]).decode()
                      for e in api_entries(app.test_client(), tokens["viewer"]))
    assert payloads == sorted([f"old {i}" for i in range(3)] + [f"new {i}" for i in range(5)])


async def _fail_messages(url: str, stream: str, retention, count: int, *, term: bool):
    """A consumer that naks each message until max_deliver, or terminates it with a reason."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"], retention=retention)
    for i in range(count):
        await js.publish(f"{stream.lower()}.created", json.dumps({"n": i}).encode(), headers={"traceparent": f"t{i}"})
    await js.add_consumer(stream, ConsumerConfig(durable_name="worker", ack_policy=AckPolicy.EXPLICIT,
                                                 max_deliver=3, ack_wait=5))
    sub = await js.pull_subscribe(f"{stream.lower()}.>", durable="worker", stream=stream)
    # Until each message is failed for good: terminated, or its max_deliveries advisory sent (the
    # server sends it at the fetch after the last nak). A fetch after that only waits out its timeout.
    failed: list = []

    async def advised(msg) -> None:
        failed.append(msg)

    if not term:
        await nc.subscribe(f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.worker", cb=advised)
    for _ in range(20):
        if len(failed) >= count:
            break
        try:
            msgs = await sub.fetch(10, timeout=0.5)
        except asyncio.TimeoutError:  # nats.errors.TimeoutError is one too
            continue
        for msg in msgs:
            if term:
                await nc.request(msg.reply, b"+TERM customer does not exist", timeout=2)
                failed.append(msg)
            else:
                await msg.nak()
    await nc.close()


def _entries_of(app, stream):
    with runtime_of(app).engine.connect() as conn:
        return conn.execute(select(Entry.__table__).where(Entry.original_stream == stream)).all()


def test_max_deliveries_advisories_on_a_limits_stream_become_entries_with_their_naks(app, nats_server, tokens):
    support.run(_fail_messages(nats_server.url, "ORDERS", RetentionPolicy.LIMITS, 2, term=False))
    rows = support.wait_for(lambda: (lambda r: r if len(r) == 2 else None)(_entries_of(app, "ORDERS")), timeout=20,
                    message="two max_deliveries entries")
    client = app.test_client()
    for row in rows:
        entry = client.get(f"/api/entries/{row.id}", headers=support.bearer(tokens["viewer"])).get_json()
        assert entry["reason"] == "max_deliveries" and entry["deliveries"] == 3
        assert entry["original_subject"] == "orders.created" and entry["payload_available"] is True
        assert json.loads(entry["payload_text"])["n"] in (0, 1)
        assert entry["headers"]["traceparent"][0].startswith("t")
        naks = [h for h in entry["history"] if h["kind"] == "nak"]
        support.wait_for(lambda: len([h for h in client.get(f"/api/entries/{row.id}", headers=support.bearer(tokens["viewer"]))
                              .get_json()["history"] if h["kind"] == "nak"]) >= 2, message="naks in the history")
        assert all(h["consumer"] == "worker" for h in naks)


def test_terminated_messages_of_a_workqueue_stream_are_entries_without_payload(app, nats_server, tokens):
    support.run(_fail_messages(nats_server.url, "JOBS", RetentionPolicy.WORK_QUEUE, 1, term=True))
    rows = support.wait_for(lambda: _entries_of(app, "JOBS"), timeout=20, message="the terminated entry")
    entry = app.test_client().get(f"/api/entries/{rows[0].id}", headers=support.bearer(tokens["viewer"])).get_json()
    assert entry["reason"] == "terminated" and entry["error"] == "customer does not exist"
    assert entry["payload_available"] is False
    assert any("no longer holds" in n for n in entry["notes"])


def test_an_advisory_the_parse_cannot_read_is_skipped_and_the_advisories_behind_it_arrive(app, nats_server):
    """An advisory-shaped message with a number for its timestamp stopped the advisories' mirror
    for good (TypeError), every real termination behind it waiting."""
    async def hostile():
        nc = await nats.connect(nats_server.url)
        for timestamp in (123, [1]):
            await nc.publish("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.ORDERS.c_x", json.dumps(
                {"id": f"hostile-{timestamp}", "timestamp": timestamp, "stream": "ORDERS", "consumer": "c_x",
                 "stream_seq": 1, "deliveries": 1, "reason": "hostile"}).encode())
        await nc.flush()
        await nc.close()

    support.run(hostile())
    support.run(_fail_messages(nats_server.url, "JOBS", RetentionPolicy.WORK_QUEUE, 1, term=True))
    rows = support.wait_for(lambda: _entries_of(app, "JOBS"), timeout=20, message="the real termination's entry")
    assert len(rows) == 1
    assert runtime_of(app).mirror.progress["DLQ_ADVISORIES"].error is None


def test_a_failure_reported_by_a_dlq_copy_and_an_advisory_is_one_entry(app, nats_server, tokens):
    async def dead_letter_then_terminate():
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        msg = await support.first_delivery(js, "PAY", "pay.captured", "payer", b'{"amount": "ten"}')
        meta = msg.metadata
        await js.publish("dlq.pay.captured", msg.data, headers=support.dlq_headers(
            "pay.captured", Dlq_Original_Stream="PAY", Dlq_Original_Seq=str(meta.sequence.stream),
            Dlq_Consumer="payer", Dlq_Reason="schema_invalid", Dlq_Error="amount is a string"))
        await nc.request(msg.reply, b"+TERM schema_invalid: amount is a string", timeout=2)
        await nc.close()

    support.run(dead_letter_then_terminate())

    def merged():
        rows = _entries_of(app, "PAY")
        return rows if len(rows) == 1 and rows[0].sources == "dlq,advisory" else None

    rows = support.wait_for(merged, timeout=20, message="one entry from both sources")
    entry = app.test_client().get(f"/api/entries/{rows[0].id}", headers=support.bearer(tokens["viewer"])).get_json()
    assert entry["reason"] == "schema_invalid" and entry["dlq_seq"] == 1 and entry["consumer"] == "payer"
    assert entry["sources"] == ["dlq", "advisory"]
    assert [h["kind"] for h in entry["history"]] == ["terminated"]


def test_two_runtimes_on_one_database_mirror_once_and_the_second_takes_over(app, nats_server, settings, monkeypatch):
    from dlq_dashboard.ingest import mirror
    from dlq_dashboard.runtime import Runtime

    # The lease is tried every LEASE_SECONDS / 3 (5 s): a 6-second lease, renewed or tried every
    # 2 s, is taken over sooner after its release and still outlives two missed renewals.
    monkeypatch.setattr(mirror, "LEASE_SECONDS", 6.0)
    first = runtime_of(app)
    second = Runtime.create(settings).start()
    try:
        assert second.bridge.wait_connected(10)
        support.run(support.publish_many(nats_server.url, [(f"dlq.l.{i}", b"{}", support.dlq_headers("l.x")) for i in range(50)]))
        support.wait_for(lambda: entry_count(app) == 50, message="50 entries")
        assert first.mirror.leader and not second.mirror.leader
        first.mirror.close()  # releases the lease, as a clean shutdown does
        first.bridge.stop()
        support.wait_for(lambda: second.mirror.leader, timeout=20, message="the second runtime to take the lease")
        support.run(support.publish_many(nats_server.url, [(f"dlq.l.{i}", b"{}", support.dlq_headers("l.x")) for i in range(50)]))
        support.wait_for(lambda: entry_count(app) == 100, message="100 entries")
    finally:
        second.stop()
    assert entry_count(app) == 100


def test_a_backlog_of_large_payloads_is_mirrored_within_a_byte_budget(app, nats_server, monkeypatch):
    import hashlib

    from dlq_dashboard.ingest import mirror

    # A budget of two payloads: delivery must wait for the writer again and again.
    monkeypatch.setattr(mirror, "QUEUE_BYTES", 8 * 1024 * 1024)
    monkeypatch.setattr(mirror, "BATCH_BYTES", 4 * 1024 * 1024)
    payloads = [bytes([i]) * (4 * 1024 * 1024) for i in range(12)]
    support.run(support.publish_many(nats_server.url, [("dlq.big", p, support.dlq_headers("big.x")) for p in payloads]))
    support.wait_for(lambda: entry_count(app) == 12, timeout=60, message="12 large entries")
    with runtime_of(app).engine.connect() as conn:
        stored = [bytes(r[0]) for r in conn.execute(select(Entry.payload).order_by(Entry.dlq_seq))]
    assert [hashlib.sha256(p).digest() for p in stored] == [hashlib.sha256(p).digest() for p in payloads]


@pytest.mark.slow
def test_a_backlog_far_larger_than_the_budget_is_mirrored_whole_holding_only_the_budget(app, nats_server, monkeypatch):
    """The client must not take in the backlog faster than the writer stores it: nats-py held
    a million-message backlog in memory (1.3 GB) and then dropped messages for good.

    A budget of 400 messages and a backlog of 8,000, twenty times the budget (the proportions of
    the default budget of 8,000 against a 160,000-message backlog); the writer lets 100
    messages through every 0.04 s (2,500 a second), far slower than delivery."""
    import gc

    from nats.aio.msg import Msg

    from dlq_dashboard.ingest import mirror
    from dlq_dashboard.ingest.direct import Received  # a backlog is read by direct gets

    monkeypatch.setattr(mirror, "QUEUE", 400)
    monkeypatch.setattr(mirror, "BATCH", 100)
    send = mirror.Mirror._send

    async def slow_send(self, *args):  # a writer far slower than delivery: 100 messages in 0.04 s
        await asyncio.sleep(0.04)  # batches are sent one after the other: the next waits for this one
        return await send(self, *args)

    monkeypatch.setattr(mirror.Mirror, "_send", slow_send)  # looked up at each write
    total = 8_000
    support.run(support.publish_fast(nats_server.url, "dlq.orders.created", total,
                                     lambda i: (f'{{"n": {i}}}'.encode(), support.dlq_headers())))
    # A look at the heap stops every thread of this process, the mirror's too: one look each
    # time the mirror has stored another twentieth of the backlog (and one at the start).
    samples = []  # (entries stored, messages held in this process)
    step = total // 20
    stored = entry_count(app)
    while stored < total:
        gc.collect()  # held: reachable; messages already let go may wait in a cycle for the collector
        samples.append((stored, sum(1 for o in gc.get_objects() if type(o) in (Msg, Received))))
        assert len(samples) < 200, f"the backlog was not mirrored ({stored} of {total} entries)"
        wanted = min(stored + step, total)
        stored = support.wait_for(lambda: (n := entry_count(app)) >= wanted and n, timeout=30, interval=0.005,
                                  message=f"{wanted} of {total} entries")
    # The budget, the batches being written and what arrives before the server stops.
    peak = max(held for _, held in samples)
    assert peak < 5 * mirror.QUEUE, f"{peak} messages held at once"
    assert len([1 for stored, _ in samples if stored < total / 2]) >= 3  # looked while the backlog was there
    with runtime_of(app).engine.connect() as conn:
        seqs = [r[0] for r in conn.execute(select(Entry.dlq_seq).order_by(Entry.dlq_seq))]
    assert seqs == list(range(1, total + 1))
