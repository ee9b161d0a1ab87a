"""The dead-letter header contract: every field, and bad input kept raw with a note."""

import json
from datetime import datetime, timezone

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dlq_dashboard.actions.intents import republish_headers
from dlq_dashboard.ingest.parse import entry_from_dlq_message, parse_advisory
from dlq_dashboard.times import parse_time

NOW = datetime(2026, 11, 29, 12, 0, 0)


def entry(headers, payload=b"{}"):
    return entry_from_dlq_message(stream="DLQ", epoch="e1", seq=7, headers=headers, payload=payload,
                                  stored_at=NOW, received_at=NOW)


def test_every_contract_header_becomes_a_field():
    row = entry({
        "Dlq-Original-Subject": "orders.created", "Dlq-Original-Stream": "ORDERS", "Dlq-Original-Seq": "42",
        "Dlq-Consumer": "billing", "Dlq-Original-Msg-Id": "order-1", "Dlq-Reason": "schema_invalid",
        "Dlq-Error": "price is a string", "Dlq-Schema-Errors": '[{"path": "/price", "message": "not a number"}]',
        "Dlq-Deliveries": "3", "Dlq-Failed-At": "2026-11-29T10:00:00.123456789Z", "Dlq-Replay-Of": "DLQ:3",
        "traceparent": "00-abc-def-01",
    })
    assert row["original_subject"] == "orders.created"
    assert (row["original_stream"], row["original_seq"], row["consumer"]) == ("ORDERS", 42, "billing")
    assert row["original_msg_id"] == "order-1" and row["reason"] == "schema_invalid"
    assert row["error"] == "price is a string"
    assert json.loads(row["schema_errors"]) == [{"path": "/price", "message": "not a number"}]
    assert row["deliveries"] == 3 and row["failed_at"] == datetime(2026, 11, 29, 10, 0, 0, 123456)
    assert row["replay_of"] == "DLQ:3"
    assert json.loads(row["headers"])["traceparent"] == ["00-abc-def-01"]
    assert json.loads(row["notes"]) == []


def test_header_names_match_case_insensitively():
    row = entry({"dlq-original-subject": "a.b", "DLQ-REASON": "fatal", "dLq-DeLiVeRiEs": "2"})
    assert (row["original_subject"], row["reason"], row["deliveries"]) == ("a.b", "fatal", 2)


def test_a_message_without_headers_is_kept_with_a_note():
    row = entry(None, b"raw")
    assert row["original_subject"] is None and row["payload"] == b"raw"
    notes = json.loads(row["notes"])
    assert any("no headers" in n for n in notes) and any("cannot be republished" in n for n in notes)


def test_an_unknown_reason_is_kept_as_given():
    assert entry({"Dlq-Reason": "cosmic_ray"})["reason"] == "cosmic_ray"


def test_malformed_fields_are_kept_raw_with_a_note():
    row = entry({"Dlq-Original-Subject": "a", "Dlq-Schema-Errors": "{not json", "Dlq-Deliveries": "many",
                 "Dlq-Original-Seq": "-1", "Dlq-Failed-At": "yesterday"})
    assert row["schema_errors"] is None and row["deliveries"] is None and row["original_seq"] is None
    assert row["failed_at"] == NOW  # falls back to the stored time
    notes = " ".join(json.loads(row["notes"]))
    for fragment in ("Dlq-Schema-Errors", "Dlq-Deliveries 'many'", "Dlq-Original-Seq '-1'", "Dlq-Failed-At 'yesterday'"):
        assert fragment in notes
    assert json.loads(row["headers"])["Dlq-Deliveries"] == ["many"]


@pytest.mark.parametrize("written", ["٣", "1_000", "+5", "3.0", " 1 2 ", "9" * 5000])
def test_a_count_not_written_in_ascii_digits_is_kept_raw_with_a_note(written):
    """Python's int() read "٣" as 3, "1_000" as 1000 and "+5" as 5, without a word."""
    row = entry({"Dlq-Original-Subject": "a", "Dlq-Deliveries": written, "Dlq-Original-Seq": written})
    assert (row["deliveries"], row["original_seq"]) == (None, None)
    assert "Dlq-Deliveries" in row["notes"] and "is not a whole number" in row["notes"]
    assert entry({"Dlq-Original-Subject": "a", "Dlq-Deliveries": " 7 "})["deliveries"] == 7


def test_schema_errors_that_are_not_objects_are_shown_as_given():
    row = entry({"Dlq-Schema-Errors": '["just a string", {"path": 3, "message": "m"}]'})
    errors = json.loads(row["schema_errors"])
    assert errors[0] == {"path": "", "message": '"just a string"'}
    assert errors[1] == {"path": "3", "message": "m"}


def test_payload_is_kept_byte_for_byte():
    for payload in (b"", b"\xff\xfe\x00binary", "ünïcödé ✓".encode(), b"x" * (1024 * 1024)):
        assert entry({"Dlq-Original-Subject": "a"}, payload)["payload"] == payload


def test_republish_headers_drop_dlq_and_server_headers_and_add_a_fresh_id():
    headers = {"Dlq-Reason": ["fatal"], "Nats-Msg-Id": ["old"], "Nats-Stream-Source": ["X 1"],
               "traceparent": ["00-1"], "X-Tenant": ["acme"], "X-Multi": ["a", "b"]}
    result = republish_headers(headers, "new-id", "DLQ:5")
    assert result == {"traceparent": "00-1", "X-Tenant": "acme", "X-Multi": ["a", "b"], "Nats-Msg-Id": "new-id",
                      "Dlq-Replay-Of": "DLQ:5"}


def test_advisories_are_parsed():
    body = json.dumps({"type": "io.nats.jetstream.advisory.v1.terminated", "id": "abc",
                       "timestamp": "2026-11-29T22:10:18.98Z", "stream": "ORDERS", "consumer": "C",
                       "consumer_seq": 1, "stream_seq": 2, "deliveries": 1, "reason": "bad customer"}).encode()
    adv = parse_advisory("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.ORDERS.C", body, "fb", NOW)
    assert (adv.kind, adv.id, adv.stream, adv.consumer, adv.stream_seq, adv.deliveries, adv.reason) == \
        ("terminated", "abc", "ORDERS", "C", 2, 1, "bad customer")
    assert adv.at == parse_time("2026-11-29T22:10:18.98Z")
    nak = parse_advisory("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.ORDERS.C",
                         b'{"stream":"ORDERS","stream_seq":1,"deliveries":1}', "fb", NOW)
    assert nak.kind == "nak" and nak.id == "fb" and nak.at == NOW
    # Deliveries a column cannot hold (or not a number) are left out, the advisory kept.
    for deliveries in (b"2147483648", b"true", b"-1"):
        odd = parse_advisory("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.ORDERS.C",
                             b'{"stream":"ORDERS","stream_seq":1,"deliveries":' + deliveries + b"}", "fb", NOW)
        assert odd.deliveries is None and odd.stream_seq == 1
    # A NUL (which PostgreSQL's text does not hold) in its texts is shown as U+FFFD.
    nul = parse_advisory("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.ORDERS.C",
                         b'{"stream":"ORDERS","stream_seq":1,"consumer":"C\\u0000","reason":"r\\u0000"}', "fb", NOW)
    assert (nul.consumer, nul.reason) == ("C\ufffd", "r\ufffd")


def test_unreadable_advisories_are_skipped_not_raised():
    for subject, body in (("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.C", b"not json"),
                          ("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.C", b'{"stream":"S","stream_seq":' + b"9" * 30 + b"}"),
                          ("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.C", b"[" * 100_000 + b"]" * 100_000),
                          ("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.C", b'{"stream":"S"}'),
                          ("$JS.EVENT.ADVISORY.CONSUMER.OTHER.S.C", b'{"stream":"S","stream_seq":1}'),
                          ("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.C", b'{"stream":"S","stream_seq":Infinity}'),
                          ("$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.C", b'{"stream":"S\\udcff","stream_seq":1}'),
                          ("elsewhere", b"{}")):
        assert parse_advisory(subject, body, "fb", NOW) is None


def test_an_advisory_of_odd_types_is_read_as_far_as_it_can_be_never_raised():
    """A timestamp that is a number (TypeError) and half a UTF-16 pair in its texts
    (UnicodeEncodeError) stopped the advisories' mirror for good, every later one behind it."""
    for timestamp in (b"123", b"[1]", b'{"a": 1}', b"null"):
        adv = parse_advisory("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.ORDERS.C",
                             b'{"stream":"ORDERS","stream_seq":1,"timestamp":' + timestamp + b"}", "fb", NOW)
        assert adv.at == NOW and adv.stream_seq == 1
    odd = parse_advisory("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.ORDERS.C",
                         b'{"stream":"ORDERS","stream_seq":1,"consumer":"C\\udcff","reason":"r\\ud800","id":"i\\udfff"}',
                         "fb", NOW)
    assert (odd.consumer, odd.reason, odd.id) == ("C\ufffd", "r\ufffd", "i\ufffd")


def test_schema_errors_the_database_cannot_hold_or_json_cannot_write_are_read_with_a_note():
    """Half a UTF-16 pair ("\\udcff", which a producer decoding with surrogateescape writes) and a
    5,000-deep array stopped the mirror for good (TypeError, RecursionError); a NUL written as
    JSON's escape stripped the entry on PostgreSQL, whose text holds no NUL."""
    def parsed(raw: str) -> dict:
        return entry_from_dlq_message(stream="DLQ", epoch="e", seq=1, payload=b"{}", stored_at=None, received_at=NOW,
                                      headers={"Dlq-Original-Subject": "orders.created", "Dlq-Schema-Errors": raw})

    surrogate = parsed('[{"path": "/price", "message": "\'\\udcff\' is not of type \'number\'"}]')
    assert json.loads(surrogate["schema_errors"]) == [{"path": "/price", "message": "'\ufffd' is not of type 'number'"}]
    assert any("half a UTF-16 pair" in n for n in json.loads(surrogate["notes"]))
    assert surrogate["original_subject"] == "orders.created"
    nul = parsed('[{"path": "/a\\u0000b", "message": "x\\u0000y"}]')
    assert json.loads(nul["schema_errors"]) == [{"path": "/a\ufffdb", "message": "x\ufffdy"}]
    assert "\x00" not in nul["group_key"]
    for depth in (5_000, 100_000):
        deep = parsed("[" * depth + "]" * depth)
        assert deep["original_subject"] == "orders.created"
        assert json.loads(deep["schema_errors"]) == [{"path": "", "message": "(nested too deep to show)"}]


_TIME_PIECES = ["2026-11-29", "T", "10:00:00", ".123456", ".123456789", "Z", "+01:00", "-00:00", " ", "0", "9",
                "-", ":", "W48", ",5", "9999-12-31", "0001-01-01", "23:59:59"]


@given(st.lists(st.sampled_from(_TIME_PIECES), min_size=1, max_size=6).map("".join))
@example("2026-11-29Z")
@example("2026-11-29T10:00:00.12345 Z")
@example("2026-11-29T10:00:00-00:00Z")
def test_a_failed_at_time_reads_as_the_general_rfc_3339_reading(raw):
    """parse_time's quick reading of the usual "…Z" form gives what the general one gives."""
    def general(text):
        try:
            parsed = datetime.fromisoformat(text.strip())
        except ValueError:
            return None
        if parsed.tzinfo is None:
            return parsed
        try:
            return parsed.astimezone(timezone.utc).replace(tzinfo=None)
        except OverflowError:
            return None

    assert parse_time(raw) == general(raw)


def test_a_failed_at_time_in_lowercase_or_on_a_leap_second_is_read():
    """RFC 3339 allows a lowercase "t" and "z" (section 5.6) and a 60th second (5.7): both are read,
    the leap second as the last microsecond of its minute."""
    assert parse_time("2026-11-29t10:00:00.5z") == datetime(2026, 11, 29, 10, 0, 0, 500000)
    assert parse_time("2026-12-31T23:59:60Z") == datetime(2026, 12, 31, 23, 59, 59, 999999)
    assert parse_time("2016-12-31t23:59:60.5+00:00") == datetime(2016, 12, 31, 23, 59, 59, 999999)
    assert entry({"Dlq-Failed-At": "2026-11-29t10:00:00z"})["failed_at"] == datetime(2026, 11, 29, 10)
    for wrong in ("2026-12-31T23:60:00Z", "2026-12-31T23:59:61Z", "2026-12-31T24:00:60Z"):
        assert parse_time(wrong) is None, wrong


def _entry(headers):
    now = datetime(2026, 12, 1)
    return entry_from_dlq_message(stream="DLQ", epoch="e", seq=1, headers=headers, payload=b"{}", stored_at=now,
                                  received_at=now)


def test_a_repeated_malformed_schema_errors_value_is_noted_on_every_message():
    """The schema errors of a cause are read once and kept: what each message is told still is its own."""
    headers = {"Dlq-Original-Subject": "a.b", "Dlq-Schema-Errors": "[{oops"}
    first, second = _entry(headers), _entry(dict(headers))
    assert first["notes"] == second["notes"] and "not valid JSON" in first["notes"]
    item = {"Dlq-Original-Subject": "a.b", "Dlq-Schema-Errors": '[1, {"path": "/a", "message": "m"}]'}
    assert _entry(item)["notes"] == _entry(dict(item))["notes"] and "shown as given" in _entry(item)["notes"]
    assert json.loads(_entry(item)["schema_errors"]) == [{"path": "", "message": "1"}, {"path": "/a", "message": "m"}]


def test_a_long_schema_errors_value_is_read_whole_and_grouped_by_its_paths():
    errors = [{"path": f"/items/{i}/price", "message": "not a number"} for i in range(200)]
    raw = json.dumps(errors)
    assert len(raw) > 4096  # past what is kept between messages
    entry = _entry({"Dlq-Original-Subject": "a.b", "Dlq-Schema-Errors": raw, "Dlq-Error": "whatever"})
    assert json.loads(entry["schema_errors"]) == errors
    assert entry["group_key"] == _entry({"Dlq-Original-Subject": "a.b", "Dlq-Schema-Errors": raw})["group_key"]
    assert "price" in entry["group_key"]


def test_a_contract_header_given_twice_in_other_cases_counts_its_first():
    entry = _entry({"dlq-error": "first", "Dlq-Original-Subject": "a.b", "DLQ-ERROR": "second"})
    assert entry["error"] == "first"
    entry = _entry({"DLQ-ERROR": "second", "Dlq-Original-Subject": "a.b", "dlq-error": "first"})
    assert entry["error"] == "second"


def test_a_contract_header_given_twice_says_so_and_which_value_is_used():
    entry = _entry({"dlq-reason": "fatal", "Dlq-Original-Subject": "a.b", "DLQ-REASON": "terminated"})
    assert entry["reason"] == "fatal"
    assert json.loads(entry["notes"]) == ["Dlq-Reason was given 2 times ('fatal', 'terminated'): the first, "
                                          "'fatal', is used."]
    assert json.loads(_entry({"Dlq-Original-Subject": "a.b", "Dlq-Reason": "fatal"})["notes"]) == []


def test_two_different_original_subjects_refuse_a_republish_and_two_alike_do_not():
    from dlq_dashboard.actions.decisions import republish_refusal
    row = {"id": 4, "status": "open", "original_subject": "orders.created", "payload": b"{}",
           "payload_available": True,
           "headers": json.dumps({"Dlq-Original-Subject": ["orders.created"], "dlq-original-subject": ["orders.other"]})}
    assert republish_refusal(row) == (
        "Entry 4 gives Dlq-Original-Subject 2 different values ('orders.created', 'orders.other'): where it belongs "
        "is not certain, so it is not republished. Close it, or have its service dead-letter it again.")
    alike = {**row, "headers": {"Dlq-Original-Subject": ["orders.created", "orders.created"]}}
    assert republish_refusal(alike) is None


def test_a_replay_of_that_names_no_entry_is_noted():
    row = _entry({"Dlq-Original-Subject": "a.b", "Dlq-Replay-Of": "garbage"})
    assert row["replay_of"] == "garbage"
    assert json.loads(row["notes"]) == ["Dlq-Replay-Of 'garbage' is not <dlq stream>:<seq>, so it names no entry "
                                        "this one is a republish of; kept as given in the headers."]
    assert json.loads(_entry({"Dlq-Original-Subject": "a.b", "Dlq-Replay-Of": "DLQ:3"})["notes"]) == []


def test_a_failed_at_read_as_another_time_is_noted():
    row = entry({"Dlq-Original-Subject": "a.b", "Dlq-Failed-At": "9999-12-31T23:59:60+14:00"})
    assert row["failed_at"] == datetime(9999, 12, 31, 9, 59, 59, 999999)
    assert json.loads(row["notes"]) == [
        "Dlq-Failed-At '9999-12-31T23:59:60+14:00' is a leap second, read as 9999-12-31T09:59:59.999999Z (the last "
        "microsecond of its minute, in UTC); kept as given in the headers.",
        "Dlq-Failed-At '9999-12-31T23:59:60+14:00' (9999-12-31T09:59:59.999999Z) is after the DLQ stream stored the "
        "message (2026-11-29T12:00:00.000000Z): the sender's clock or header is wrong."]
    assert json.loads(entry({"Dlq-Original-Subject": "a.b", "Dlq-Failed-At": "2026-11-29T10:00:00+02:00"})["notes"]) == []
