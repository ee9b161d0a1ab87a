"""Fixtures: a real nats-server on a free port with a temporary store, the app over a real SQLite
file (or a PostgreSQL database) already at the newest revision, an app factory, logins and tokens
by role, a live server and Debian's Chromium. Helpers live in support.py.

Databases are migrated once a worker process and copied for each test (a file copy on SQLite,
``CREATE DATABASE ... TEMPLATE`` on PostgreSQL); tests marked ``fresh_database`` (the migrations'
own tests) get an empty one. ``slow`` tests (kill -9, backlogs, clusters, several processes) start
first, so that they do not form the run's tail; browser tests run last.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import os

import flask
import pytest
from hypothesis import settings
from werkzeug.routing import Rule

from dlq_dashboard import accounts, create_app
from dlq_dashboard.accounts import create_token
from dlq_dashboard.nats.server import LISTEN_PORTS, NatsServer, choose_ports_in, worker_ports
from dlq_dashboard.config import Settings
from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
from dlq_dashboard.db.migrate import migrate
from dlq_dashboard.runtime import Runtime, runtime_of

from . import support
from .oidc_provider import IdentityProvider, ProviderPool
from .postgres import PostgresServer, prefer_memory
from .webhooks import Receiver

DATABASES = ("sqlite", "postgresql")
# The PostgreSQL servers' data in memory when the machine allows (tests/postgres.py says why).
prefer_memory()

# Each xdist worker chooses ports for servers in a part of its own: a cluster node's port is free
# while the node is down for a restart, and another worker choosing it then made the restart fail
# ("address already in use"). A run the tests start (tests/held_servers.py) divides its worker's.
TEST_PORTS = "DLQ_TEST_PORTS"
if "PYTEST_XDIST_WORKER" in os.environ:
    _whole = range(*map(int, os.environ[TEST_PORTS].split("-"))) if TEST_PORTS in os.environ else LISTEN_PORTS
    _part = worker_ports(int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw")),
                         int(os.environ["PYTEST_XDIST_WORKER_COUNT"]), _whole)
    choose_ports_in(_part)
    os.environ[TEST_PORTS] = f"{_part.start}-{_part.stop}"

# Generated tests run the same examples every time ("ci"); HYPOTHESIS_PROFILE=long runs many
# more, random ones (README: "A longer random run").
settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=400)
settings.register_profile("long", max_examples=50_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    support.record_closes()  # a descriptor found closed under its owner names who closed it
    config.addinivalue_line("markers", "both_databases: run the test on SQLite and on PostgreSQL")
    config.addinivalue_line("markers", "installed: builds the wheel, installs it in a fresh venv outside the "
                                       "checkout and runs the installed dlq-dashboard command")
    config.addinivalue_line("markers", "slow: a long resilience test (kill -9, a backlog, a cluster, several "
                                       "processes); started first, `pytest -m slow` runs them alone")
    config.addinivalue_line("markers", "fresh_database: the test's database_url is empty (not migrated), "
                                       "for the tests of the migrations themselves")


def pytest_collection_finish(session):
    """What lives once the tests are collected (the modules, the fixtures, the test items: some
    170,000 objects) lives all run: frozen, no collection of the old generation walks it again.
    The collector's time in `pytest -n 0 tests/test_pages.py tests/test_summaries.py
    tests/test_store.py` (gc.callbacks, process time): 2.95 s of 16.1 s, 2.27 s of 14.5 s frozen."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """One full collection, then the rest frozen: after the last pytest_unconfigure, pytest
    collects five times over to catch a finalizer's exception, which with the 750,000 objects a
    worker holds took 3.8-4.7 s; past 5 s after the controller ended a worker, execnet sends it
    SIGINT, and a KeyboardInterrupt in hypothesis's collection callback was printed as a warning
    at the end of some runs. The one collection here still runs the finalizers of what is garbage."""
    gc.collect()
    gc.freeze()


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


@pytest.fixture(autouse=True, scope="session")
def _password_hashes_worked_out_once():
    """scrypt is slow on purpose (0.1 s a call) and the tests hash the same few passwords for
    every login: each result is worked out once a process. The same functions give the same
    answers (a hash checks as before; a new user's hash is a valid one of its password)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(accounts, "generate_password_hash", functools.lru_cache(accounts.generate_password_hash))
        patch.setattr(accounts, "check_password_hash", functools.lru_cache(accounts.check_password_hash))
        yield


@pytest.fixture(autouse=True, scope="session")
def _templates_compiled_once():
    """Every app's Jinja environment shares one in-memory bytecode cache (support.CompiledTemplates):
    compiling the templates again for each test's new app was a third of a page test's time."""
    create = flask.Flask.create_jinja_environment

    def create_jinja_environment(self):
        env = create(self)
        env.bytecode_cache = support.COMPILED_TEMPLATES
        return env

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flask.Flask, "create_jinja_environment", create_jinja_environment)
        yield


@pytest.fixture(autouse=True, scope="session")
def _url_builders_compiled_once():
    """Each app parses each of its ~75 routes and compiles two URL builders for each (werkzeug
    makes a Python function of each from an AST): together most of a test's create_app. The
    same route of every app gets the same parts and the same functions: werkzeug's are made from
    the route's text, its defaults and its converters alone, and a builder reaches the route it
    builds for only through its ``self``. The parse is kept with the converters it asked for,
    and each app's route gets converters of its own map, as werkzeug's would."""
    compile_rule = Rule.compile
    compile_builder = Rule._compile_builder
    built: dict = {}
    parsed: dict = {}

    def name_of(cls) -> str:  # create_app defines its converter classes (IdConverter) in each call
        return f"{cls.__module__}.{cls.__qualname__}"

    def compile_once(self):
        known = self.map.host_matching, self.host, self.subdomain, self.merge_slashes
        key = (self.rule, known, tuple(sorted((n, name_of(c)) for n, c in self.map.converters.items())))
        if key not in parsed:
            asked = []
            get_converter = self.get_converter

            def recording(variable, converter, args, kwargs):
                asked.append((variable, converter, args, kwargs))
                return get_converter(variable, converter, args, kwargs)

            self.get_converter = recording
            try:
                compile_rule(self)
            finally:
                del self.get_converter
            parsed[key] = (list(self._parts), list(self._trace), asked)
            return
        parts, trace, asked = parsed[key]
        self._parts, self._trace = list(parts), list(trace)
        self._converters = {variable: self.get_converter(variable, converter, args, kwargs)
                            for variable, converter, args, kwargs in asked}
        self.arguments.update(variable for variable, *_ in asked)
        self._build = self._compile_builder(False).__get__(self, None)
        self._build_unknown = self._compile_builder(True).__get__(self, None)

    def compile_builder_once(self, append_unknown=True):
        converters = tuple((name, name_of(type(converter)),
                            repr(sorted((k, v) for k, v in vars(converter).items() if k != "map")))
                           for name, converter in self._converters.items())
        key = (tuple(self._trace), repr(sorted((self.defaults or {}).items())), append_unknown, converters)
        if key not in built:
            built[key] = compile_builder(self, append_unknown)
        return built[key]

    compile_once.original, compile_builder_once.original = compile_rule, compile_builder  # for a test
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Rule, "compile", compile_once)
        patch.setattr(Rule, "_compile_builder", compile_builder_once)
        yield


@pytest.fixture
def database_url(request, tmp_path):
    """The test's database, already at the newest revision: a SQLite file in tmp_path, or
    (parametrized) a new PostgreSQL database. Empty instead for a test marked ``fresh_database``."""
    migrated = request.node.get_closest_marker("fresh_database") is None
    if getattr(request, "param", "sqlite") == "sqlite":
        path = tmp_path / "dlq.sqlite3"
        yield support.migrated_sqlite(path) if migrated else f"sqlite:///{path}"
        return
    server = request.getfixturevalue("postgres_server")
    url = server.create_database(migrated=migrated)
    yield url
    server.drop_database(url, later=True)


@pytest.fixture
def engine(database_url):
    """An engine on the test's database (database_url), at the newest revision; disposed after."""
    engine = create_db_engine(database_url)
    migrate(engine)
    yield engine
    dispose_quietly(engine)


@pytest.fixture
def nats_server(tmp_path):
    """A fresh JetStream-enabled nats-server on 127.0.0.1, stopped after the test."""
    server = NatsServer(store_dir=tmp_path / "nats", log_path=tmp_path / "nats.log").start()
    yield server
    server.stop()


@pytest.fixture
def shared_server(tmp_path):
    """A second nats-server, of two accounts (A and B, support.TWO_ACCOUNTS): two sources that
    share a server but not an account (SPEC section 12)."""
    server = NatsServer(store_dir=tmp_path / "nats-ab", extra_config=support.TWO_ACCOUNTS).start()
    yield server
    server.stop()


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """Settings over the test's database and nats-server."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url)


@pytest.fixture
def scratch():
    """A TMPDIR for the processes a test kills with -9 (support.killed_processes_tmpdir)."""
    with support.killed_processes_tmpdir() as folder:
        yield folder


@pytest.fixture
def make_app(request, tmp_path):
    """A factory of apps, each stopped after the test.

    ``make_app(**changes)``: the app over the test's database (``database_url``) with the
    Settings fields in ``changes`` (``mask=("/email",)``, ``schemas_dir=...``), nothing started
    and no NATS (a closed port). ``online=True``: pointed at the test's nats-server and started
    as ``app`` is (the bridge connected, the mirror following). ``settings=``: these Settings
    (with ``changes`` applied) instead of the test's.

    A test that runs on both databases names ``database_url`` among its arguments (that is what
    parametrizes it); without it, the database is SQLite.
    """
    made = []

    def make(*, online: bool = False, settings: Settings | None = None, **changes):
        if settings is None:
            nats_url = request.getfixturevalue("nats_server").url if online else None
            if "database_url" not in changes:
                changes["database_url"] = request.getfixturevalue("database_url")
            settings = support.make_settings(tmp_path, nats_url, **changes)
        elif changes:
            settings = dataclasses.replace(settings, **changes)
        application = create_app({"SETTINGS": settings, "TESTING": True})
        made.append(application)
        if online:
            support.start(application)
        return application

    yield make
    for application in reversed(made):
        runtime_of(application).stop()


@pytest.fixture
def app(settings, make_app):
    """The app with its bridge and mirror running against the test's nats-server."""
    return make_app(settings=settings, online=True)


@pytest.fixture
def offline_app(make_app, database_url):
    """The app over the test's database with nothing started (no NATS, no mirror)."""
    return make_app(database_url=database_url)


@pytest.fixture
def probe_app(offline_app):
    """The offline app with probe routes that answer who is asking (support.add_probes)."""
    return support.add_probes(offline_app)


@pytest.fixture
def rt(request) -> Runtime:
    """The Runtime of whichever app the test uses (``app`` if it asks for it, else ``offline_app``);
    of a started app once the jobs' first recovery pass has run."""
    app = _the_app(request)
    if "app" in request.fixturenames:
        support.recovered_first(app)
    return runtime_of(app)


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
    server, thread = support.serve_in_thread(app)
    yield f"http://127.0.0.1:{server.effective_port}"
    support.stop_serving(server, thread)


@pytest.fixture(scope="session")
def _identity_providers():
    pool = ProviderPool()
    yield pool
    pool.stop()


@pytest.fixture
def identity_provider(tmp_path, _identity_providers):
    """A factory of real OpenID Connect providers (tests/oidc_provider.py):
    ``identity_provider(accounts={...}, public=False, ttl={...}, shared=True)``, then
    ``.settings(roles=...)`` for make_app's keyword arguments and ``.start()``; ``.sign_in(client,
    login)`` drives the flow through the provider's login form. A shared one (the default, for the
    test client) is kept running for the worker's next tests; the others end after the test, by PID."""
    made = []

    def make(**options) -> IdentityProvider:
        made.append(IdentityProvider(tmp_path, pool=_identity_providers, **options))
        return made[-1]

    yield make
    for provider in made:
        provider.release()


@pytest.fixture
def receiver():
    """A factory of webhook receivers (tests/webhooks.py): ``receiver(answers=(500, "close"))``;
    each closed after the test."""
    made: list[Receiver] = []

    def make(answers=()) -> Receiver:
        made.append(Receiver(answers))
        return made[-1]

    yield make
    for r in made:
        r.close()


@pytest.fixture
def three_sources(tmp_path, shared_server, nats_server):
    """A DLQ_CONFIG of three sources: accounts A and B of one server, and a second server."""
    return support.sources_file(tmp_path, [
        {"name": "orders", "nats_url": support.account_url(shared_server, "a"), "stream": "DLQ"},
        {"name": "billing", "nats_url": support.account_url(shared_server, "b"), "stream": "DLQ"},
        {"name": "shipping", "nats_url": nats_server.url, "stream": "DLQ_SHIPPING", "subjects": ["dlq.shipping.>"]},
    ])


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
    """Slow tests first, browser tests last, the rest between in their usual order.

    Browser tests last: once Playwright's sync API has started, its event loop stays running in
    the main thread for the rest of the session (support.run works around it; code under test
    that starts a loop of its own in that thread could not). Slow tests first: started last,
    one of them alone would be the end of the run while the other workers have nothing left;
    and under xdist dealt among the workers' first runs (support.dealt), not all in the first's."""
    def place(item) -> int:
        if "browser" in getattr(item, "fixturenames", ()):
            return 2
        return 0 if item.get_closest_marker("slow") else 1

    items.sort(key=place)
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    if workers > 1:
        slow = sum(place(item) == 0 for item in items)
        items[:] = support.dealt(items, slow, workers, config.getoption("maxschedchunk", None))
