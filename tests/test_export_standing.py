"""A streamed export goes on after its request was let in: what stops its caller stops it (a
token revoked, a session ended, a role or scopes narrowed), between two of its chunks; what does
not take anything away from them (a role raised) lets it finish."""

from __future__ import annotations

import json
import threading

import pytest
import requests

from dlq_dashboard.accounts import (create_token, end_sessions, get_user, revoke_token, set_disabled, set_password,
                                    set_role_and_scopes)
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import parse_scopes
from dlq_dashboard.web import export

from . import support

ENTRIES = 6
REVOKED = "The export stopped: the API token was revoked or deleted, or its user disabled."


@pytest.fixture
def each_chunk_asks(monkeypatch):
    """Every piece of an export its own chunk, and the caller asked about before each."""
    monkeypatch.setattr(export, "CHUNK_BYTES", 1)
    monkeypatch.setattr(export, "CHECK_SECONDS", 0.0, raising=False)


def dead_letters(app) -> None:
    for seq in range(1, ENTRIES + 1):
        support.dead_letter(app, seq, subject="orders.created" if seq % 2 else "orders.updated",
                            payload=b'{"email": "a@example.com"}')


def test_a_token_revoked_while_its_export_streams_cuts_the_export_off_saying_why(offline_app, each_chunk_asks,
                                                                                   monkeypatch):
    dead_letters(offline_app)
    engine = runtime_of(offline_app).engine
    token = create_token(engine, "t-exp", "viewer")
    revoked = threading.Event()
    made = getattr(export, "reading_check", None)

    def after_the_revoke(reader):
        check = made(reader)

        def why_not():
            assert revoked.wait(10)
            return check()
        return why_not

    monkeypatch.setattr(export, "reading_check", after_the_revoke, raising=False)
    server, thread = support.serve_in_thread(offline_app)
    try:
        url = f"http://127.0.0.1:{server.effective_port}/api/export.ndjson"
        with requests.get(url, headers=support.bearer(token), stream=True, timeout=10) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            first = json.loads(next(lines))
            revoke_token(engine, "t-exp")
            revoked.set()
            rest: list[dict] = []
            with pytest.raises(requests.exceptions.ChunkedEncodingError):  # no end of the chunked body
                for line in lines:
                    rest.append(json.loads(line))
    finally:
        support.stop_serving(server, thread)
    assert first["id"] and rest == [{"error": REVOKED}]


WITHDRAWALS = {
    "logged-out": (lambda app, client, engine: client.post(
        "/logout", data={"csrf_token": support.csrf_token(client, "/")}), "the session ended"),
    "password-changed": (lambda app, client, engine: set_password(engine, "operator-user", "another-password-123"),
                         "the session ended"),
    "sessions-ended": (lambda app, client, engine: end_sessions(engine, get_user(engine, "operator-user").id),
                       "the session ended"),
    "disabled": (lambda app, client, engine: set_disabled(engine, "operator-user", True), "the session ended"),
    "role-lowered-under-a-mask": (lambda app, client, engine: set_role_and_scopes(engine, "operator-user", "viewer",
                                                                                  None), "may read less now"),
    "scopes-narrowed": (lambda app, client, engine: set_role_and_scopes(
        engine, "operator-user", "operator", parse_scopes(["orders.created"])), "may read less now"),
}


@pytest.mark.parametrize("fmt", ["csv", "json"])
@pytest.mark.parametrize("withdrawal", list(WITHDRAWALS))
def test_a_session_export_stops_when_its_user_may_no_longer_read_it(make_app, each_chunk_asks, withdrawal, fmt,
                                                                    caplog):
    app = make_app(mask=("/email",))
    dead_letters(app)
    client = support.logged_in(app, "operator")
    response = client.get(f"/api/export.{fmt}", buffered=False)
    assert response.status_code == 200
    chunks = iter(response.response)
    sent = [next(chunks)]
    withdraw, why = WITHDRAWALS[withdrawal]
    withdraw(app, client, runtime_of(app).engine)
    with pytest.raises(export.ExportStopped, match=why):
        for chunk in chunks:
            sent.append(chunk)
    assert len(sent) == 1  # nothing after the withdrawal: a JSON array's "[" or a CSV's header row
    assert "The export stopped: " in caplog.text and why in caplog.text


@pytest.mark.both_databases
def test_an_export_whose_caller_may_read_as_much_or_more_goes_to_its_end(offline_app, each_chunk_asks):
    dead_letters(offline_app)
    engine = runtime_of(offline_app).engine
    token = create_token(engine, "t-exp", "viewer", parse_scopes(["orders.>"]))
    client = support.logged_in(offline_app, "viewer")
    for caller, headers in ((offline_app.test_client(), support.bearer(token)), (client, {})):
        response = caller.get("/api/export.ndjson", headers=headers, buffered=False)
        chunks = iter(response.response)
        first = next(chunks)
        set_role_and_scopes(engine, "viewer-user", "operator", None)  # raised: sees more, not less
        lines = (first + b"".join(chunks)).splitlines()
        assert len(lines) == ENTRIES and all("id" in json.loads(line) for line in lines)
