"""Reading a message's header block, with nats-py's result in less than half its time.

nats-py parses every message's header block line by line (partition, strip, an ASCII decode
and a whitespace test a line): for the mirror's messages, with ten or more headers each, that
was about half of what receiving a message costs. Here a block is decoded once and, when every
character of it is printable (so the only blank is the space, and every line ends in CR LF),
each line is split without further tests. Any other block (bytes that are not UTF-8, tabs,
control characters, a lone CR or LF) is handed to nats-py's own parser. tests/test_headers.py
checks on generated blocks that both give the same dict.

A message read back by sequence (STREAM.MSG.GET) carries its block base64-encoded in the JSON
answer; nats-py's ``js.get_msg`` reads that block with ``email.parser``, which takes the bytes
as ASCII and turns each byte of a non-ASCII value into U+FFFD (``Zoë 😀`` came back as
``Zo�� ����``). :func:`parse_header_block` reads it with :func:`parse_header_lines` instead, so a
message read back has the headers a live delivery of it has, byte for byte.

What nats-py's reading leaves out or changes without a word (a line without a colon, a name that
is not ASCII or holds a blank, bytes that are not UTF-8) is said under the name :data:`UNREAD`,
which no header can have (a name holds no blank): the mirror turns it into a note on the entry
(ingest/parse.py). nats-py reads a value's bytes that are not UTF-8 as U+FFFD; here each is kept
as ``surrogateescape`` keeps it (one of U+DC80..U+DCFF), which the entry shows as U+FFFD and a
republish sends as the byte it was (surrogates.py, :func:`outgoing`). A name given more than once
keeps its last value, as nats-py gives it, and all of its values under :data:`MORE` (JSON), which
the mirror keeps and a republish sends again (:func:`outgoing`). Only blocks off the usual form
are looked at for either.
"""

from __future__ import annotations

import json
import re
from itertools import repeat
from typing import Callable, Iterator, Mapping

from nats.aio.client import Client as NatsClient


#: The name under which a block's lines that were not read as they came are described.
UNREAD = " unread"
#: The name under which every value of a name given more than once is kept (JSON: name -> values).
MORE = " more"
#: What UNREAD says of values with bytes that are not UTF-8.
NOT_UTF8 = "bytes of values that are not UTF-8 are shown as U+FFFD and republished as given"
#: The most of a line that is not read that its description quotes.
QUOTED = 80


def parse_header_lines(raw: bytes) -> dict[str, str]:
    """The headers of a block (the lines after ``NATS/1.0``), as nats-py's parser gives them;
    with what it left out or changed under :data:`UNREAD`."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:  # nats-py's values, those with bytes that are not UTF-8 as they came
        return _noting(NatsClient._parse_header_lines(raw), raw)
    lines = text.split("\r\n")
    if not "".join(lines).isprintable():
        return _noting(NatsClient._parse_header_lines(raw), raw)
    # The usual block ("Name: value" lines, names without blanks or colons, values not padded)
    # is split by C-level calls alone; the checks on the whole text and on the names joined say
    # that reading it line by line below would give the same.
    if ":  " not in text and " \r\n" not in text and not text.endswith(" "):
        pairs = list(map(str.split, filter(None, lines), _SEPARATOR, _ONCE))
        if pairs and min(map(len, pairs)) == 2:
            headers = dict(pairs)
            names = "".join(headers)
            if (names.isascii() and " " not in names and ":" not in names and len(headers) == len(pairs)
                    and "" not in headers):
                return headers
    headers = {}
    for name, colon, value in map(str.partition, lines, [":"] * len(lines)):
        if colon:
            name = name.strip(" ")
            # nats-py skips a name that is not ASCII or has whitespace inside (here: a space).
            if name.isascii() and " " not in name:
                headers[name] = value.strip(" ")
    return _noting(headers, raw)


def _noting(headers: dict[str, str], raw: bytes) -> dict[str, str]:
    """``headers`` with what reading ``raw`` left out or changed said under UNREAD (nothing
    added when every line was read as it came), and every value of a name given more than once
    under MORE. The rules are nats-py's ``_parse_header_lines``'; a value's bytes that are not
    UTF-8 are kept with ``surrogateescape`` (nats-py's U+FFFD is how they are shown)."""
    said, replaced, values = [], False, {}
    for number, line in enumerate(raw.split(b"\r\n"), start=1):
        if not line:
            continue
        name, colon, value = line.partition(b":")
        shown = repr(line[:QUOTED].decode(errors="replace")) + ("…" if len(line) > QUOTED else "")
        if not colon:
            said.append(f"line {number} has no colon ({shown})")
        elif not name.strip().isascii():
            said.append(f"line {number}'s name is not ASCII ({shown})")
        elif any(c.isspace() for c in name.strip().decode()):
            said.append(f"line {number}'s name holds a blank ({shown})")
        else:
            if not name.strip():  # kept as nats-py keeps it, under "", which no client publishes
                said.append(f"line {number} has no name ({shown}): kept here, but a republish cannot send it")
            values.setdefault(name.strip().decode(), []).append(value.strip().decode("utf-8", "surrogateescape"))
            if not replaced:
                try:
                    value.decode()
                except UnicodeDecodeError:
                    replaced = True
    if replaced:  # each name's last value, as nats-py keeps it, with those bytes as they came
        headers.update((name, found[-1]) for name, found in values.items())
        said.append(NOT_UTF8)
    if said:
        headers[UNREAD] = "; ".join(said)
    repeated = {name: found for name, found in values.items() if len(found) > 1}
    if repeated:
        headers[MORE] = json.dumps(repeated, ensure_ascii=False)
    return headers


class _Repeated(dict):
    """Headers whose ``items()`` gives a name once a value: nats-py writes a block line by line
    from ``items()``, so a name with several values goes out on several lines."""

    def items(self) -> Iterator[tuple[str, str]]:  # type: ignore[override]
        for name, value in super().items():
            if isinstance(value, list):
                yield from ((name, one) for one in value)
            else:
                yield name, value


class _Bytes(str):
    """A value holding bytes that are not UTF-8 as ``surrogateescape`` reads them: nats-py writes a
    value as ``value.strip().translate(...).encode()``, and this one's encode gives those bytes back."""

    __slots__ = ()

    def strip(self, chars: str | None = None) -> "_Bytes":
        return _Bytes(str.strip(self, chars))

    def translate(self, table) -> "_Bytes":
        return _Bytes(str.translate(self, table))

    def encode(self, encoding: str = "utf-8", errors: str = "surrogateescape") -> bytes:
        return str.encode(self, encoding, errors)


def _sent(value: str) -> str:
    return value if value.isascii() or not _ESCAPED.search(value) else _Bytes(value)


def outgoing(headers: Mapping[str, str | list[str]]) -> dict:
    """Headers to publish with nats-py: a name with a list of values is sent once a value; a
    value's bytes that are not UTF-8 (kept as U+DC80..U+DCFF) as they came."""
    if any(isinstance(value, list) or not value.isascii() for value in headers.values()):
        headers = {name: [_sent(one) for one in value] if isinstance(value, list) else _sent(value)
                   for name, value in headers.items()}
        if any(isinstance(value, list) for value in headers.values()):
            return _Repeated(headers)
    return dict(headers)


_ESCAPED = re.compile("[\udc80-\udcff]")


_SEPARATOR, _ONCE = repeat(": "), repeat(1)


def parse_header_block(block: bytes) -> dict[str, str] | None:
    """The headers of a whole block as a stored message holds it (``NATS/1.0`` line first), as a
    live delivery of that message reads them; None when it has none."""
    _, crlf, lines = block.partition(b"\r\n")
    headers = parse_header_lines(lines) if crlf else {}
    return headers or None


class Client(NatsClient):
    """nats-py's client, reading header blocks with :func:`parse_header_lines`, and handing the
    frames of a raw subscription (:meth:`raw_subscribe`) over as bytes, without message objects."""

    _parse_header_lines = staticmethod(parse_header_lines)

    def __init__(self):
        super().__init__()
        self._raw_handlers: dict[int, Callable[[bytes, bytes, bytes], None]] = {}

    async def raw_subscribe(self, subject: str, handler: Callable[[bytes, bytes, bytes], None]):
        """Subscribe to ``subject`` and call ``handler(subject, header block, payload)`` for each
        message as the protocol parser reads it: no header parsing, no ``Msg``, no queue and no
        task switch (a batched direct get's thousands of answers, ingest/direct.py). The handler
        runs on the client's loop and must not block. Returns the subscription; unsubscribing it
        ends the handler."""
        sub = await self.subscribe(subject)
        self._raw_handlers[sub._id] = handler
        unsubscribe = sub.unsubscribe

        async def unsubscribe_raw(limit: int = 0) -> None:
            self._raw_handlers.pop(sub._id, None)
            await unsubscribe(limit)

        sub.unsubscribe = unsubscribe_raw
        return sub

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        handler = self._raw_handlers.get(sid)
        if handler is None:
            return await super()._process_msg(sid, subject, reply, data, headers)
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        handler(subject, headers, data)


async def connect(**options) -> Client:
    """``nats.connect`` with the faster header reading."""
    client = Client()
    await client.connect(**options)
    return client
