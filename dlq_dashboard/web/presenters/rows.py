"""What a row of the list shows: its columns, and of an entry's payload a one-line snippet of its
start."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ...entries.fields import KeyField
from ...entries.sources import reaches
from ...entries.view import EntryView
from ...scopes import Scope
from ...unpacking import GZIP_MAGIC

#: Characters of the payload a row shows.
SNIPPET_CHARS = 80


def snippet(entry: EntryView, size: int = SNIPPET_CHARS) -> str:
    """The payload's start as one line of text (whitespace runs as one space, cut at ``size``
    characters with an ellipsis); 'binary, N bytes' when it is not UTF-8 ('gzip, N bytes' for gzip's
    bytes), '—' when there is none.

    The entry may hold only the payload's start (``payload_size`` is then the whole size): a
    character cut through at its end is dropped, not taken for binary."""
    if entry.payload_hidden:
        return "hidden"
    whole = entry.payload_size if entry.payload_size is not None else len(entry.payload)
    if not entry.payload_available or not whole:
        return "—"
    data = entry.payload
    cut = whole > len(data)
    text = None
    for drop in range(4 if cut else 1):  # a UTF-8 character is at most 4 bytes
        try:
            text = data[:len(data) - drop].decode("utf-8")
            break
        except UnicodeDecodeError:
            continue
    if text is None:
        # gzip's magic bytes: what its page shows decompressed (the row reads only the start).
        return f"{'gzip' if data[:2] == GZIP_MAGIC else 'binary'}, {whole:,} bytes"
    line = " ".join(text.split())
    if len(line) > size:
        return line[:size - 1].rstrip() + "…"
    return line + ("…" if cut else "")


@dataclass(frozen=True)
class Column:
    """A column of the list's table, as its header shows it."""

    label: str
    css: str = ""
    title: str = ""
    selects: bool = False  # the checkbox column, which selects every row of the page


def shown_sources(rt, scopes: tuple[Scope, ...] | None = None) -> tuple[str, ...]:
    """The sources the pages name (SPEC section 12): those of the runtime's a reader of ``scopes``
    reaches (None: every one), in DLQ_CONFIG's order, when there are several or DLQ_CONFIG names
    them; none with the one default source, so the pages look as they did before sources (no
    Source column, no Source select). A source no scope reaches is not even named."""
    names = tuple(rt.feeds)
    if len(names) <= 1 and not rt.settings.sources:
        return ()
    return tuple(name for name in names if reaches(scopes, name))


def list_columns(fields: Iterable[KeyField], can_act: bool, sources: bool = False) -> tuple[Column, ...]:
    """The list's columns in their order: the checkbox for those who can act on the rows (the bulk
    bar is theirs alone), the entry's facts (its source with several: ``sources``), its key fields
    (settings.list_fields), then the payload, and for them the row's actions (Republish, Close:
    templates/_row_actions.html). A cell across the whole table spans as many as there are."""
    facts = (Column("#"), Column("Status")) + ((Column("Source", css="source"),) if sources else ()) + (
        Column("Subject"), Column("Consumer", css="consumer"), Column("Original msgId", css="msg-id"),
        Column("Reason"), Column("Error"))
    return ((Column("", selects=True),) if can_act else ()) + facts + tuple(
        Column(f.label, css="key-field", title=f.pointer) for f in fields) + (
        Column("Payload", css="snippet"), Column("Deliveries", css="num"), Column("Failed")) + (
        (Column("Actions", css="row-actions"),) if can_act else ())
