"""The login throttle counts a user name from an address, and slows an address (or a name tried
from everywhere) down instead of locking everyone behind it. On SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from dlq_dashboard.accounts import create_user
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import wait_in_words

from . import support

pytestmark = pytest.mark.both_databases


@pytest.fixture
def engine(probe_app):
    return runtime_of(probe_app).engine


def attempt(client, name: str, password: str, address: str = "127.0.0.1"):
    """Post the login form from ``address``."""
    token = support.csrf_token(client)
    return client.post("/login", data={"username": name, "password": password, "csrf_token": token},
                       environ_base={"REMOTE_ADDR": address})


def test_twenty_failed_logins_from_one_address_do_not_stop_another_user_signing_in_from_it(probe_app, engine):
    create_user(engine, "colleague", support.PASSWORD, "viewer")
    client = probe_app.test_client()
    for name in ("anna", "ben", "cleo", "dan"):
        for _ in range(5):
            assert attempt(client, name, "guess-guess", "198.51.100.7").status_code == 401
    assert attempt(probe_app.test_client(), "colleague", support.PASSWORD, "198.51.100.7").status_code == 302
    refused = attempt(client, "anna", "guess-guess", "198.51.100.7")
    assert refused.status_code == 429 and 0 < int(refused.headers["Retry-After"]) <= 300
    assert "Too many failed logins for this user name from this address. Try again in 5 minutes." \
        in refused.get_data(as_text=True)
    # The name is locked from that address only: from another one the password is checked.
    assert attempt(client, "anna", "guess-guess", "203.0.113.9").status_code == 401


def test_an_address_with_many_failures_is_slowed_and_never_locked(probe_app, engine):
    create_user(engine, "colleague", support.PASSWORD, "viewer")
    now = [datetime(2026, 12, 1, 9)]
    probe_app.extensions["dlq_login_throttle"].clock = lambda: now[0]
    client = probe_app.test_client()
    waits = []
    for i in range(26):
        response = attempt(client, f"typo{i}", "guess-guess", "198.51.100.7")
        if response.status_code == 429:
            waits.append(int(response.headers["Retry-After"]))
            now[0] += timedelta(seconds=waits[-1])
            response = attempt(client, f"typo{i}", "guess-guess", "198.51.100.7")
        assert response.status_code == 401, (i, response.get_data(as_text=True))
    assert waits == [1, 2, 4, 8, 16]  # after the 20 free failures, growing; at most 30 s
    refused = attempt(client, "colleague", support.PASSWORD, "198.51.100.7")
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "30"
    assert "Many failed logins came from this address, so each attempt from it waits a little longer. " \
           "Try again in 30 seconds." in refused.get_data(as_text=True)
    now[0] += timedelta(seconds=30)
    assert attempt(client, "colleague", support.PASSWORD, "198.51.100.7").status_code == 302


def test_one_name_failing_from_many_addresses_is_slowed_everywhere(probe_app, engine):
    create_user(engine, "ops", support.PASSWORD, "viewer")
    now = [datetime(2026, 12, 1, 9)]
    probe_app.extensions["dlq_login_throttle"].clock = lambda: now[0]
    client = probe_app.test_client()
    for i in range(21):
        assert attempt(client, "ops", "guess-guess", f"192.0.2.{i + 1}").status_code == 401
    refused = attempt(client, "ops", support.PASSWORD, "198.51.100.200")
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    assert "Many failed logins were made for this user name" in refused.get_data(as_text=True)
    assert attempt(client, "someone-else", "guess-guess", "198.51.100.200").status_code == 401
    now[0] += timedelta(seconds=1)
    assert attempt(client, "ops", support.PASSWORD, "198.51.100.200").status_code == 302


@pytest.mark.parametrize("seconds, words", [(1, "1 second"), (30, "30 seconds"), (119, "119 seconds"),
                                            (120, "2 minutes"), (299, "5 minutes"), (300, "5 minutes"),
                                            (301, "6 minutes")])
def test_a_wait_is_said_in_seconds_then_in_whole_minutes_never_shorter(seconds, words):
    assert wait_in_words(seconds) == words


def test_head_of_the_login_page_answers_as_get_and_is_never_a_login_attempt(probe_app, engine):
    # A health check or link checker asking HEAD /login from one address: a 200 without a body
    # each time, and nothing counted against that address.
    create_user(engine, "colleague", support.PASSWORD, "viewer")
    client = probe_app.test_client()
    for _ in range(30):
        response = client.head("/login", environ_base={"REMOTE_ADDR": "198.51.100.7"})
        assert response.status_code == 200 and response.get_data() == b""
        assert "Retry-After" not in response.headers
    assert attempt(probe_app.test_client(), "colleague", support.PASSWORD, "198.51.100.7").status_code == 302
    assert attempt(client, "anna", "guess-guess", "198.51.100.7").status_code == 401  # not throttled
