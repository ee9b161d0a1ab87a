"""Grouping by cause: the labelled corpus of tests/error_corpus.py gives exactly one group per
cause, and each rule keeps what names a cause and drops what differs per message."""

from __future__ import annotations

from collections import defaultdict

import pytest

from dlq_dashboard.ingest.grouping import MAX_KEY, group_key, group_label, normalize_error_text, schema_part

from .error_corpus import CAUSES, samples


@pytest.mark.parametrize("seed", [14, 1, 2])
def test_the_corpus_gives_exactly_one_group_per_cause(seed):
    groups_of_cause: dict[str, set] = defaultdict(set)
    causes_of_group: dict[str, set] = defaultdict(set)
    for cause, error, schema_errors in samples(seed):
        key = group_key(error, schema_errors)
        groups_of_cause[cause].add(key)
        causes_of_group[key].add(cause)
    split = {cause: keys for cause, keys in groups_of_cause.items() if len(keys) > 1}
    merged = {key: causes for key, causes in causes_of_group.items() if len(causes) > 1}
    assert not split, f"causes spread over several groups: {split}"
    assert not merged, f"groups holding several causes: {merged}"
    assert len(causes_of_group) == len(CAUSES) >= 15


def test_the_corpus_has_pairs_of_causes_that_differ_in_one_meaningful_word():
    names = {cause.name for cause in CAUSES}
    for pair in [("python KeyError 'vat_rate'", "python KeyError 'currency'"),
                 ("postgres unique orders_pkey", "postgres unique customers_email_key"),
                 ("http 502 from charges", "http 503 from charges"), ("upstream status 502", "upstream status 504"),
                 ("java IllegalStateException transition", "java IllegalArgumentException transition"),
                 ("dns payments", "dns ledger"), ("schema customer email missing", "schema customer id missing"),
                 ("format email customer", "format email billing"),
                 ("format email customer", "format uri customer website"),
                 ("coupon expired", "coupon already redeemed"), ("coupon expired", "voucher expired"),
                 ("postgres error code 42P01", "postgres error code 23P01"), ("encoding UTF16", "encoding UTF32")]:
        assert set(pair) <= names


def keys(*texts: str) -> set[str]:
    return {normalize_error_text(text) for text in texts}


def test_quoted_field_and_constraint_names_are_kept_and_tenants_dropped():
    assert keys("KeyError: 'vat_rate' for tenant t0", "KeyError: 'vat_rate' for tenant t6",
                "KeyError: 'vat_rate' for tenant acme-corp") == {"KeyError: 'vat_rate' for tenant <id>"}
    assert normalize_error_text("KeyError: 'currency' for tenant t0") == "KeyError: 'currency' for tenant <id>"
    assert normalize_error_text('duplicate key value violates unique constraint "orders_pkey"') == \
        'duplicate key value violates unique constraint "orders_pkey"'
    assert normalize_error_text("tenant=globex user_id: bob") == "tenant=<id> user_id: <id>"
    assert normalize_error_text("user not found") == "user not found"


def test_quoted_values_are_dropped():
    assert keys("ValueError: invalid literal for int() with base 10: 'abc'",
                "ValueError: invalid literal for int() with base 10: '12,50'") == {
        "ValueError: invalid literal for int() with base <n>: '…'"}
    assert keys("ValueError: 'abc' is not a valid Currency", "ValueError: 'EURO' is not a valid Currency") == {
        "ValueError: '…' is not a valid Currency"}
    assert keys("No such customer: 'cus_9f8A7b6C5d'", "No such customer: 'cus_Zz0aB1cD2eF3gH'") == {
        "No such customer: '…'"}


def test_quoted_values_in_format_errors_are_dropped_whatever_their_quotes_and_the_format_is_kept():
    assert keys("/customer/email: 'user36@example' is not a 'email'", "/customer/email: 'user7@example' is not a 'email'",
                "/customer/email: '' is not a 'email'", '/customer/email: "o\'brien@" is not a \'email\'',
                "/customer/email: 'ana maria@example.com' is not a 'email'") == {
        "/customer/email: '…' is not a 'email'"}
    assert normalize_error_text("/delivery/at: 'tomorrow' is not a 'date-time'") == \
        "/delivery/at: '…' is not a 'date-time'"
    assert normalize_error_text("/site: 'not a url' is not a 'uri'") != \
        normalize_error_text("/site: 'not a url' is not a 'email'")
    # jsonschema's whole ValidationError, the value given again after "On instance[...]:"
    whole = ("'{}' is not a 'email'\n\nFailed validating 'format' in schema['properties']['email']:\n    "
             "{{'type': 'string', 'format': 'email'}}\n\nOn instance['email']:\n    '{}'")
    assert keys(whole.format("user1@example", "user1@example"), whole.format("bob", "bob")) == {
        "'…' is not a 'email' Failed validating 'format' in schema['properties']['email']: "
        "{'type': 'string', 'format': 'email'} On instance['email']: '…'"}


def test_a_code_of_letters_and_digits_after_a_noun_is_a_value():
    assert keys("coupon SAVE11 expired", "coupon SAVE87 expired", "coupon WINTER2026 expired",
                "coupon K7Q2MZ expired") == {"coupon <id> expired"}
    assert keys("promo code XMAS24 is invalid", "promo code 7KQ2M is invalid") == {"promo code <id> is invalid"}
    assert normalize_error_text("Coupon SAVE11 expired.") == "Coupon <id> expired."
    assert normalize_error_text("voucher SAVE11 expired") != normalize_error_text("coupon SAVE11 expired")


def test_a_code_that_names_the_cause_is_kept():
    # After a word that is not a noun, or a name whose value is the cause.
    assert normalize_error_text("insert failed: error code 42P01") == "insert failed: error code 42P01"
    assert normalize_error_text("unmappable character for encoding UTF16") == \
        "unmappable character for encoding UTF16"
    assert normalize_error_text("payload is not valid UTF8") == "payload is not valid UTF8"
    assert normalize_error_text("stream reset: protocol HTTP2 refused") == "stream reset: protocol HTTP2 refused"
    assert normalize_error_text("coupon SUMMER expired") == "coupon SUMMER expired"  # a plain word: no digit


def test_stripe_ids_hex_digests_and_uuids_are_dropped():
    assert normalize_error_text("charge ch_3c425c8d99d19b failed") == "charge ch_<id> failed"
    assert keys("refund for cus_AbCdEfGhIjKl", "refund for cus_9f8A7b6C5d") == {"refund for cus_<id>"}
    assert normalize_error_text("checksum deadbeefcafe1234 mismatch") == "checksum <id> mismatch"
    assert normalize_error_text("object at 0x7f3a2b1c9d") == "object at <id>"
    assert normalize_error_text("invoice 3f2a9c1e-8b7d-4c6e-9f0a-1b2c3d4e5f60 gone") == "invoice <uuid> gone"
    assert normalize_error_text("pod orders-worker-7d9f8c6b5-xkqzt evicted") == "pod orders-worker-<id>-<id> evicted"


def test_a_hex_id_is_an_id_whatever_its_last_letter():
    # Digits then d read as a duration, digits then b as a size: one cause, two groups.
    assert keys("refund 6705176d rejected", "refund 575142eb rejected", "refund 1234567b rejected",
                "refund 0000000d rejected", "refund 10000000d rejected") == {"refund <id> rejected"}
    for letter in "abcdefABCDEF":
        for digits in ("1234567", "12345678", "123456789012345"):
            assert normalize_error_text(f"id {digits}{letter}.") == "id <id>.", digits + letter
            assert normalize_error_text(f"of ({digits}{letter}, x)") == "of (<id>, x)", digits + letter
    assert keys("refund 6705176d-575142eb rejected", "refund 575142eb-6705176d rejected") == {"refund <id> rejected"}
    assert normalize_error_text("lock 6705176d-retry held") == "lock <id>-retry held"


def test_durations_and_sizes_that_are_not_hex_ids_stay_durations_and_sizes():
    assert keys("timeout after 30s", "timeout after 5m30s", "timeout after 250ms", "timeout after 1.5h",
                "timeout after 12 seconds", "timeout after 7d", "timeout after 999999d",
                "timeout after 1234567.5d", "timeout after 1234567 days", "timeout after 86400000ms",
                "timeout after 1234567s", "timeout after 0000000h", "timeout after 12345678m") == {
        "timeout after <duration>"}
    assert normalize_error_text("read 1024b of 4096") == "read <n>b of <n>"
    assert normalize_error_text("body of 65536B too large") == "body of <n>B too large"


def test_words_with_digits_that_name_things_are_kept():
    assert normalize_error_text("Http2Exception: sha256 of address_line2 in utf8") == \
        "Http2Exception: sha256 of address_line2 in utf8"
    assert normalize_error_text("S3Exception from JSONDecodeError") == "S3Exception from JSONDecodeError"
    assert normalize_error_text("An error occurred (NoSuchKey) when calling the GetObject operation") == \
        "An error occurred (NoSuchKey) when calling the GetObject operation"
    assert normalize_error_text("Expecting ',' delimiter: line 3 column 17") != \
        normalize_error_text("Expecting ':' delimiter: line 3 column 17")


def test_addresses_emails_times_and_durations_are_dropped():
    assert keys("context deadline exceeded after 30.02s dialing 10.0.3.17:5432",
                "context deadline exceeded after 1m2.5s dialing 10.0.3.200:5432") == {
        "context deadline exceeded after <duration> dialing <ip>"}
    assert keys("connect ECONNREFUSED [2001:db8::1]:6379", "connect ECONNREFUSED 10.1.2.3:6379",
                "connect ECONNREFUSED [::1]:6379") == {"connect ECONNREFUSED <ip>"}
    assert normalize_error_text("token expired at 2026-03-01T12:00:03.123Z for jane.doe@example.com after 1234 ms") \
        == "token expired at <time> for <email> after <duration>"


def test_http_statuses_reason_phrases_and_hosts_are_kept_url_ids_dropped():
    text = "POST https://api.x.com/v1/customers/cus_9f8A7b6C5d/charges?x=1 returned 502 Bad Gateway after 1234ms"
    assert normalize_error_text(text) == \
        "POST https://api.x.com/v1/customers/<id>/charges?… returned 502 Bad Gateway after <duration>"
    assert normalize_error_text("upstream status 504 for 12 items") == "upstream status 504 for <n> items"
    assert normalize_error_text("dial tcp: lookup ledger.internal on 10.96.0.10:53: no such host") == \
        "dial tcp: lookup ledger.internal on <ip>: no such host"


def test_postgres_detail_values_are_dropped():
    assert keys("Key (id)=(42) already exists.", "Key (id)=(ord-7) already exists.") == {"Key (id)=(…) already exists."}
    assert normalize_error_text("DETAIL: Failing row contains (1, Jane Doe, null, 2026-01-01).") == \
        "DETAIL: Failing row contains (…)."


def test_schema_failures_fold_array_indexes_and_name_the_missing_property():
    assert schema_part("/items/0/price", "'abc' is not of type 'number'") == \
        schema_part("/items/7/price", "'12.50' is not of type 'number'") == "/items/*/price: … is not of type 'number'"
    assert schema_part("/customer", "'email' is a required property") == "/customer/email: is a required property"
    assert schema_part("/customer", "'customer_id' is a required property") != \
        schema_part("/customer", "'email' is a required property")
    assert schema_part("", "'a/b' is a required property") == "/a~1b: is a required property"
    assert schema_part("", "[] should be non-empty") == "(root): … should be non-empty"
    several = [{"path": "/items/0/price", "message": "'x' is not of type 'number'"},
               {"path": "/items/3/price", "message": "'y' is not of type 'number'"}]
    assert group_key(None, several) == "/items/*/price: … is not of type 'number'"


def test_keys_stay_short_and_labels_read_well():
    assert len(normalize_error_text("x " * 5000)) <= MAX_KEY
    assert group_label("KeyError: 'vat_rate' for tenant <id>") == "KeyError: 'vat_rate' for tenant <id>"
    label = group_label("word " * 60)
    assert len(label) <= 120 and label.endswith("…") and not label.endswith(" …")
    assert group_label("/a: is a required property; /b: is a required property; /c: … is not of type 'number'") \
        == "/a: is a required property (and 2 more)"


@pytest.mark.parametrize("text", ["a-" * 3000, "'" * 5000, '"\\' * 3000, "1." * 3000, "1:" * 3000, "[::" * 2000,
                                  "tenant " * 1000, "x" * 5000 + "1", "https://" + "a/" * 3000, "a@" * 3000,
                                  "Failing row contains (" * 500, ")=(" * 1500, "\x00\r\n\t€…", ""])
def test_any_text_gives_a_short_key_without_raising(text):
    assert len(normalize_error_text(text)) <= MAX_KEY


def test_long_error_texts_are_cut_before_the_cache_so_it_never_keeps_megabytes_alive():
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        texts = [f"Traceback {n}: " + "frame in handler\n" * 60_000 for n in range(20)]  # ~1 MB each
        keys = [normalize_error_text(text) for text in texts]
        del texts
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert keys[0] == normalize_error_text("Traceback 0: " + "frame in handler\n" * 300)
    # What the cache keeps of 20 texts of a megabyte: their first 4,096 characters, not 20 MB.
    assert kept < 5_000_000, kept
