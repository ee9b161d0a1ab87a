"""Header values that are not ASCII, and bytes that are not UTF-8, are kept byte for byte: on a live
DLQ copy, on a message the advisory path reads back by sequence, and in the republish of either,
against a real nats-server."""

from __future__ import annotations

import base64
import json
import socket
import time
from urllib.parse import urlsplit

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy
from sqlalchemy import select

from dlq_dashboard.db.models import Entry
from dlq_dashboard.nats.headers import UNREAD, parse_header_block, parse_header_lines
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases

NAME = "Zoë 😀"
NAME_BYTES = b"Zo\xc3\xab \xf0\x9f\x98\x80"  # what nats-py sends for NAME: UTF-8


class RawSubscriber:
    """A subscriber that speaks the NATS protocol on a plain socket, so what it receives is the
    bytes the server sent, not a client's reading of them."""

    def __init__(self, url: str, subject: str):
        address = urlsplit(url)
        self.sock = socket.create_connection((address.hostname, address.port), timeout=10)
        self.buffer = b""
        self._line()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}\r\n'
                          + f"SUB {subject} 1\r\nPING\r\n".encode())
        while self._line() != b"PONG":
            pass

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            self._read()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _read(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise AssertionError("the server closed the connection")
        self.buffer += chunk

    def next_header_block(self, timeout: float = 10.0) -> bytes:
        """The header block of the next message (HMSG), as the server sent it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self._line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
                continue
            if line.startswith(b"HMSG "):
                header_size, total_size = (int(n) for n in line.split()[-2:])
                while len(self.buffer) < total_size + 2:
                    self._read()
                block, self.buffer = self.buffer[:header_size], self.buffer[total_size + 2:]
                return block
        raise AssertionError(f"no message within {timeout} s")

    def close(self) -> None:
        self.sock.close()


def value_bytes(block: bytes, name: bytes) -> list[bytes]:
    """The raw values of header ``name`` in a header block."""
    return [line.split(b":", 1)[1].strip(b" ") for line in block.split(b"\r\n")[1:]
            if line.split(b":", 1)[0] == name]


async def terminate_one_and_dead_letter_the_other(url: str) -> None:
    """Two messages with a non-ASCII header on stream CUST: the first terminated (the advisory
    path captures it), a copy of the second dead-lettered to the DLQ stream and it acknowledged."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="CUST", subjects=["cust.>"], retention=RetentionPolicy.LIMITS)
    for n in (1, 2):
        await js.publish("cust.created", json.dumps({"n": n}).encode(), headers={"X-Customer-Name": NAME})
    await js.add_consumer("CUST", ConsumerConfig(durable_name="signup", ack_policy=AckPolicy.EXPLICIT))
    sub = await js.pull_subscribe("cust.>", durable="signup", stream="CUST")
    first, second = await sub.fetch(2, timeout=5)
    await nc.request(first.reply, b"+TERM customer name refused", timeout=2)
    await js.publish("dlq.cust.created", second.data, headers={
        "X-Customer-Name": NAME, **support.dlq_headers(
            "cust.created", Dlq_Original_Stream="CUST", Dlq_Original_Seq=str(second.metadata.sequence.stream),
            Dlq_Consumer="signup", Dlq_Reason="fatal", Dlq_Error="customer name refused")})
    await second.ack_sync()
    await nc.close()


def test_a_non_ascii_header_value_is_stored_and_republished_byte_for_byte_on_both_paths(app, nats_server, tokens):
    engine = runtime_of(app).engine
    support.run(terminate_one_and_dead_letter_the_other(nats_server.url))

    def both_entries():
        with engine.connect() as conn:
            rows = conn.execute(select(Entry.id, Entry.sources, Entry.headers, Entry.version)
                                .where(Entry.original_stream == "CUST").order_by(Entry.original_seq)).all()
        return rows if len(rows) == 2 else None

    advisory, copy = support.wait_for(both_entries, timeout=20, message="an advisory entry and a DLQ entry")
    assert (advisory.sources, copy.sources) == ("advisory", "dlq")
    for row in (advisory, copy):
        [stored] = json.loads(row.headers)["X-Customer-Name"]
        assert stored.encode("utf-8") == NAME_BYTES, (row.sources, stored)

    subscriber = RawSubscriber(nats_server.url, "cust.created")
    try:
        client = app.test_client()
        for row in (advisory, copy):
            response = client.post(f"/api/entries/{row.id}/republish", json={"version": row.version},
                                   headers=support.bearer(tokens["operator"]))
            assert response.status_code == 200, response.get_json()
            block = subscriber.next_header_block()
            assert value_bytes(block, b"X-Customer-Name") == [NAME_BYTES], (row.sources, block)
    finally:
        subscriber.close()


def publish_raw(url: str, subject: str, block: bytes, payload: bytes) -> None:
    """One message as the NATS protocol's HPUB sends it, its header block byte for byte (bytes that
    are not UTF-8, which no client library writes)."""
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
        sock.recv(65536)  # INFO
        sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"protocol":1}\r\n'
                     + b"HPUB %s %d %d\r\n%s%s\r\nPING\r\n" % (subject.encode(), len(block), len(block) + len(payload),
                                                               block, payload))
        answer = b""
        while b"PONG\r\n" not in answer:
            chunk = sock.recv(65536)
            assert chunk and b"-ERR" not in chunk, answer + chunk
            answer += chunk


def stored_header_block(url: str, stream: str, seq: int) -> bytes:
    """The header block stream ``stream`` stores for ``seq``, as STREAM.MSG.GET answers it (base64)."""
    async def get() -> bytes:
        nc = await nats.connect(url)
        try:
            reply = await nc.request(f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps({"seq": seq}).encode(), timeout=5)
        finally:
            await nc.close()
        return base64.b64decode(json.loads(reply.data)["message"]["hdrs"])
    return support.run(get())


BAD = b"\x80\x81"  # two bytes that are not UTF-8 (continuation bytes with no lead)
NOTE = ("Some header lines could not be read as they came (bytes of values that are not UTF-8 are shown as U+FFFD "
        "and republished as given); the stream holds the message as it came.")


def test_header_bytes_that_are_not_utf8_are_shown_as_u_fffd_and_republished_as_they_came(app, nats_server, tokens):
    """SPEC section 4: all other headers are carried unchanged. nats-py reads such bytes as U+FFFD,
    and a republish sent U+FFFD's three bytes for each in their place."""
    support.make_orders_stream(nats_server.url)
    block = (b"NATS/1.0\r\nDlq-Original-Subject: orders.raw\r\nDlq-Reason: fatal\r\nX-Bin: " + BAD
             + b"\r\nX-Text: a\\udc80 \xc3\xa9\r\n\r\n")
    publish_raw(nats_server.url, "dlq.orders.raw", block, b'{"n": 1}')
    client, operator = app.test_client(), support.bearer(tokens["operator"])
    entry = support.wait_for(lambda: next(iter(client.get("/api/entries", headers=operator).get_json()["entries"]), None),
                             message="the entry")
    # Shown as before: each run of bytes that are not UTF-8 as U+FFFD, said in a note.
    assert entry["headers"] == {"Dlq-Original-Subject": ["orders.raw"], "Dlq-Reason": ["fatal"],
                                "X-Bin": ["\ufffd\ufffd"], "X-Text": ["a\\udc80 é"]}
    assert entry["notes"] == [NOTE]
    with runtime_of(app).engine.connect() as conn:  # kept as their escapes, a backslash as JSON's
        stored = conn.execute(select(Entry.headers).where(Entry.id == entry["id"])).scalar_one()
    assert '"X-Bin":["\\udc80\\udc81"]' in stored and '"X-Text":["a\\\\udc80 é"]' in stored, stored

    published = []
    for body in ({"version": entry["version"]},
                 {"version": entry["version"] + 1, "payload_base64": base64.b64encode(b'{"n": 2}').decode()}):
        response = client.post(f"/api/entries/{entry['id']}/republish", json=body, headers=operator)
        assert response.status_code == 200, response.get_json()
        published.append(response.get_json()["publish"])
    for publish in published:  # the target stream stores the bytes as they came
        sent = stored_header_block(nats_server.url, publish["stream"], publish["seq"])
        assert value_bytes(sent, b"X-Bin") == [BAD] and value_bytes(sent, b"X-Text") == [b"a\\udc80 \xc3\xa9"], sent

    # Every reader still shows U+FFFD, and answers: the entry (with its republishes), an export, the page.
    viewer, page = support.bearer(tokens["viewer"]), support.logged_in(app, "viewer")
    answers = {}
    for name, asked in (("api", lambda: client.get(f"/api/entries/{entry['id']}", headers=viewer)),
                        *((fmt, lambda fmt=fmt: client.get(f"/api/export.{fmt}", headers=viewer))
                          for fmt in ("json", "ndjson", "csv")),
                        ("page", lambda: page.get(f"/entries/{entry['id']}"))):
        response = asked()  # an export streams: read whole before the next request
        answers[name] = response.get_data(as_text=True)
        assert response.status_code == 200 and "udc81" not in answers[name].lower(), (name, answers[name])
    exported = [json.loads(answers["api"]), json.loads(answers["json"])[0], json.loads(answers["ndjson"].splitlines()[0])]
    assert [e["headers"]["X-Bin"] for e in exported] == [["\ufffd\ufffd"]] * 3
    assert "\ufffd\ufffd" in answers["csv"] and "\ufffd\ufffd" in answers["page"]


async def terminate_the_first(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_consumer("CUST", ConsumerConfig(durable_name="signup", ack_policy=AckPolicy.EXPLICIT))
    sub = await js.pull_subscribe("cust.>", durable="signup", stream="CUST")
    [first] = await sub.fetch(1, timeout=5)
    await nc.request(first.reply, b"+TERM refused", timeout=2)
    await nc.close()


def test_header_bytes_that_are_not_utf8_of_an_advisory_entry_are_republished_as_they_came(app, nats_server, tokens):
    """The advisory path reads the message back by sequence (nats/streams.py): the same bytes."""
    support.make_stream(nats_server.url, "CUST", ["cust.>"])
    publish_raw(nats_server.url, "cust.created", b"NATS/1.0\r\nX-Bin: " + BAD + b"\r\n\r\n", b'{"n": 1}')
    support.run(terminate_the_first(nats_server.url))
    client, operator = app.test_client(), support.bearer(tokens["operator"])
    entry = support.wait_for(lambda: next(iter(client.get("/api/entries", headers=operator).get_json()["entries"]), None),
                             timeout=20, message="the advisory's entry")
    assert (entry["sources"], entry["headers"], entry["notes"]) == (["advisory"], {"X-Bin": ["\ufffd\ufffd"]}, [NOTE])
    response = client.post(f"/api/entries/{entry['id']}/republish", json={"version": entry["version"]},
                           headers=operator)
    assert response.status_code == 200, response.get_json()
    publish = response.get_json()["publish"]
    assert value_bytes(stored_header_block(nats_server.url, publish["stream"], publish["seq"]), b"X-Bin") == [BAD]


def test_a_stored_header_block_reads_as_a_live_delivery_of_it_reads():
    lines = b"X-Customer-Name: " + NAME_BYTES + b"\r\nbad: \xff\r\nDlq-Reason: fatal\r\n\r\n"
    assert parse_header_block(b"NATS/1.0\r\n" + lines) == parse_header_lines(lines) == {
        "X-Customer-Name": NAME, "bad": "\udcff", "Dlq-Reason": "fatal",
        UNREAD: "bytes of values that are not UTF-8 are shown as U+FFFD and republished as given"}
    assert parse_header_block(b"NATS/1.0\r\n\r\n") is None
    assert parse_header_block(b"") is None
