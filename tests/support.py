"""What tests share besides fixtures: waiting with a deadline, running a coroutine, publishing to
a real server, dead-lettering into the mirror, logging in. Imported as ``from . import support``.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import jinja2
import nats
from sqlalchemy import func, select

from dlq_dashboard.accounts import create_user
from dlq_dashboard.actions.bulk.jobs import FINISHED
from dlq_dashboard.config import Settings
from dlq_dashboard.db.engine import create_db_engine
from dlq_dashboard.db.installation import installation_id, new_installation_id
from dlq_dashboard.db.migrate import migrate
from dlq_dashboard.db.models import Base, Entry, Job
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.nats.server import parent_death_signal
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

PASSWORD = "correct horse battery"
CHROMIUM = "/usr/bin/chromium"
#: Playwright's own ``--disable-features`` list (as of 1.65). Chromium reads only the last
#: ``--disable-features`` of its command line, so the one below carries these too;
#: tests/test_smoke_browser.py fails when Playwright's list has grown.
PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync", "DestroyProfileOnBrowserClose", "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable", "LensOverlay", "MediaRouter", "PaintHolding", "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect", "TcpPortRandomizationWin", "OptimizationHints", "NetworkTimeServiceQuerying",
    "AimEnabled", "PreconnectToSearch", "msForceBrowserSignIn", "msEdgeUpdateLaunchServicesPreferredVersion",
)
#: What a headless test browser never shows but pays for with every new browser context (each
#: test's ``page``): the omnibox's popups, web pages of their own (chrome://omnibox-popup.top-chrome)
#: that each new window loads in a renderer, about 0.45 s of CPU a context; and the spare renderer
#: started ahead of the next navigation, which a new context cannot use (two renderer processes
#: a context instead of one). docs/PERFORMANCE.md, "The browser tests' CPU".
UNUSED_CHROMIUM_FEATURES = ("WebUIOmniboxPopup", "WebUIOmniboxAimPopup", "SpareRendererForSitePerProcess")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                 "--disable-features=" + ",".join(PLAYWRIGHT_DISABLED_FEATURES + UNUSED_CHROMIUM_FEATURES)]

# A long random run (README): generated tests run random examples, many times more of them.
LONG_RUN = os.environ.get("HYPOTHESIS_PROFILE") == "long"
FUZZ_SCALE = 50 if LONG_RUN else 1


# --- time and coroutines ---------------------------------------------------------------------

def wait_for(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02, message: str = ""):
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {message or condition} (last: {last!r})")


def jobs_settled(engine, timeout: float = 30.0) -> None:
    """Wait until no bulk job runs (a job changes entries by itself, after its request)."""
    def running() -> int:
        with engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(Job).where(Job.state.not_in(FINISHED))).scalar()
    wait_for(lambda: running() == 0, timeout=timeout, message="the bulk jobs to finish")


def run(coro, timeout: float | None = None):
    """Run a coroutine on a fresh event loop and return its result (tests are synchronous).

    ``timeout`` bounds the whole coroutine. Playwright's sync API keeps an event loop running
    in the main thread while a browser is open; then the coroutine runs on a loop of its own
    in a worker thread.
    """
    if timeout is not None:
        coro = asyncio.wait_for(coro, timeout)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def ends_with_this_process(sig: int = signal.SIGTERM):
    """A ``preexec_fn`` for a process a test starts (a server, a dashboard): the kernel sends it
    ``sig`` when the thread that started it ends, so a pytest process killed before its teardown
    leaves nothing of its own running (Linux; tests/test_killed_run.py). Tests start their servers
    from the main thread, which ends with the process."""
    return parent_death_signal(sig)


def children(pid: int) -> list[int]:
    """The PIDs of process ``pid``'s children (from /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return found


def descendants(pid: int) -> list[int]:
    """The PIDs of ``pid``'s children, theirs, and so on (from /proc)."""
    found, todo = [], deque(children(pid))
    while todo:
        child = todo.popleft()
        found.append(child)
        try:
            todo.extend(children(child))
        except FileNotFoundError:
            pass
    return found


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended: no longer there, or a zombie its new parent has not reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        # Reaped before the open (no file), or between the open and the read (ESRCH).
        return True


def process_state(pid: int) -> str:
    """Process ``pid``'s scheduler state as /proc tells it ("T": stopped), or "gone"."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return "gone"


def assert_child_ends_with_its_parent(code: str, what: str) -> None:
    """Run ``code`` in a Python process of its own (it prints the pid of a child it started),
    kill that process as a crash would, and wait for the orphaned child to end. What the killed
    process cannot remove (multiprocessing's directory, a forkserver's socket) goes in a
    temporary directory of its own, removed here."""
    root = Path(__file__).resolve().parent.parent
    with killed_processes_tmpdir() as scratch:
        parent = subprocess.Popen([sys.executable, "-c", code], cwd=root, stdout=subprocess.PIPE, text=True,
                                  env={**os.environ, "TMPDIR": str(scratch)}, preexec_fn=ends_with_this_process())
        try:
            child = int(parent.stdout.readline())
            assert not gone(child)
            parent.send_signal(signal.SIGKILL)
            parent.wait(timeout=30)
            wait_for(lambda: gone(child), timeout=30, message=f"the orphaned {what} to exit")
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.wait()


@contextmanager
def killed_processes_tmpdir() -> Iterator[Path]:
    """A TMPDIR for processes a test kills with -9: what they cannot remove (multiprocessing's
    directories, a forkserver's socket) is removed afterwards. Not under pytest's tmp_path, which
    is too long a prefix for a Unix socket's path (at most 107 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="dlq-tmp-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


#: What changes by itself whatever the requests do: written by the mirror's own threads (its
#: lease and positions) and by the search pass behind it (its position, a thread of the mirror's
#: writer, every second); a token's and a session's last use are records of the request itself
#: (once a minute). None: the whole table.
CHANGES_BY_ITSELF = {"leases": None, "mirror_state": None, "search_position": None,
                     "api_tokens": {"last_used_at"}, "sessions": {"last_seen_at"}}


def table_rows(engine) -> dict[str, list[tuple]]:
    """Every row of every table, but for what changes by itself (CHANGES_BY_ITSELF)."""
    tables = {}
    with engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            if table.name in CHANGES_BY_ITSELF and CHANGES_BY_ITSELF[table.name] is None:
                continue
            skip = CHANGES_BY_ITSELF.get(table.name) or set()
            columns = [c for c in table.columns if c.name not in skip]
            tables[table.name] = [tuple(r) for r in conn.execute(select(*columns).order_by(*table.primary_key.columns))]
    return tables


# --- databases migrated once a process --------------------------------------------------------

_sqlite_template: Path | None = None


def sqlite_template() -> Path:
    """A SQLite file migrated to the newest revision, made on first use in this process (each
    xdist worker has its own) and removed when the process ends."""
    global _sqlite_template
    if _sqlite_template is None:
        folder = Path(tempfile.mkdtemp(prefix="dlq-template-"))
        atexit.register(shutil.rmtree, folder, True)
        path = folder / "dlq.sqlite3"
        engine = create_db_engine(f"sqlite:///{path}")
        try:
            migrate(engine)
            with engine.connect() as conn:  # everything in the file itself, nothing left in -wal
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            engine.dispose()
        _sqlite_template = path
    return _sqlite_template


def migrated_sqlite(path) -> str:
    """The URL of a SQLite database at ``path`` already at the newest revision: a copy of the
    process's template (a file copy instead of running every revision again)."""
    shutil.copy(sqlite_template(), path)  # shutil.copy keeps the template's mode, 0600
    with sqlite3.connect(path) as conn:  # each database its own installation id, as a migration makes it
        conn.execute("UPDATE installation SET installation_id = ?", (new_installation_id(),))
    conn.close()
    return f"sqlite:///{path}"


# --- apps ---------------------------------------------------------------------------------------

class CompiledTemplates(jinja2.BytecodeCache):
    """Jinja's bytecode cache in memory, shared by every app a test process makes: a template is
    compiled once a process instead of once an app (Jinja checks the source's checksum, so an
    edited template is compiled again)."""

    def __init__(self):
        self._code: dict[str, bytes] = {}

    def load_bytecode(self, bucket) -> None:
        if bucket.key in self._code:
            bucket.bytecode_from_string(self._code[bucket.key])

    def dump_bytecode(self, bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()


COMPILED_TEMPLATES = CompiledTemplates()


def start(app):
    """Start an app's runtime and wait until it is ready: the bridge connected, the mirror
    following its streams (they exist then: a test may publish) and the jobs' first recovery
    pass run (recovered_first). Returns the app."""
    runtime = runtime_of(app)
    runtime.start()
    assert runtime.bridge.wait_connected(10), "the bridge did not connect"
    wait_for(lambda: all(p.epoch for p in runtime.mirror.progress.values()), message="the mirror to start")
    return recovered_first(app)


def recovered_first(app):
    """Wait for the jobs' first recovery pass of a started app: it finishes every pending intent
    at once, whatever its age, so an intent a test leaves pending on purpose (a simulated crash)
    before that pass has run could be finished behind its back. Returns the app."""
    assert runtime_of(app).jobs.recovered.wait(10), "the jobs' first recovery pass did not run"
    return app


def add_probes(app):
    """Routes that answer who is asking, one per role, for a GET page, a form and the API."""
    from flask import jsonify

    from dlq_dashboard.web.auth import actor_name, current_identity, requires

    @requires("viewer")
    def who():
        identity = current_identity()
        return jsonify(actor=actor_name(), role=identity.role, via=identity.via)

    app.add_url_rule("/probe/viewer", "probe_viewer", who, methods=["GET", "POST"])
    app.add_url_rule("/probe/operator", "probe_operator", requires("operator")(lambda: actor_name()))
    app.add_url_rule("/api/probe", "api_probe", requires("viewer")(lambda: jsonify(actor=actor_name())),
                     methods=["GET", "POST"])
    return app


# --- a real nats-server ----------------------------------------------------------------------

def make_settings(tmp_path, nats_url: str | None = None, *, database_url: str | None = None,
                  **changes) -> Settings:
    """Settings for a test: the given database (a SQLite file in tmp_path by default) and
    server (or a closed port)."""
    return Settings(database_url=database_url or f"sqlite:///{tmp_path}/dlq.sqlite3",
                    nats_urls=(nats_url,) if nats_url else ("nats://127.0.0.1:1",),
                    instance_path=str(tmp_path / "instance"), secret_key="test-secret",
                    **{"connect_timeout": 2.0, **changes})


#: nats-server's configuration of two accounts with JetStream, each with one user (SPEC section
#: 12: two sources may share a server but not an account). Their URLs: account_url(server, "a").
TWO_ACCOUNTS = """accounts {
  A: { jetstream: enabled, users: [{user: a, password: pa}] }
  B: { jetstream: enabled, users: [{user: b, password: pb}] }
}"""


def account_url(server, user: str) -> str:
    """The URL of ``server`` signed in as ``user`` of TWO_ACCOUNTS (its password: "p" + user)."""
    return f"nats://{user}:p{user}@127.0.0.1:{server.port}"


def sources_file(tmp_path, sources: list[dict]) -> str:
    """A DLQ_CONFIG file of ``sources`` (each a dict of a [[sources]] table); returns its path."""
    path = tmp_path / "dlq-sources.toml"
    lines = []
    for source in sources:
        lines.append("[[sources]]")
        lines.extend(f"{key} = {json.dumps(value)}" for key, value in source.items())
        lines.append("")
    path.write_text("\n".join(lines))
    return str(path)


def start_sources(app, timeout: float = 20.0):
    """Start an app of several sources and wait until every source's mirror follows its streams
    (start() waits for the main one only). Returns the app."""
    runtime = runtime_of(app)
    runtime.start()
    wait_for(lambda: all(feed.mirror is not None and all(p.epoch for p in feed.mirror.progress.values())
                         for feed in runtime.feeds.values()), timeout=timeout, message="every source's mirror")
    return recovered_first(app)


async def first_delivery(js, stream: str, subject: str, durable: str, payload: bytes):
    """A stream ``stream`` of ``subject``'s first token (``ship.sent``: ``ship.>``) holding
    ``payload``, and that message as a pull consumer ``durable`` delivers it, not acknowledged
    (to be terminated, naked or dead-lettered by the test)."""
    from nats.js.api import AckPolicy, ConsumerConfig

    every = subject.split(".")[0] + ".>"
    await js.add_stream(name=stream, subjects=[every])
    await js.publish(subject, payload)
    await js.add_consumer(stream, ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT))
    sub = await js.pull_subscribe(every, durable=durable, stream=stream)
    return (await sub.fetch(1, timeout=2))[0]


async def publish_many(url: str, messages: list[tuple[str, bytes, dict | None]]) -> list:
    """Publish (subject, payload, headers) messages through JetStream; returns the PubAcks."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        return [await js.publish(subject, payload, headers=headers) for subject, payload, headers in messages]
    finally:
        await nc.close()


async def publish_fast(url: str, subject: str, count: int, make: Callable[[int], tuple[bytes, dict]]) -> None:
    """Publish ``count`` messages with publish_async in windows (for large backlogs)."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(publish_async_max_pending=512)
        for i in range(count):
            payload, headers = make(i)
            await js.publish_async(subject, payload, headers=headers)
            if i % 256 == 255:
                await js.publish_async_completed()
        await js.publish_async_completed()
    finally:
        await nc.close()


def dlq_headers(subject: str = "orders.created", **extra: str) -> dict[str, str]:
    """Contract headers for a dead letter of ``subject`` (``Dlq_Reason="fatal"``: underscores for dashes)."""
    headers = {"Dlq-Original-Subject": subject}
    headers.update({k.replace("_", "-"): v for k, v in extra.items()})
    return headers


def make_orders_stream(url: str, **config) -> None:
    """Create stream ORDERS over ``orders.>``, the stream republishes go to."""
    make_stream(url, "ORDERS", ["orders.>"], **config)


def make_stream(url: str, name: str, subjects: list[str], **config) -> None:
    """Create stream ``name`` over ``subjects`` on the server (or account) of ``url``."""
    async def create():
        nc = await nats.connect(url)
        try:
            await nc.jetstream().add_stream(name=name, subjects=subjects, **config)
        finally:
            await nc.close()

    run(create())


def stream_messages(url: str, stream: str = "ORDERS") -> list:
    """Every message a stream holds now (RawStreamMsg, by sequence)."""
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

    return run(read())


# --- dead letters ------------------------------------------------------------------------------

def msg_id_prefix(owner) -> str:
    """``dlq-dashboard:<installation id>``: how every msgId the dashboard makes with the database of
    ``owner`` (an app, a runtime or an engine) starts."""
    engine = owner if hasattr(owner, "connect") else owner.engine if hasattr(owner, "engine") else runtime_of(owner).engine
    with engine.connect() as conn:
        return f"dlq-dashboard:{installation_id(conn)}"


def entry_count(engine) -> int:
    """How many entries the database holds."""
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Entry)).scalar()


def plan_nodes(plan: dict) -> Iterator[dict]:
    """Every node of a PostgreSQL plan in JSON (EXPLAIN (FORMAT JSON)'s "Plan"), the plan first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def search_indexed(engine, timeout: float = 30) -> None:
    """Wait for the search pass (ingest/search_index.py) to index every stored entry."""
    from dlq_dashboard.ingest.search_index import search_lag

    wait_for(lambda: search_lag(engine).pending == 0, timeout=timeout, message="the search pass to index the entries")


def dead_letter_orders(app, url: str, payloads: list[bytes], *, subject: str = "orders.created",
                       headers: dict | None = None) -> list[int]:
    """Dead-letter ``payloads`` of ``subject`` into the DLQ through NATS, wait for the mirror,
    return the new entry ids."""
    engine = runtime_of(app).engine
    before = entry_count(engine)
    base = {**dlq_headers(subject, Dlq_Reason="fatal", Dlq_Error="handler failed"), **(headers or {})}
    run(publish_fast(url, f"dlq.{subject}", len(payloads), lambda i: (payloads[i], dict(base))))
    wait_for(lambda: entry_count(engine) >= before + len(payloads), timeout=30,
             message="the mirror to store the dead letters")
    search_indexed(engine)
    with engine.connect() as conn:
        return list(conn.execute(select(Entry.id).order_by(Entry.id).offset(before)).scalars())


def dead_letter(app_or_engine, seq: int, subject: str | None = "orders.created", payload: bytes = b"{}",
                stream: str = "DLQ", stored_at=None, epoch: str = "e1", **headers: str) -> int:
    """Store one DLQ message as the mirror would (ingest_dlq_batch) and return its entry id.

    ``headers`` are given with underscores for dashes (Dlq_Reason="fatal"); ``epoch``: of the
    DLQ stream (another: the stream made again).
    """
    engine = runtime_of(app_or_engine).engine if hasattr(app_or_engine, "extensions") else app_or_engine
    values = {k.replace("_", "-"): v for k, v in headers.items()}
    if subject is not None:
        values.setdefault("Dlq-Original-Subject", subject)
    ingest_dlq_batch(engine, stream, epoch, [StreamMessage(seq, f"dlq.{subject or 'unknown'}", values or None,
                                                           payload, stored_at or utcnow())])
    with engine.connect() as conn:
        return conn.execute(select(Entry.id).where(Entry.dlq_stream == stream, Entry.dlq_epoch == epoch,
                                                   Entry.dlq_seq == seq)).scalar_one()


def orders_schema_folder(tmp_path, schema: dict | None = None) -> str:
    """A DLQ_SCHEMAS folder whose orders.json covers orders.* (by default: customer_id required)."""
    folder = tmp_path / "schemas"
    folder.mkdir(exist_ok=True)
    (folder / "orders.json").write_text(json.dumps(
        schema or {"x-subjects": ["orders.*"], "type": "object", "required": ["customer_id"]}))
    return str(folder)


class _Ack:
    """What NATS answers a publish, as record_published reads it."""

    def __init__(self, seq: int):
        self.stream, self.seq, self.duplicate = "ORDERS", seq, False


def record_republish(rt, entry_id: int, seq: int = 1) -> None:
    """Record a republish of the entry as a request or a bulk window does (decided, then stored at
    ``seq`` of stream ORDERS), without NATS."""
    from dlq_dashboard.actions.decisions import decide_republish, load_entry, write_claims
    from dlq_dashboard.actions.intents import record_published
    from dlq_dashboard.db.engine import write_transaction

    with write_transaction(rt.engine) as conn:
        entry = load_entry(conn, entry_id)
        # The decision asks which stream stores the subject (NATS may hold none here): ORDERS.
        rt.subject_streams.put(entry["original_subject"], time.monotonic(), "ORDERS", entry["source"])
        claim = decide_republish(rt, entry, entry["version"], None, [], installation=installation_id(conn),
                                 actor="test")
        write_claims(conn, [claim])
    with write_transaction(rt.engine) as conn:
        record_published(conn, [(claim[1], _Ack(seq))])


# --- logging in --------------------------------------------------------------------------------

def bearer(token: str) -> dict[str, str]:
    """The Authorization header for an API token."""
    return {"Authorization": f"Bearer {token}"}


def signed_in_routes(app, value: object = 1) -> Iterator[tuple[Any, str]]:
    """(rule, path) for every route whose view checks a role, each ``<argument>`` of its path
    written as ``value``."""
    for rule in app.url_map.iter_rules():
        if getattr(app.view_functions[rule.endpoint], "required_role", None) is not None:
            yield rule, re.sub(r"<[^>]+>", str(value), rule.rule)


def session_cookies(response) -> list[str]:
    """The session cookies an answer sets (its Set-Cookie headers for ``session``)."""
    return [h for h in response.headers.getlist("Set-Cookie") if h.startswith("session=")]


def csrf_token(client, path: str = "/login") -> str:
    """The CSRF token from a page's form."""
    html = client.get(path).get_data(as_text=True)
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, f"no csrf_token on {path}"
    return match.group(1)


def login(client, name: str, password: str):
    """Log a test client in through the login form."""
    return client.post("/login", data={"username": name, "password": password,
                                       "csrf_token": csrf_token(client)})


def ensure_user(app, name: str, role: str) -> None:
    """Create user ``name`` with ``role`` and the tests' password, unless it exists."""
    try:
        create_user(runtime_of(app).engine, name, PASSWORD, role)
    except ValueError:
        pass


def logged_in(app, role: str):
    """A test client logged in as a user with ``role`` (made on first use)."""
    name = f"{role}-user"
    ensure_user(app, name, role)
    client = app.test_client()
    response = login(client, name, PASSWORD)
    assert response.status_code == 302, response.get_data(as_text=True)
    return client


def signed_in_with(app, grants, name: str = "alice@example.com"):
    """A test client signed in as a single sign-on user holding ``grants`` (scopes.Grant: an
    operator grant on one pattern and a viewer grant on another, as DLQ_OIDC_ROLES gives them),
    its session as a sign-in writes it (the provider's part is test_oidc.py's)."""
    from dlq_dashboard.accounts import sign_in_oidc_user, start_session
    from dlq_dashboard.web.security import SESSION_ENDS

    engine = runtime_of(app).engine
    user = sign_in_oidc_user(engine, f"https://idp.test {name}", name, tuple(grants))
    key = start_session(engine, user.id, hours=1, via="oidc", grants=tuple(grants), id_token="a.b.c")
    client = app.test_client()
    with client.session_transaction() as session:
        session.update({"_user_id": key, "_fresh": True, SESSION_ENDS: time.time() + 3600})
        session.permanent = True
    return client


def sign_in(page, base_url: str, app, role: str) -> None:
    """Sign a browser page's context in as a user with ``role`` (made on first use), opening no
    page: the login form is posted by a test client (the same POST /login) and the session cookie
    it answers with is handed to the browser as that answer sets it. Signing in through the
    browser cost two page loads (the form, then the list it lands on), 0.4 s of CPU a test; the
    tests of the form itself fill it in the browser."""
    name = f"{role}-browser"
    ensure_user(app, name, role)
    client = app.test_client()
    # As the browser itself: Flask-Login marks a session used by another user agent as not fresh.
    client.environ_base["HTTP_USER_AGENT"] = page.evaluate("navigator.userAgent")
    response = login(client, name, PASSWORD)
    assert response.status_code == 302, response.get_data(as_text=True)
    cookie = client.get_cookie(app.config["SESSION_COOKIE_NAME"])
    page.context.add_cookies([{
        "name": cookie.key, "value": cookie.value, "url": base_url + cookie.path,
        "httpOnly": cookie.http_only, "secure": cookie.secure, "sameSite": (cookie.same_site or "lax").capitalize(),
        "expires": cookie.expires.timestamp() if cookie.expires else -1}])


def browser_login(page, base_url: str, app, role: str) -> None:
    """Sign a browser page in as a user with ``role`` (``sign_in``) and open the list, where the
    login form lands."""
    sign_in(page, base_url, app, role)
    page.goto(f"{base_url}/")


# --- a frozen server ---------------------------------------------------------------------------

def _all_threads_stopped(pid: int) -> bool:
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            # The state follows the command's closing parenthesis: "pid (comm) T ...".
            states.append(task.joinpath("stat").read_text().rpartition(")")[2].split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return bool(states) and all(state in ("T", "t") for state in states)


@contextmanager
def stopped(*pids: int) -> Iterator[None]:
    """Processes stopped with SIGSTOP, continued with SIGCONT afterwards whatever happens, this
    process killed meanwhile included.

    A stopped process acts on its parent-death signal (SIGTERM, PostgreSQL's SIGQUIT) only once
    continued: a run killed while a server of its own was stopped left it stopped, with parent 1,
    for good. A process of a session of its own (a killed run's group does not take it) continues
    them when its standard input closes: when the freeze ends, or when this process ends however
    it does (tests/test_killed_run.py)."""
    thaw = subprocess.Popen(["sh", "-c", 'cat >/dev/null; kill -CONT "$@" 2>/dev/null', "thaw", *map(str, pids)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True,
                            # None: it ends by itself once this process ends, after doing its part.
                            preexec_fn=None)
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        for pid in pids:
            # kill() returns once the signal is queued; each thread stops when it next runs. Until
            # all have, a request sent now could still be answered (a nats-server, seen once on a
            # loaded machine), or a message received and handed on (the mirror's process gave two
            # to its writer, which committed them "while it hung": test_mirror_process.py).
            wait_for(lambda: _all_threads_stopped(pid), timeout=10, message=f"every thread of process {pid} to stop")
        yield
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        thaw.stdin.close()
        thaw.wait(30)


@contextmanager
def frozen(server):
    """The nats-server stopped with SIGSTOP (its connections stay open, nothing answers),
    continued with SIGCONT afterwards whatever happens (``stopped``)."""
    with stopped(server.proc.pid):  # every thread of it stopped
        yield


@contextmanager
def writer_stopped(rt, watched: bool = False):
    """The mirror's writer process of runtime ``rt`` stopped with SIGSTOP (the mirror receives,
    nothing is committed), continued with SIGCONT afterwards whatever happens. On SQLite it is
    stopped while this holds the database's write lock, so never inside a transaction of its own:
    stopped there, it would keep every other writer waiting until "database is locked" (seen once
    in CI, when the search pass had just begun). Unless ``watched``, the mirror's watch over its
    writer is held off meanwhile (a writer silent for 10 s is stuck, then replaced: mirror.py
    WRITER_STUCK), so that a test of a mirror behind on a loaded machine sees it behind."""
    if not watched:
        with _writer_unwatched():
            with writer_stopped(rt, watched=True) as pid:
                yield pid
            # Watched again once it has answered since it was continued: its silence is over.
            wait_for(lambda: rt.mirror._process.silent() < 5.0, timeout=30, message="the writer to answer again")
        return
    pid = rt.mirror._process._proc.pid
    url = rt.engine.url
    if url.get_backend_name() != "sqlite":
        with stopped(pid):
            yield pid
        return
    conn = sqlite3.connect(url.database, timeout=30, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")  # the writer holds no transaction now, nor can begin one
        with stopped(pid):  # every thread of it stopped
            conn.execute("ROLLBACK")
            conn.close()
            yield pid
    finally:
        conn.close()


@contextmanager
def _writer_unwatched():
    from dlq_dashboard.ingest import mirror

    held = mirror.WRITER_STUCK, mirror.WRITER_KILL
    mirror.WRITER_STUCK = mirror.WRITER_KILL = 3600.0
    try:
        yield
    finally:
        mirror.WRITER_STUCK, mirror.WRITER_KILL = held


# --- who closed a descriptor -----------------------------------------------------------------

_CLOSES: deque = deque(maxlen=20_000)
_CLOSE_COUNT = itertools.count()


def record_closes() -> None:
    """From now on every close of a descriptor by its number in this process (os.close, and a
    multiprocessing connection's, which holds os.close from before) is recorded with its thread
    and callers, for ``closes_of``: a descriptor closed twice closes whatever the process opened
    under its number in between, and the owner finds it closed with nobody in its own stack."""
    import threading
    from multiprocessing import connection

    if getattr(os.close, "recorded", False):
        return
    close = os.close

    def recorded(fd: int) -> None:
        frame, callers = sys._getframe(1), []
        while frame is not None and len(callers) < 10:
            callers.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
            frame = frame.f_back
        _CLOSES.append((next(_CLOSE_COUNT), fd, threading.current_thread().name, callers))
        close(fd)

    recorded.recorded = True
    os.close = recorded
    connection.Connection._close = lambda self, _close=recorded: _close(self._handle)


def close_mark() -> int:
    """A mark for ``closes_of``: the closes recorded from now on come after it."""
    return next(_CLOSE_COUNT)


def closes_of(fd: int, since: int) -> str:
    """The closes of descriptor ``fd`` recorded (record_closes) after the ``since``-th close."""
    found = [f"  in thread {thread}, innermost first:\n" + "".join(f"    {c}\n" for c in callers)
             for count, number, thread, callers in list(_CLOSES) if number == fd and count > since]
    return "".join(found) or "  none recorded (closed by code that does not call os.close)\n"


def _identity(fd: int) -> tuple[int, int] | None:
    """What ``fd`` is open on (device, inode), None when it is not open."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


# --- a web server in a thread ------------------------------------------------------------------

def serve_in_thread(app, threads: int = 4):
    """``app`` served by waitress on 127.0.0.1 and a free port in a thread of its own; returns
    (server, thread). End it with ``stop_serving``."""
    import threading

    import waitress

    from dlq_dashboard.web.security import WAITRESS_OPTIONS

    # As app.py serves: forwarded headers reach the app, which decides whom to believe.
    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=threads, **WAITRESS_OPTIONS)
    server.dlq_trigger_pipe = _identity(server.trigger.trigger), close_mark()
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    return server, thread


def stop_serving(server, thread) -> None:
    """End a server ``serve_in_thread`` started. Its sockets are closed from its own loop: closed
    from here, the loop (in select()) closes them once more, and a second close ends whatever the
    process has opened under the same descriptor number since (another test's socket or pipe)."""
    fd, (opened, since) = server.trigger.trigger, server.dlq_trigger_pipe
    if _identity(fd) != opened:
        raise AssertionError(f"the web server's wake-up pipe (descriptor {fd}) was closed under it while it "
                             f"served; closes of descriptor {fd} by number since:\n{closes_of(fd, since)}")
    server.trigger.pull_trigger(lambda: [d.close() for d in list(server._map.values())])
    thread.join(5)
    assert not thread.is_alive(), "the web server did not stop"
    server.task_dispatcher.shutdown()


def publish_once_connected(monkeypatch) -> None:
    """A bulk job's publishing process (actions/bulk/publisher.py) is waited for until it has
    connected. Windows go through the bridge until it has; on a busy machine a whole job could go
    before it is, and the process a test watches (or kills) would never be used."""
    from dlq_dashboard.actions.bulk import work

    start_publisher = work.JobWork._start_publisher

    def started_and_connected(self):
        started = start_publisher(self)
        wait_for(lambda: started.ready, timeout=60, message="the publishing process to connect")
        return started

    monkeypatch.setattr(work.JobWork, "_start_publisher", started_and_connected)


def dealt(items: list, slow: int, workers: int, max_chunk: int | None) -> list:
    """``items`` (the first ``slow`` of them the slow tests) reordered so that xdist's first hand
    gives each worker a share of the slow tests.

    xdist's `load` scheduling starts each worker on a run of consecutive tests (a sixteenth of
    the suite each, with four workers) and sends more only as a worker's run empties: with every
    slow test first, the first worker got all of them and ran them one after another, alone for
    the last minute of the run. Here each worker's first run opens with its share of them. The
    size of a run is xdist's (``LoadScheduling.schedule``); were it to change, every test would
    still run, in a worse order."""
    chunk = max(min(len(items) // workers // 4, max_chunk or len(items)), 2)
    share = -(-slow // workers)  # rounded up
    if slow <= 1 or share >= chunk:
        return items
    slow_items, rest, out = items[:slow], items[slow:], []
    for worker in range(workers):
        mine = slow_items[worker * share:(worker + 1) * share]
        out += mine + rest[:chunk - len(mine)]
        del rest[:chunk - len(mine)]
    return out + rest
