"""What a row of the list shows of an entry's payload: a one-line snippet of its start."""

from __future__ import annotations

from ...entries.view import EntryView

#: Characters of the payload a row shows.
SNIPPET_CHARS = 80


def snippet(entry: EntryView, size: int = SNIPPET_CHARS) -> str:
    """The payload's start as one line of text (whitespace runs as one space, cut at ``size``
    characters with an ellipsis); 'binary, N bytes' when it is not UTF-8, '—' when there is none.

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
        return f"binary, {whole:,} bytes"
    line = " ".join(text.split())
    if len(line) > size:
        return line[:size - 1].rstrip() + "…"
    return line + ("…" if cut else "")
