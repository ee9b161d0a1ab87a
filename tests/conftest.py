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


# --- operator actions: a target stream, dead letters mirrored into entries -------------------
# (used by tests/test_actions.py, tests/test_actions_browser.py and tests/test_jobs.py)

def run_aside(coro):
    """Run a coroutine on a fresh loop in another thread: a Playwright test's thread already runs one."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def make_orders_stream(url: str, **config) -> None:
    """Create stream ORDERS over ``orders.>``, the stream republishes go to."""
    import nats

    async def create():
        nc = await nats.connect(url)
        try:
            await nc.jetstream().add_stream(name="ORDERS", subjects=["orders.>"], **config)
        finally:
            await nc.close()

    run_aside(create())


def dead_letter_orders(app, url: str, payloads: list[bytes], *, subject: str = "orders.created",
                       headers: dict | None = None) -> list[int]:
    """Dead-letter ``payloads`` of ``subject`` into the DLQ, wait for the mirror, return the new entry ids."""
    from sqlalchemy import func, select

    from dlq_dashboard.models import Entry

    from .helpers import dlq_headers, publish_fast, wait_for

    engine = app.extensions["dlq"].engine

    def count():
        with engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(Entry)).scalar()

    before = count()
    base = {**dlq_headers(subject, Dlq_Reason="fatal", Dlq_Error="handler failed"), **(headers or {})}
    run_aside(publish_fast(url, f"dlq.{subject}", len(payloads), lambda i: (payloads[i], dict(base))))
    wait_for(lambda: count() >= before + len(payloads), timeout=30, message="the mirror to store the dead letters")
    with engine.connect() as conn:
        return list(conn.execute(select(Entry.id).order_by(Entry.id).offset(before)).scalars())


def stream_messages(url: str, stream: str = "ORDERS") -> list:
    """Every message a stream holds now (RawStreamMsg, by sequence)."""
    import nats
    from nats.js.errors import NotFoundError

    async def read():
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            info = await js.stream_info(stream)
            found = []
            if not info.state.messages:
                return found
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                try:
                    found.append(await js.get_msg(stream, seq))
                except NotFoundError:
                    pass
            return found
        finally:
            await nc.close()

    return run_aside(read())


# --- dead letters written straight through the mirror's ingest (pages and store tests) --------

def dead_letter(app_or_engine, seq: int, subject: str | None = "orders.created", payload: bytes = b"{}",
                stream: str = "DLQ", stored_at=None, **headers: str) -> int:
    """Store one DLQ message as the mirror would (ingest_dlq_batch) and return its entry id.

    ``headers`` are given with underscores for dashes (Dlq_Reason="fatal").
    """
    from sqlalchemy import select

    from dlq_dashboard.ingest import StreamMessage, ingest_dlq_batch
    from dlq_dashboard.models import Entry

    engine = getattr(app_or_engine, "extensions", None) and app_or_engine.extensions["dlq"].engine or app_or_engine
    values = {k.replace("_", "-"): v for k, v in headers.items()}
    if subject is not None:
        values.setdefault("Dlq-Original-Subject", subject)
    from dlq_dashboard.contract import utcnow

    ingest_dlq_batch(engine, stream, "e1", [StreamMessage(seq, f"dlq.{subject or 'unknown'}", values or None,
                                                          payload, stored_at or utcnow())])
    with engine.connect() as conn:
        return conn.execute(select(Entry.id).where(Entry.dlq_stream == stream, Entry.dlq_seq == seq)).scalar_one()


def pytest_collection_modifyitems(config, items):
    """Run browser tests last: once Playwright's sync API has started, its event loop stays
    running in the main thread, and tests that call asyncio.run() directly would fail."""
    items.sort(key=lambda item: "browser" in getattr(item, "fixturenames", ()))


def orders_schema_folder(tmp_path, schema: dict | None = None) -> str:
    """A DLQ_SCHEMAS folder whose orders.json covers orders.* (by default: customer_id required)."""
    import json

    folder = tmp_path / "schemas"
    folder.mkdir(exist_ok=True)
    (folder / "orders.json").write_text(json.dumps(
        schema or {"x-subjects": ["orders.*"], "type": "object", "required": ["customer_id"]}))
    return str(folder)
