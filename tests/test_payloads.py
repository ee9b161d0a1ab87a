"""How a payload is shown: pretty JSON with marked fields, text, hex dump, truncation."""

from __future__ import annotations

import gzip
import json
import zlib

from dlq_dashboard.web.presenters.payloads import (DIFF_LIMIT, HEX_LIMIT, TEXT_LIMIT, editable, hex_dump, line_diff,
                                                   mark_indexes, pretty_json, same_document, view_payload)

ORDER = {"order_id": "o-1", "items": [{"sku": "x", "price": "12.50"}], "note": {"a/b": 1}}


def marked(view) -> dict[int, str]:
    found: dict[int, str] = {}
    for seg in view.segments:
        if seg.mark is not None:
            found[seg.mark] = found.get(seg.mark, "") + seg.text
    return found


def test_json_is_laid_out_like_json_dumps_with_an_indent_of_two():
    view = view_payload(json.dumps(ORDER).encode())
    assert view.kind == "json" and "".join(s.text for s in view.segments) == json.dumps(ORDER, indent=2)


def test_the_field_at_each_pointer_is_marked_with_its_key_and_value():
    view = view_payload(json.dumps(ORDER).encode(), pointers=["/items/0/price", "/note/a~1b"])
    assert marked(view) == {0: '"price": "12.50"', 1: '"a/b": 1'}
    assert view.found == {"/items/0/price", "/note/a~1b"}
    assert [s.anchor for s in view.segments if s.mark is not None] == [True, True]


def test_a_marked_container_is_marked_whole_and_a_missing_pointer_is_not_found():
    view = view_payload(json.dumps(ORDER).encode(), pointers=["/items", "/customer"])
    assert marked(view)[0].startswith('"items": [') and marked(view)[0].endswith("]")
    assert view.found == {"/items"}
    assert mark_indexes(["", "/a", "/a", "/b"]) == {"/a": 0, "/b": 1}


def test_text_that_is_not_json_is_shown_as_text():
    view = view_payload(b"plain <b>text</b>")
    assert view.kind == "text" and view.text == "plain <b>text</b>" and view.note == "The payload is not JSON."


def test_bytes_that_are_not_utf8_are_a_hex_dump_of_the_first_kilobytes():
    view = view_payload(b"\xff" * (HEX_LIMIT + 1))
    assert view.kind == "hex" and view.truncated and len(view.hex_lines) == HEX_LIMIT // 16
    assert hex_dump(b"ABCDEFGHIJKLMNOPQ\x00") == [
        ("00000000", "41 42 43 44 45 46 47 48  49 4a 4b 4c 4d 4e 4f 50", "ABCDEFGHIJKLMNOP"),
        ("00000010", "51 00", "Q.")]


def test_a_large_payload_shows_its_start_only():
    view = view_payload(b'"' + b"x" * TEXT_LIMIT + b'"')
    assert view.kind == "text" and view.truncated and len(view.text) == TEXT_LIMIT


def test_a_missing_payload_says_so():
    assert view_payload(b"", available=False).kind == "missing"


def test_the_editors_pretty_form_keeps_key_order_and_numbers_as_written():
    assert pretty_json('{"b":1.50,"a":[1e400,-0,{}],"é":"<x>"}') == (
        '{\n  "b": 1.50,\n  "a": [\n    1e400,\n    -0,\n    {}\n  ],\n  "é": "<x>"\n}')
    assert pretty_json("not {json") is None
    assert pretty_json('{"a": 1, "a": 2}') is None  # laid out again, the first "a" would be lost
    assert editable(b'{"a":1}') == ('{\n  "a": 1\n}', "text")
    assert editable(b"plain text") == ("plain text", "text")
    assert editable(b"\xff\x00") == ("/wA=", "base64")


def test_an_edit_that_only_lays_the_document_out_again_is_the_same_document():
    assert same_document(b'{"a":1,"b":[2]}', b'{\n  "a": 1,\n  "b": [\n    2\n  ]\n}')
    assert not same_document(b'{"a":1,"b":2}', b'{"b":2,"a":1}')  # another key order is another document
    assert not same_document(b'{"a":1.50}', b'{"a":1.5}')  # a number written otherwise is an edit
    assert same_document(b"text", b"text") and not same_document(b"text", b"text ")
    assert not same_document(b'{"a":1,"a":2}', b'{"a":2}')


def test_a_line_diff_compares_the_pretty_forms_and_gives_up_on_huge_payloads():
    before = b'{"order_id":"o-1","price":"12.50","note":"' + b"n" * 400 + b'"}'
    after = before.replace(b'"12.50"', b"12.50")
    assert [line for line in line_diff(before, after) if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        '-  "price": "12.50",', '+  "price": 12.50,']
    assert line_diff(before, before) == []
    huge = b'"' + b"x" * DIFF_LIMIT + b'"'
    assert line_diff(huge, b"{}")[0].startswith("(too large to compare line by line")


def test_a_compressed_payload_is_shown_decompressed_with_its_fields_marked():
    document = b'{"order_id": "o-1", "customer_id": "c-1"}'
    for packed, compressed in ((gzip.compress(document), "gzip bytes"),
                               (zlib.compress(document), "Content-Encoding: deflate")):
        view = view_payload(packed, True, ["/order_id"], compressed)
        assert view.kind == "json" and view.size == len(packed) and view.found == {"/order_id"}
        assert view.note == f"The payload is compressed ({compressed}); shown decompressed, 41 bytes."
    # Not asked (no header, no gzip bytes), or not decompressing: the bytes as they are.
    assert view_payload(gzip.compress(document)).kind == "hex"
    assert view_payload(b"\x1f\x8b not gzip", True, (), "gzip bytes").note == (
        "The payload starts as gzip data does but does not decompress: shown as stored. "
        "The payload is not UTF-8 text; shown as bytes.")


def test_a_decompressed_payload_stops_at_the_text_limit_and_says_where_its_data_ends_early():
    bomb = gzip.compress(b"x" * (TEXT_LIMIT * 64))  # 16 MB from about 16 KB
    view = view_payload(bomb, True, (), "gzip bytes")
    assert view.truncated and len(view.text) == TEXT_LIMIT
    assert view.note.startswith(f"The payload is compressed (gzip bytes); shown decompressed, the first {TEXT_LIMIT:,} bytes of more.")
    cut = view_payload(gzip.compress(b'{"order_id": "o-1"}')[:20], True, (), "gzip bytes")
    assert cut.kind == "text" and cut.text and not cut.truncated
    assert cut.note == f"The payload is compressed (gzip bytes); shown decompressed, {len(cut.text)} bytes before its compressed data ends early."


def test_a_payload_said_to_be_compressed_that_does_not_decompress_is_shown_as_stored_saying_so():
    """A Content-Encoding header the bytes do not bear out is flagged: the payload is shown as it is
    stored, saying so (gzip's first bytes on data that is not gzip: the test above)."""
    plain = b'{"order_id": "o-1"}'
    view = view_payload(plain, True, ["/order_id"], "Content-Encoding: gzip")
    assert view.kind == "json" and view.found == {"/order_id"}
    assert view.note == ("The payload is said to be compressed (Content-Encoding: gzip) but does not decompress "
                         "as gzip or zlib data: shown as stored.")
    brotli = view_payload(b"\x8b\x02\x80", True, (), "Content-Encoding: br")
    assert brotli.kind == "hex" and brotli.note.startswith(
        "The payload is compressed (Content-Encoding: br), which is not decompressed here: shown as stored.")
