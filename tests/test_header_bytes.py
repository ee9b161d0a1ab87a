"""Header values that are not ASCII are kept byte for byte: on a live DLQ copy, on a message the
advisory path reads back by sequence, and in the republish of either, against a real nats-server."""

from __future__ import annotations

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


def test_a_stored_header_block_reads_as_a_live_delivery_of_it_reads():
    lines = b"X-Customer-Name: " + NAME_BYTES + b"\r\nbad: \xff\r\nDlq-Reason: fatal\r\n\r\n"
    assert parse_header_block(b"NATS/1.0\r\n" + lines) == parse_header_lines(lines) == {
        "X-Customer-Name": NAME, "bad": "\ufffd", "Dlq-Reason": "fatal",
        UNREAD: "bytes of values that are not UTF-8 were read as U+FFFD"}
    assert parse_header_block(b"NATS/1.0\r\n\r\n") is None
    assert parse_header_block(b"") is None
