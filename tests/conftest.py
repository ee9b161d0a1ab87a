"""Shared fixtures: a real nats-server on a free port with a temporary store, the app over a
real SQLite file, and users of each role."""

from __future__ import annotations

import pytest

from dlq_dashboard import create_app
from dlq_dashboard.accounts import create_token, create_user
from dlq_dashboard.config import Settings
from dlq_dashboard.natsserver import NatsServer

from .helpers import login, wait_for

PASSWORD = "correct horse battery"


@pytest.fixture
def nats_server(tmp_path):
    """A fresh JetStream-enabled nats-server on 127.0.0.1, stopped after the test."""
    server = NatsServer(store_dir=tmp_path / "nats", log_path=tmp_path / "nats.log").start()
    yield server
    server.stop()


def make_settings(tmp_path, nats_url: str | None = None, **changes) -> Settings:
    """Settings for a test: a SQLite file in tmp_path, the given server."""
    return Settings(database_url=f"sqlite:///{tmp_path}/dlq.sqlite3",
                    nats_urls=(nats_url,) if nats_url else ("nats://127.0.0.1:1",),
                    instance_path=str(tmp_path / "instance"), secret_key="test-secret",
                    connect_timeout=2.0, **changes)


@pytest.fixture
def settings(tmp_path, nats_server):
    return make_settings(tmp_path, nats_server.url)


@pytest.fixture
def app(settings):
    """The app with its bridge and mirror running against the test's nats-server."""
    application = create_app({"SETTINGS": settings, "TESTING": True})
    runtime = application.extensions["dlq"]
    runtime.start()
    assert runtime.bridge.wait_connected(10), "the bridge did not connect"
    # The streams exist once the mirror follows them: tests may publish from here on.
    wait_for(lambda: all(p.epoch for p in runtime.mirror.progress.values()), message="the mirror to start")
    yield application
    runtime.stop()


@pytest.fixture
def offline_app(tmp_path):
    """The app over a real SQLite file with nothing started (no NATS, no mirror)."""
    application = create_app({"SETTINGS": make_settings(tmp_path), "TESTING": True})
    yield application
    application.extensions["dlq"].stop()


@pytest.fixture
def tokens(request):
    """API tokens for each role, for whichever app the test uses."""
    app = request.getfixturevalue("app") if "app" in request.fixturenames else request.getfixturevalue("offline_app")
    engine = app.extensions["dlq"].engine
    return {role: create_token(engine, f"test-{role}", role) for role in ("viewer", "operator", "admin")}


def bearer(token: str) -> dict[str, str]:
    """The Authorization header for an API token."""
    return {"Authorization": f"Bearer {token}"}


def logged_in(app, role: str):
    """A test client logged in as a new user with ``role``."""
    engine = app.extensions["dlq"].engine
    name = f"{role}-user"
    try:
        create_user(engine, name, PASSWORD, role)
    except ValueError:
        pass
    client = app.test_client()
    response = login(client, name, PASSWORD)
    assert response.status_code == 302, response.get_data(as_text=True)
    return client


# --- a live server and a real browser (Debian's Chromium driven by Playwright) ---------------

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


@pytest.fixture
def live_server(app):
    """The app served by waitress on 127.0.0.1 and a free port, in a thread; yields its base URL."""
    import threading

    import waitress

    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=4)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.effective_port}"
    server.close()
    thread.join(5)


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium from Debian (never a downloaded browser)."""
    import os

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A fresh browser context and page; closed after the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


def browser_login(page, base_url: str, app, role: str):
    """Create a user with ``role`` and log the browser page in as them."""
    engine = app.extensions["dlq"].engine
    name = f"{role}-browser"
    try:
        create_user(engine, name, PASSWORD, role)
    except ValueError:
        pass
    page.goto(f"{base_url}/login")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login" not in url)
