"""Fixtures: a real nats-server on a free port with a temporary store, the app over a real SQLite
file, logins and tokens by role, a live server and Debian's Chromium. Helpers live in support.py."""

from __future__ import annotations

import os
import threading

import pytest
import waitress
from hypothesis import settings

from dlq_dashboard import create_app
from dlq_dashboard.accounts import create_token
from dlq_dashboard.nats.server import NatsServer
from dlq_dashboard.runtime import Runtime, runtime_of

from . import support
from .postgres import PostgresServer

DATABASES = ("sqlite", "postgresql")

# Generated tests run the same examples every time ("ci"); HYPOTHESIS_PROFILE=long runs many
# more, random ones (README: "A longer random run").
settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=400)
settings.register_profile("long", max_examples=50_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    config.addinivalue_line("markers", "both_databases: run the test on SQLite and on PostgreSQL")
    config.addinivalue_line("markers", "installed: builds the wheel, installs it in a fresh venv outside the "
                                       "checkout and runs the installed dlq-dashboard command")


def pytest_generate_tests(metafunc):
    """A test marked ``both_databases`` runs once on SQLite and once on PostgreSQL."""
    if metafunc.definition.get_closest_marker("both_databases") and "database_url" in metafunc.fixturenames:
        metafunc.parametrize("database_url", DATABASES, indirect=True)


@pytest.fixture(scope="session")
def postgres_server():
    """One PostgreSQL server for the session, started when a test first needs it."""
    server = PostgresServer().start()
    yield server
    server.remove()


@pytest.fixture
def database_url(request, tmp_path):
    """The test's database: a SQLite file in tmp_path, or (parametrized) a new PostgreSQL database."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield f"sqlite:///{tmp_path}/dlq.sqlite3"
        return
    server = request.getfixturevalue("postgres_server")
    url = server.create_database()
    yield url
    server.drop_database(url)


@pytest.fixture
def nats_server(tmp_path):
    """A fresh JetStream-enabled nats-server on 127.0.0.1, stopped after the test."""
    server = NatsServer(store_dir=tmp_path / "nats", log_path=tmp_path / "nats.log").start()
    yield server
    server.stop()


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """Settings over the test's database and nats-server."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url)


@pytest.fixture
def app(settings):
    """The app with its bridge and mirror running against the test's nats-server."""
    application = create_app({"SETTINGS": settings, "TESTING": True})
    runtime = runtime_of(application)
    runtime.start()
    assert runtime.bridge.wait_connected(10), "the bridge did not connect"
    # The streams exist once the mirror follows them: tests may publish from here on.
    support.wait_for(lambda: all(p.epoch for p in runtime.mirror.progress.values()), message="the mirror to start")
    yield application
    runtime.stop()


@pytest.fixture
def offline_app(tmp_path, database_url):
    """The app over the test's database with nothing started (no NATS, no mirror)."""
    application = create_app({"SETTINGS": support.make_settings(tmp_path, database_url=database_url),
                              "TESTING": True})
    yield application
    runtime_of(application).stop()


@pytest.fixture
def rt(request) -> Runtime:
    """The Runtime of whichever app the test uses (``app`` if it asks for it, else ``offline_app``)."""
    return runtime_of(_the_app(request))


def _the_app(request):
    return request.getfixturevalue("app" if "app" in request.fixturenames else "offline_app")


@pytest.fixture
def tokens(request) -> dict[str, str]:
    """API tokens for each role, for whichever app the test uses."""
    engine = runtime_of(_the_app(request)).engine
    return {role: create_token(engine, f"test-{role}", role) for role in ("viewer", "operator", "admin")}


class AuthActions:
    """Logging in and out as a role, as flaskr's tests do (users are made on first use)."""

    def __init__(self, app):
        self.app = app

    def client(self, role: str):
        """A new test client logged in as a user with ``role``."""
        return support.logged_in(self.app, role)

    def login(self, client, name: str, password: str = support.PASSWORD):
        """Post the login form; returns the response."""
        return support.login(client, name, password)

    def logout(self, client):
        """Post the logout form; returns the response."""
        return client.post("/logout", data={"csrf_token": support.csrf_token(client, "/")})


@pytest.fixture
def auth(request) -> AuthActions:
    """Log in and out as a role on whichever app the test uses."""
    return AuthActions(_the_app(request))


@pytest.fixture
def live_server(app):
    """The app served by waitress on 127.0.0.1 and a free port, in a thread; yields its base URL."""
    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=4)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.effective_port}"
    server.close()
    thread.join(5)


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium from Debian (never a downloaded browser)."""
    if not os.path.exists(support.CHROMIUM):
        pytest.fail(f"{support.CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=support.CHROMIUM, args=support.CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    """A fresh browser context and page; closed after the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


def pytest_collection_modifyitems(config, items):
    """Run browser tests last: once Playwright's sync API has started, its event loop stays
    running in the main thread for the rest of the session (support.run works around it;
    code under test that starts a loop of its own in that thread could not)."""
    items.sort(key=lambda item: "browser" in getattr(item, "fixturenames", ()))
