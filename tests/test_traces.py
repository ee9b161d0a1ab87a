"""Trace links: the W3C Trace Context rules for ``traceparent`` (entries/traces.py), the headers
they are read from, and DLQ_TRACE_URL."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlq_dashboard.config import ConfigError, load_settings
from dlq_dashboard.entries.traces import (
    TraceParent,
    parse_traceparent,
    trace_id_of,
    trace_url,
)

TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01"

# The examples of the W3C Recommendation (section 3.2 and its test suite), and the edges of each rule.
VALID_EXAMPLES = [
    (VALID, TraceParent("00", TRACE, PARENT, "01")),
    (f"00-{TRACE}-{PARENT}-00", TraceParent("00", TRACE, PARENT, "00")),
    (f"00-{TRACE}-{PARENT}-ff", TraceParent("00", TRACE, PARENT, "ff")),  # unknown flags are kept
    (f"01-{TRACE}-{PARENT}-01", TraceParent("01", TRACE, PARENT, "01")),  # a later version
    (f"cc-{TRACE}-{PARENT}-01-what-the-future-will-be-like", TraceParent("cc", TRACE, PARENT, "01")),
    (f"fe-{TRACE}-{PARENT}-09-", TraceParent("fe", TRACE, PARENT, "09")),
    (f"00-{'0' * 31}1-{'0' * 15}1-01", TraceParent("00", "0" * 31 + "1", "0" * 15 + "1", "01")),
]
INVALID_EXAMPLES = [
    ("", "empty"),
    (f"ff-{TRACE}-{PARENT}-01", "version ff is forbidden"),
    (f"00-{'0' * 32}-{PARENT}-01", "a trace id of all zeros"),
    (f"00-{TRACE}-{'0' * 16}-01", "a parent id of all zeros"),
    (f"00-{TRACE.upper()}-{PARENT}-01", "an upper-case trace id"),
    (f"00-{TRACE}-{PARENT.upper()}-01", "an upper-case parent id"),
    (f"00-{TRACE}-{PARENT}-0A", "upper-case flags"),
    (f"0A-{TRACE}-{PARENT}-01", "an upper-case version"),
    (f"00-{TRACE}-{PARENT}-01-extra", "version 00 with a fifth part"),
    (f"00-{TRACE}-{PARENT}-01-", "version 00 with a trailing dash"),
    (f"cc-{TRACE}-{PARENT}-01.extra", "a later version whose flags are not followed by a dash"),
    (f"cc-{TRACE}-{PARENT}-1", "a later version with one flag digit"),
    (f"00-{TRACE[:-1]}-{PARENT}-01", "a trace id of 31 digits"),
    (f"00-{TRACE}0-{PARENT}-01", "a trace id of 33 digits"),
    (f"00-{TRACE}-{PARENT[:-1]}-01", "a parent id of 15 digits"),
    (f"00-{TRACE[:-1]}g-{PARENT}-01", "a trace id with a non-hex digit"),
    (f"00-{TRACE}-{PARENT[:-1]}z-01", "a parent id with a non-hex digit"),
    (f"00-{TRACE}-{PARENT}-0g", "flags with a non-hex digit"),
    (f"00-{TRACE}-{PARENT}", "no flags"),
    (f"0-{TRACE}-{PARENT}-01", "a version of one digit"),
    (f"000-{TRACE}-{PARENT}-01", "a version of three digits"),
    (f"00_{TRACE}_{PARENT}_01", "another separator"),
    (f" {VALID}", "a leading space"),
    (f"{VALID} ", "a trailing space"),
    (f"{VALID}\n", "a trailing newline"),
    ("00-4bf92f3577b34da6-00f067aa0ba902b7-01", "a 64-bit trace id"),
    ("•••", "a value DLQ_MASK hid"),
    ('"><script>alert(1)</script>', "markup"),
]


@pytest.mark.parametrize("value, expected", VALID_EXAMPLES, ids=[v for v, _ in VALID_EXAMPLES])
def test_a_traceparent_by_the_w3c_rules_is_read(value, expected):
    assert parse_traceparent(value) == expected


@pytest.mark.parametrize("value, why", INVALID_EXAMPLES, ids=[why for _, why in INVALID_EXAMPLES])
def test_a_traceparent_against_the_w3c_rules_is_ignored(value, why):
    assert parse_traceparent(value) is None


def test_a_value_that_is_not_text_has_no_trace():
    assert parse_traceparent(None) is None
    assert parse_traceparent(b"00-" + TRACE.encode()) is None


# --- properties -------------------------------------------------------------------------------------

def hex_digits(count: int) -> st.SearchStrategy[str]:
    return st.text("0123456789abcdef", min_size=count, max_size=count)


trace_ids = hex_digits(32).filter(lambda s: s != "0" * 32)
parent_ids = hex_digits(16).filter(lambda s: s != "0" * 16)
later_versions = hex_digits(2).filter(lambda s: s not in ("00", "ff"))


@given(trace_ids, parent_ids, hex_digits(2))
def test_any_version_00_traceparent_reads_back_its_parts(trace_id, parent_id, flags):
    assert parse_traceparent(f"00-{trace_id}-{parent_id}-{flags}") == TraceParent("00", trace_id, parent_id, flags)


@given(later_versions, trace_ids, parent_ids, hex_digits(2), st.none() | st.text())
def test_a_later_version_reads_its_first_four_parts_and_skips_what_follows_a_dash(version, trace_id, parent_id,
                                                                                 flags, rest):
    value = f"{version}-{trace_id}-{parent_id}-{flags}" + ("" if rest is None else "-" + rest)
    assert parse_traceparent(value) == TraceParent(version, trace_id, parent_id, flags)


@given(trace_ids, parent_ids, hex_digits(2), st.text(min_size=1))
def test_version_00_with_anything_after_the_flags_is_ignored(trace_id, parent_id, flags, rest):
    assert parse_traceparent(f"00-{trace_id}-{parent_id}-{flags}{rest}") is None


@given(trace_ids, parent_ids, st.integers(0, 54), st.sampled_from("ABCDEFG-_ xz"))
def test_a_valid_traceparent_with_one_character_changed_to_a_foreign_one_is_ignored(trace_id, parent_id, at, char):
    value = f"00-{trace_id}-{parent_id}-01"
    changed = value[:at] + char + value[at + 1:]
    if changed != value:
        assert parse_traceparent(changed) is None


@given(st.text())
def test_whatever_is_read_from_any_text_keeps_the_rules(value):
    found = parse_traceparent(value)
    if found is not None:
        assert found.version != "ff" and len(found.version) == 2
        assert len(found.trace_id) == 32 and found.trace_id != "0" * 32
        assert len(found.parent_id) == 16 and found.parent_id != "0" * 16
        assert set(found.version + found.trace_id + found.parent_id + found.flags) <= set("0123456789abcdef")
        assert value.startswith(f"{found.version}-{found.trace_id}-{found.parent_id}-{found.flags}")


@given(st.sampled_from(["traceparent", "Traceparent", "TraceParent", "TRACEPARENT"]), trace_ids, parent_ids)
def test_the_header_name_matches_in_any_case(name, trace_id, parent_id):
    assert trace_id_of({"X-Tenant": ["acme"], name: [f"00-{trace_id}-{parent_id}-01"]}) == trace_id


# --- the headers ------------------------------------------------------------------------------------

def test_a_message_without_a_traceparent_has_no_trace():
    assert trace_id_of({}) is None
    assert trace_id_of(None) is None
    assert trace_id_of({"tracestate": ["rojo=00f067aa0ba902b7"]}) is None


def test_several_traceparent_values_are_treated_as_invalid():
    other = f"00-{'a' * 32}-{PARENT}-01"
    assert trace_id_of({"traceparent": [VALID, other]}) is None
    assert trace_id_of({"traceparent": [VALID], "Traceparent": [other]}) is None
    assert trace_id_of({"traceparent": [VALID, VALID]}) is None


def test_an_empty_traceparent_list_has_no_trace():
    assert trace_id_of({"traceparent": []}) is None


def test_the_trace_of_headers_carrying_tracestate_is_the_traceparent_s():
    assert trace_id_of({"traceparent": [VALID], "tracestate": ["congo=t61rcWkgMzE"]}) == TRACE


# --- DLQ_TRACE_URL ----------------------------------------------------------------------------------

def test_the_trace_url_fills_in_the_trace_id():
    assert trace_url("https://tempo.example/trace/{trace_id}", TRACE) == f"https://tempo.example/trace/{TRACE}"
    assert trace_url("https://g.example/explore?id={trace_id}&x={trace_id}", TRACE) == (
        f"https://g.example/explore?id={TRACE}&x={TRACE}")


def test_there_is_no_trace_url_without_a_template_or_a_trace_id():
    assert trace_url(None, TRACE) is None
    assert trace_url("https://tempo.example/trace/{trace_id}", None) is None


@pytest.mark.parametrize("value", ["https://tempo.example/trace/{trace_id}", "http://127.0.0.1:3200/t/{trace_id}",
                                   "https://grafana.example/explore?traceId={trace_id}&orgId=1,2",
                                   "  https://tempo.example/trace/{trace_id}  "])
def test_dlq_trace_url_takes_an_http_address_with_the_trace_id_field(value):
    assert load_settings({"DLQ_TRACE_URL": value}).trace_url == value.strip()


@pytest.mark.parametrize("value", ["https://tempo.example/trace/", "https://tempo.example/trace/{traceid}",
                                   "https://tempo.example/{trace_id}/{span_id}", "https://tempo.example/{trace_id}}",
                                   "ftp://tempo.example/{trace_id}", "javascript:alert(1)//{trace_id}",
                                   "/trace/{trace_id}", "https:///{trace_id}", "https://tempo.example/a b/{trace_id}",
                                   "https://tempo.example:port/{trace_id}", "{trace_id}"])
def test_dlq_trace_url_refuses_anything_else_in_one_sentence(value):
    with pytest.raises(ConfigError) as refused:
        load_settings({"DLQ_TRACE_URL": value})
    message = str(refused.value)
    assert message.startswith("DLQ_TRACE_URL=") and "{trace_id}" in message and "\n" not in message


def test_dlq_trace_url_is_unset_by_default():
    assert load_settings({}).trace_url is None
