"""Yes-or-no values read one way: the words every form, query string, JSON body and setting accepts."""

from __future__ import annotations

import pytest

from dlq_dashboard.config import ConfigError, load_settings
from dlq_dashboard.errors import InvalidRequest
from dlq_dashboard.flags import flag


@pytest.mark.parametrize("raw", [True, 1, "true", "TRUE", " True ", "1", "on", "On", "yes", "YES"])
def test_every_word_for_yes_is_true(raw):
    assert flag(raw, "force") is True


@pytest.mark.parametrize("raw", [False, 0, "false", "False", "0", "off", "OFF", "no", " no "])
def test_every_word_for_no_is_false_even_as_text_in_json(raw):
    assert flag(raw, "force", default=True) is False


@pytest.mark.parametrize("raw", [None, "", "   "])
def test_an_absent_or_blank_value_is_the_default(raw):
    assert flag(raw, "force") is False
    assert flag(raw, "only_valid", default=True) is True


@pytest.mark.parametrize("raw, shown", [("maybe", "'maybe'"), (2, "2"), (-1, "-1"), (1.0, "1.0"), ([True], "[True]"),
                                        ({"x": 1}, "{'x': 1}"), ("y", "'y'"), ("truee", "'truee'")])
def test_anything_else_is_one_sentence_naming_the_parameter_and_the_words(raw, shown):
    with pytest.raises(InvalidRequest) as raised:
        flag(raw, "force")
    assert str(raised.value) == (f"force {shown} is not valid: use one of true, false, 1, 0, on, off, yes, no, "
                                 "or leave it out")


def test_a_long_value_is_shortened_in_the_sentence():
    with pytest.raises(InvalidRequest) as raised:
        flag("x" * 500, "fold")
    assert len(str(raised.value)) < 150 and "…" in str(raised.value)


@pytest.mark.parametrize("raw, value", [("yes", True), ("Off", False), ("1", True), ("no", False)])
def test_a_setting_takes_the_same_words(raw, value):
    assert load_settings({"DLQ_DELETE_ON_CLOSE": raw}).delete_on_close is value


def test_a_setting_that_is_not_a_yes_or_a_no_is_the_operators_error_not_a_request_error():
    with pytest.raises(ConfigError, match=r"^DLQ_DELETE_ON_CLOSE='maybe' is not valid: use true or false$"):
        load_settings({"DLQ_DELETE_ON_CLOSE": "maybe"})


def test_the_audits_fold_and_items_take_the_same_words():
    from dlq_dashboard.entries.audit import is_folded

    assert is_folded({"fold": "off"}, True) is False and is_folded({"fold": "YES"}, False) is True
    assert is_folded({}, True) is True and is_folded({"fold": "on", "job": "3"}, True) is False
    with pytest.raises(InvalidRequest, match="^fold 'maybe' is not valid: use one of true, false"):
        is_folded({"fold": "maybe"}, True)
