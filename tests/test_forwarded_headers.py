"""`python app.py` behind a reverse proxy that ends TLS: waitress hands X-Forwarded-Proto and
X-Forwarded-For to the app, which believes them from DLQ_TRUSTED_PROXIES only (docs/deploy.md,
"TLS in front"; docs/security.md, the login throttle). The test client never passes through
waitress, which by default removes these headers before the app sees them."""

from __future__ import annotations

import http.client
import os
import re
from urllib.parse import urlencode

import pytest

from dlq_dashboard.accounts import create_user
from dlq_dashboard.db.engine import create_db_engine, dispose_quietly

from . import support
from .test_replicas import Replica

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

PROXY = "127.0.0.1"  # in DLQ_TRUSTED_PROXIES
STRANGER = "127.0.0.2"  # another peer on the loopback, not in it
WRONG = "not-the-password"


class Answer:
    def __init__(self, response: http.client.HTTPResponse):
        self.status = response.status
        self.headers = response.headers
        self.text = response.read().decode("utf-8", "replace")

    def session_cookie(self) -> str:
        [cookie] = [h for h in self.headers.get_all("Set-Cookie") or () if h.startswith("session=")]
        return cookie


def ask(port: int, peer: str, method: str, path: str, headers: dict[str, str], body: str | None = None) -> Answer:
    """One request to the dashboard on 127.0.0.1, sent from the address ``peer``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(peer, 0))
    try:
        conn.request(method, path, body=body, headers=headers)
        return Answer(conn.getresponse())
    finally:
        conn.close()


def login(port: int, peer: str, name: str, password: str, client: str) -> int:
    """Post the login form from ``peer`` saying it is for ``client`` (X-Forwarded-For); the status."""
    page = ask(port, peer, "GET", "/login", {"X-Forwarded-For": client})
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    cookie = page.session_cookie().split(";", 1)[0]
    form = urlencode({"username": name, "password": password, "csrf_token": token})
    return ask(port, peer, "POST", "/login", {"X-Forwarded-For": client, "Cookie": cookie,
                                              "Content-Type": "application/x-www-form-urlencoded"}, form).status


@pytest.fixture
def dashboard(tmp_path, nats_server):
    """`python app.py` with DLQ_TRUSTED_PROXIES=127.0.0.1 and two users; its port."""
    url = support.migrated_sqlite(tmp_path / "dlq.sqlite3")
    engine = create_db_engine(url)
    try:
        for name in ("proxied", "direct"):
            create_user(engine, name, support.PASSWORD, "viewer")
    finally:
        dispose_quietly(engine)
    env = {**os.environ, "DATABASE_URL": url, "NATS_URL": nats_server.url, "SECRET_KEY": "forwarded",
           "DLQ_TRUSTED_PROXIES": PROXY, "PYTHONUNBUFFERED": "1"}
    app = Replica("app", tmp_path, env).start()
    try:
        yield app.port
    finally:
        app.stop()


def test_app_py_believes_forwarded_https_and_client_addresses_from_a_trusted_proxy_only(dashboard):
    port = dashboard

    # From the trusted proxy: HTTPS it ended gives a Secure cookie and HSTS.
    page = ask(port, PROXY, "GET", "/login", {"X-Forwarded-Proto": "https"})
    assert "Secure" in page.session_cookie()
    assert page.headers["Strict-Transport-Security"] == "max-age=31536000"
    # And each client it names is counted apart: 5 failures lock the name from that client only.
    for _ in range(5):
        assert login(port, PROXY, "proxied", WRONG, "10.0.0.1") == 401
    assert login(port, PROXY, "proxied", WRONG, "10.0.0.1") == 429
    assert login(port, PROXY, "proxied", support.PASSWORD, "10.0.0.2") == 302

    # From any other peer the same headers are not believed: plain HTTP, and one address.
    page = ask(port, STRANGER, "GET", "/login", {"X-Forwarded-Proto": "https"})
    assert "Secure" not in page.session_cookie()
    assert "Strict-Transport-Security" not in page.headers
    for _ in range(5):
        assert login(port, STRANGER, "direct", WRONG, "10.0.0.1") == 401
    assert login(port, STRANGER, "direct", support.PASSWORD, "10.0.0.2") == 429
