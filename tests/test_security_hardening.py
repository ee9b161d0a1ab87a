"""What an outside reader must never get: NATS_URL's user and password (from any route, header or
log line, NATS up or down), the broker's address from anonymous /healthz, a redirect to a Host
they made up, label values they chose in /metrics, or a file of the instance folder."""

from __future__ import annotations

import dataclasses
import http.client
import logging
import os
import stat
import subprocess

import pytest

from dlq_dashboard import create_app
from dlq_dashboard.accounts import create_token, create_user
from dlq_dashboard.config import ConfigError, load_settings
from dlq_dashboard.db.engine import shown_url
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.nats.server import find_nats_server, free_port, wait_for_port
from dlq_dashboard.redaction import scrub, without_userinfo
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.web.metrics import reason_label

from . import support
from .test_routes_roles import fill, routes

NATS_USER = "dlq-service"
NATS_PASSWORD = "hunter2-broker-pass"


# --- the redaction itself ----------------------------------------------------------------------

def test_a_url_loses_its_user_and_password_and_keeps_everything_else():
    assert without_userinfo(f"nats://{NATS_USER}:{NATS_PASSWORD}@127.0.0.1:4222") == "nats://127.0.0.1:4222"
    assert without_userinfo("tls://s3cr3t-token@nats.example:4443/x?y") == "tls://nats.example:4443/x?y"
    assert without_userinfo("nats://user:p@ss@host:1") == "nats://host:1"  # an unencoded '@' in the password
    assert without_userinfo("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"
    assert shown_url("postgresql+psycopg://dlq:pw@db:5432/dlq") == "postgresql://db:5432/dlq"


def test_every_url_quoted_in_an_error_text_loses_its_userinfo():
    text = ("cannot connect to nats://a:one@h1:4222, nats://b:two@h2:4222: WSServerHandshakeError: 400, "
            "url='wss://c:three@h3/'; mail ops@example.com")
    assert scrub(text) == ("cannot connect to nats://h1:4222, nats://h2:4222: WSServerHandshakeError: 400, "
                           "url='wss://h3/'; mail ops@example.com")
    assert scrub(None) is None


@pytest.mark.parametrize("variable, value", [("NATS_URL", f"natss://{NATS_USER}:{NATS_PASSWORD}@h:4222"),
                                             ("DATABASE_URL", f"postgres ql://{NATS_USER}:{NATS_PASSWORD}@h/db"),
                                             ("DLQ_PUBLIC_URL", f"https://{NATS_USER}:{NATS_PASSWORD}@h/?x")])
def test_a_url_setting_refused_at_start_is_quoted_without_its_password(variable, value):
    with pytest.raises(ConfigError) as refused:
        load_settings({variable: value})
    assert str(refused.value).startswith(f"{variable}=") and NATS_PASSWORD not in str(refused.value)


# --- NATS_URL with a user and password, scanned on every route ---------------------------------

class PasswordNats:
    """A nats-server that wants a user and password (``--user``/``--pass``), stoppable and
    restartable on the same port and store."""

    def __init__(self, tmp_path):
        self.port, self.store, self.log = free_port(), tmp_path / "nats-auth", tmp_path / "nats-auth.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://{NATS_USER}:{NATS_PASSWORD}@127.0.0.1:{self.port}"

    def start(self) -> "PasswordNats":
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([find_nats_server(), "-js", "-sd", str(self.store), "-a", "127.0.0.1",
                                          "-p", str(self.port), "--user", NATS_USER, "--pass", NATS_PASSWORD],
                                         stdout=log, stderr=log, preexec_fn=support.ends_with_this_process())
        wait_for_port(self.port, 10, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def password_nats(tmp_path):
    server = PasswordNats(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture
def broker_app(tmp_path, password_nats):
    """The app pointed at nats://user:password@127.0.0.1:port, with an entry and a stream to act on."""
    settings = support.make_settings(tmp_path, password_nats.url)
    app = create_app({"SETTINGS": settings, "TESTING": True})
    runtime = runtime_of(app)
    runtime.start()
    try:
        assert runtime.bridge.wait_connected(10), "the bridge did not connect with the URL's credentials"
        support.wait_for(lambda: all(p.epoch for p in runtime.mirror.progress.values()), message="the mirror")
        runtime.bridge.call(lambda: runtime.bridge.js.add_stream(name="ORDERS", subjects=["orders.>"]), timeout=5)
        support.dead_letter(app, 1, Dlq_Reason="fatal", Dlq_Error="boom")
        yield app
    finally:
        runtime.stop()


def every_answer(app) -> list[tuple[str, str]]:
    """(what was asked, everything answered: status line, headers and body) for every route and
    method, as anonymous, as an admin's session (htmx too) and with an admin's token; writes as
    a fresh admin login each (one of them is the logout)."""
    engine = runtime_of(app).engine
    entry_id = runtime_of(app).store.list_entries(EntryFilter()).entries[0].id
    token = create_token(engine, f"scan-{os.urandom(4).hex()}", "admin")
    reader = support.logged_in(app, "admin")
    answers = []
    for _endpoint, rule, method in routes(app):
        path = fill(rule, entry_id)
        if method == "GET":
            clients = [("anonymous", app.test_client(), {}), ("admin", reader, {}),
                       ("admin htmx", reader, {"HX-Request": "true"}), ("token", app.test_client(), support.bearer(token))]
        else:
            name = f"writer-{os.urandom(4).hex()}"
            create_user(engine, name, support.PASSWORD, "admin")
            writer = app.test_client()
            assert support.login(writer, name, support.PASSWORD).status_code == 302
            clients = [("admin", writer, {"X-CSRFToken": support.csrf_token(writer, "/")}),
                       ("token", app.test_client(), support.bearer(token))]
        for who, client, headers in clients:
            if method == "GET":
                response = client.get(path, headers=headers)
            elif path.startswith("/api/"):
                response = client.open(path, method=method, json={"version": 1}, headers=headers)
            else:
                data = {"version": "1"}
                if "X-CSRFToken" in headers:
                    data["csrf_token"] = headers["X-CSRFToken"]
                response = client.open(path, method=method, data=data, headers=headers)
            text = response.get_data().decode("utf-8", "replace")  # downloads may be binary
            response.close()
            answers.append((f"{method} {path} as {who}", f"{response.status}\n{response.headers}\n{text}"))
    return answers


def leaks(answers, logs: str) -> list[str]:
    """The requests whose answer, and the first log line, that hold NATS_URL's user or password."""
    found = [asked for asked, answer in answers if NATS_PASSWORD in answer or f"{NATS_USER}:" in answer]
    if NATS_PASSWORD in logs or f"{NATS_USER}:" in logs:
        found.append("the log: " + next(line for line in logs.splitlines() if NATS_PASSWORD in line
                                        or f"{NATS_USER}:" in line))
    return found


def test_no_route_header_or_log_line_tells_the_nats_password_with_nats_up_or_down(
        broker_app, password_nats, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    app = broker_app
    bridge = runtime_of(app).bridge
    up = every_answer(app)
    assert len(up) > 60
    assert leaks(up, caplog.text + "".join(capsys.readouterr())) == []

    password_nats.stop()
    support.wait_for(lambda: not bridge.state.connected and "cannot connect" in (bridge.state.last_error or ""),
                     timeout=30, message="the bridge to fail to reconnect")
    down = every_answer(app)
    # The outage is told (the banner, a refused republish) without the URL's credentials.
    assert any("NATS is not reachable" in answer for _, answer in down)
    assert any(f"127.0.0.1:{password_nats.port}" in answer for _, answer in down)
    assert leaks(down, caplog.text + "".join(capsys.readouterr())) == []


def test_anonymous_healthz_tells_the_status_without_any_address_and_an_admin_reads_the_redacted_url(
        broker_app, password_nats):
    app = broker_app
    anonymous = app.test_client().get("/healthz")
    body = anonymous.get_json()
    assert anonymous.status_code == 200 and body["status"] == "ok" and body["nats"]["connected"] is True
    assert {"status", "nats", "mirror_lag"} <= set(body)
    assert "url" not in body["nats"] and "127.0.0.1" not in anonymous.get_data(as_text=True)

    admin = support.logged_in(app, "admin").get("/healthz").get_json()
    assert admin["nats"]["url"] == f"nats://127.0.0.1:{password_nats.port}"
    viewer = support.logged_in(app, "viewer").get("/healthz").get_json()
    assert "url" not in viewer["nats"]

    password_nats.stop()
    bridge = runtime_of(app).bridge
    support.wait_for(lambda: "cannot connect" in (bridge.state.last_error or ""), timeout=30,
                     message="the bridge to fail to reconnect")
    down = app.test_client().get("/healthz")
    assert down.status_code == 503 and down.get_json()["status"] == "degraded"
    assert down.get_json()["nats"]["last_error"]  # there is an error, not what it says
    assert "127.0.0.1" not in down.get_data(as_text=True) and "nats://" not in down.get_data(as_text=True)
    told = support.logged_in(app, "admin").get("/healthz").get_json()["nats"]["last_error"]
    assert f"nats://127.0.0.1:{password_nats.port}" in told and NATS_PASSWORD not in told


# --- the Host header ---------------------------------------------------------------------------

def raw_get(port: int, path: str, host: str) -> http.client.HTTPResponse:
    """A GET exactly as written (http.client sends the path and Host untouched)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("GET", path, skip_host=True)
    conn.putheader("Host", host)
    conn.endheaders()
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


@pytest.fixture
def served(tmp_path):
    """create_app over waitress on a free port; call it with the settings' changes, get the port."""
    started = []

    def serve(**changes):
        app = create_app({"SETTINGS": support.make_settings(tmp_path, **changes), "TESTING": True})
        server, thread = support.serve_in_thread(app, threads=2)
        started.append((app, server, thread))
        return server.effective_port

    yield serve
    for app, server, thread in started:
        support.stop_serving(server, thread)
        runtime_of(app).stop()


def test_a_doubled_slash_is_a_404_never_a_redirect_to_the_host_the_client_named(served):
    port = served()
    for path in ("//entries//1", "/entries//1", "//static//app.css", "/static//app.css"):
        response = raw_get(port, path, "evil.example")
        assert response.status == 404, (path, response.status, response.getheader("Location"))
        assert response.getheader("Location") is None


def test_with_dlq_public_url_only_its_host_and_loopback_are_answered(served):
    port = served(public_url="https://dlq.example.com")
    for path in ("/login", "/", "//entries//1", "/static/app.css", "/api/entries"):
        refused = raw_get(port, path, "evil.example")
        assert refused.status == 400 and refused.getheader("Location") is None, (path, refused.status)
    assert raw_get(port, "/login", "dlq.example.com").status == 200
    assert raw_get(port, "/login", f"127.0.0.1:{port}").status == 200
    # A host name in any case is the same host (RFC 9110 4.2.3): "DLQ.Example.com" was refused.
    assert raw_get(port, "/login", "DLQ.Example.com").status == 200
    assert raw_get(port, "/login", f"LOCALHOST:{port}").status == 200
    guarded = raw_get(port, "/", "dlq.example.com")
    assert guarded.status == 302 and guarded.getheader("Location").startswith("/login")


def test_a_probe_or_a_scraper_calling_a_pod_by_its_address_is_answered_with_dlq_public_url_set(served):
    port = served(public_url="https://dlq.example.com")
    assert raw_get(port, "/healthz", f"10.1.2.3:{port}").status in (200, 503)
    assert raw_get(port, "/readyz", f"10.1.2.3:{port}").status == 200
    assert raw_get(port, "/metrics", f"10.1.2.3:{port}").status == 200


# --- /metrics labels ---------------------------------------------------------------------------

def test_a_hostile_dlq_reason_never_becomes_a_metrics_label(offline_app):
    hostile = ['fatal"} 1\nevil_metric{x="y', "card 4111-1111-1111-1111 declined", "FATAL", "fatal ",
               "x" * 5000] + [f"noise-{i}" for i in range(200)]
    for seq, reason in enumerate(hostile + ["fatal", "terminated", None], start=1):
        support.dead_letter(offline_app, seq, **({"Dlq_Reason": reason} if reason is not None else {}))
    text = offline_app.test_client().get("/metrics").get_data(as_text=True)
    labels = set()
    for line in text.splitlines():
        if line.startswith("dlq_entries{"):
            labels.add(line.split('reason="', 1)[1].split('"', 1)[0])
    assert labels == {"fatal", "terminated", "other", "none"}
    assert "evil_metric" not in text and "4111-1111" not in text and "noise-" not in text
    counts = {line.split('reason="', 1)[1].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
              for line in text.splitlines() if line.startswith("dlq_entries{")}
    assert counts["other"] >= 203 and sum(counts.values()) == len(hostile) + 3
    assert [reason_label(r) for r in ("schema_invalid", "max_deliveries", "fatal", "terminated", "Fatal")] == \
        ["schema_invalid", "max_deliveries", "fatal", "terminated", "other"]


# --- the instance folder -----------------------------------------------------------------------

def modes(root) -> dict[str, str]:
    """Every folder and file under ``root`` (itself included) -> its permission bits, in octal."""
    found = {".": oct(stat.S_IMODE(os.stat(root).st_mode))}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = oct(stat.S_IMODE(os.lstat(path).st_mode))
    return found


def start_on_instance(instance):
    """The app as ``python app.py`` runs it: SQLite, the secret key and the bundled nats-server
    all in ``instance``; dead letters mirrored so the WAL, the store and the log are written."""
    settings = dataclasses.replace(support.make_settings(instance.parent), instance_path=str(instance),
                                   database_url=f"sqlite:///{instance}/dlq.sqlite3", secret_key=None, nats_urls=())
    app = create_app({"SETTINGS": settings, "TESTING": True})
    runtime = runtime_of(app)
    runtime.start(bundled_port=0)
    assert runtime.bridge.wait_connected(10)
    support.wait_for(lambda: all(p.epoch for p in runtime.mirror.progress.values()), message="the mirror")
    support.dead_letter_orders(app, runtime.bundled.url, [b'{"card": "4111"}'] * 3)
    return app


def test_everything_the_app_creates_in_the_instance_folder_is_its_owners_alone(tmp_path):
    old = os.umask(0o022)  # the usual umask, whatever the test run's is
    try:
        instance = tmp_path / "instance"
        app = start_on_instance(instance)
        try:
            found = modes(instance)
        finally:
            runtime_of(app).stop()
    finally:
        os.umask(old)
    assert {"dlq.sqlite3", "dlq.sqlite3-wal", "dlq.sqlite3-shm", "secret_key", "nats", "nats-server.log",
            "nats-server.url"} <= set(found), sorted(found)
    assert any(path.startswith("nats/jetstream/") for path in found), sorted(found)
    loose = {path: mode for path, mode in found.items()
             if mode != (oct(0o700) if os.path.isdir(instance / path) else oct(0o600))}
    assert loose == {}


def test_an_instance_folder_left_readable_by_an_earlier_release_is_narrowed_at_start(tmp_path):
    instance = tmp_path / "instance"
    instance.mkdir(mode=0o755)
    os.chmod(instance, 0o755)
    for name in ("dlq.sqlite3", "secret_key"):
        (instance / name).touch()
        os.chmod(instance / name, 0o644)
    (instance / "secret_key").write_text("an-old-key")
    app = create_app({"SETTINGS": dataclasses.replace(
        support.make_settings(tmp_path), instance_path=str(instance), secret_key=None,
        database_url=f"sqlite:///{instance}/dlq.sqlite3"), "TESTING": True})
    try:
        assert app.config["SECRET_KEY"] == "an-old-key"
        found = modes(instance)
    finally:
        runtime_of(app).stop()
    assert found["."] == oct(0o700)
    assert found["dlq.sqlite3"] == oct(0o600) and found["secret_key"] == oct(0o600)
