"""The dashboard's reading of header blocks gives what nats-py's gives, for any block, and its
NATS connections use it."""

from __future__ import annotations

import json

import nats
from hypothesis import example, given
from hypothesis import strategies as st
from nats.aio.client import Client as NatsClient

from dlq_dashboard.nats import headers
from dlq_dashboard.nats.bridge import Bridge
from dlq_dashboard.surrogates import shown

from . import support

# Pieces a block is made of: names and values, every kind of blank and line end on its own,
# control and non-ASCII characters, and bytes that are not UTF-8.
PIECES = [b"Dlq-Reason", b"a", b"Z-9", b":", b": ", b" ", b"\t", b"\x0b", b"\x0c", b"\x1c", b"\x1f", b"\x00",
          b"\x7f", b"\r\n", b"\r", b"\n", "é".encode(), "\u00a0".encode(), "\u2028".encode(), "\u3000".encode(),
          b"\xff", b"\xc3", b"{\"path\": \"/items/0\"}"]
blocks = st.lists(st.sampled_from(PIECES), max_size=40).map(b"".join)


@given(blocks)
@example(b"Dlq-Reason: fatal\r\nDlq-Error:  two  spaces \r\n\r\n")
@example(b"A: 1\r\nA: 2\r\n")  # the last value counts, at the first one's place
@example(b": no name\r\nno colon\r\nin side: x\r\n \tpadded\t : y\r\n")
@example(b"caf\xc3\xa9: name not ASCII\r\nv: caf\xc3\xa9\r\nbad: \xff\r\n")
@example(b"lone: cr\rx: y\r\nlone: lf\nz: w\r\n")
@example(b"sep\x1c: x\r\nnul\x00: y\r\n")
def test_any_block_reads_as_nats_py_reads_it_and_what_it_leaves_out_is_said(block):
    ours = headers.parse_header_lines(block)
    unread, more = ours.pop(headers.UNREAD, None), ours.pop(headers.MORE, None)
    # Shown as nats-py reads it; a value's bytes that are not UTF-8 kept as they came.
    assert {name: shown(value) for name, value in ours.items()} == NatsClient._parse_header_lines(block)
    assert {name: value.encode("utf-8", "surrogateescape") for name, value in ours.items()} == {
        name: _last_raw(block, name) for name in ours}
    # Every value of a name given more than once, in order: what nats-py reads of each line alone.
    values: dict[str, list[str]] = {}
    for line in block.split(b"\r\n"):
        for name, value in NatsClient._parse_header_lines(line).items():
            values.setdefault(name, []).append(value)
    assert ({name: [shown(v) for v in found] for name, found in json.loads(more).items()} if more else {}) == {
        name: found for name, found in values.items() if len(found) > 1}
    # What nats-py leaves out: each line it reads as no header on its own; what it changes: a
    # value it kept that is not UTF-8. Each is said, and nothing when there is neither.
    lines = [line for line in block.split(b"\r\n") if line]
    # Left out, or kept under no name (which no client can publish again).
    left_out = [line for line in lines if "" in NatsClient._parse_header_lines(line) or
                not NatsClient._parse_header_lines(line)]
    changed = any(not _utf8(line.partition(b":")[2]) for line in lines if NatsClient._parse_header_lines(line))
    said = unread.split("; ") if unread else []
    assert len(said) == len(left_out) + changed, (said, left_out, changed)
    assert (headers.NOT_UTF8 in said) == changed


def _last_raw(block: bytes, name: str) -> bytes:
    """The bytes of the last value of ``name`` in ``block``, by nats-py's rules for a line."""
    found = [line.partition(b":")[2].strip() for line in block.split(b"\r\n")
             if line.partition(b":")[1] and line.partition(b":")[0].strip() == name.encode()]
    return found[-1]


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_a_name_given_more_than_once_keeps_every_value_and_goes_out_a_line_each():
    block = b"A: 1\r\nX-Multi: a\r\nX-Multi: b\r\nx-multi: c\r\n"
    assert headers.parse_header_lines(block) == {"A": "1", "X-Multi": "b", "x-multi": "c",
                                                 headers.MORE: '{"X-Multi": ["a", "b"]}'}
    sent = headers.outgoing({"X-Multi": ["a", "b"], "A": "1"})
    assert list(sent.items()) == [("X-Multi", "a"), ("X-Multi", "b"), ("A", "1")]
    assert type(headers.outgoing({"A": "1"})) is dict


def test_a_block_off_the_usual_form_says_which_lines_were_not_read():
    block = b"A: 1\r\ngarbage line\r\nZo\xc3\xab: x\r\nBad Name: y\r\nC: \xff\r\n" + b"x" * 200 + b"\r\n"
    assert headers.parse_header_lines(block) == {"A": "1", "C": "\udcff", headers.UNREAD: (
        "line 2 has no colon ('garbage line'); line 3's name is not ASCII ('Zoë: x'); line 4's name holds a "
        f"blank ('Bad Name: y'); line 6 has no colon ('{'x' * 80}'…); bytes of values that are not UTF-8 are "
        "shown as U+FFFD and republished as given")}
    assert headers.UNREAD not in headers.parse_header_lines(b"A: 1\r\nB:2\r\n C :\t3 \r\n")
    assert headers.parse_header_lines(b"A: 1\r\n: no name\r\n") == {"A": "1", "": "no name", headers.UNREAD: (
        "line 2 has no name (': no name'): kept here, but a republish cannot send it")}


def test_the_bridge_and_a_real_server_deliver_the_headers_nats_py_delivers(nats_server, settings):
    sent = {"Dlq-Original-Subject": "orders.created", "Dlq-Error": "  spaced  ", "Dlq-Note": "café ✓",
            "X-Empty": "", "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}

    async def receive_with(connect) -> dict:
        nc = await connect(servers=[nats_server.url])
        sub = await nc.subscribe("probe")
        publisher = await nats.connect(nats_server.url)
        await publisher.publish("probe", b"{}", headers=sent)
        await publisher.flush()
        msg = await sub.next_msg(timeout=5)
        await publisher.close()
        await nc.close()
        return msg.headers

    ours, theirs = support.run(receive_with(headers.connect)), support.run(receive_with(nats.connect))
    assert ours == theirs == {**sent, "Dlq-Error": "spaced"}
    bridge = Bridge(settings, [nats_server.url]).start()
    try:
        support.wait_for(lambda: bridge.state.connected, message="the bridge to connect")
        assert isinstance(bridge.nc, headers.Client)
    finally:
        bridge.stop()
