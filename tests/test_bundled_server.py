"""The bundled nats-server of a real `python app.py`: started again when it dies, ended with the
dashboard however it ends, never two on one store, and a stop that leaves nothing pending."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import nats
import pytest

from dlq_dashboard.nats import server as server_module
from dlq_dashboard.nats.bundled import LOCK_FILE
from dlq_dashboard.nats.server import (LISTEN_PORTS, NatsServer, choose_ports_in, free_port, free_ports, listen_ports,
                                       worker_ports)

from . import support

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


class Dashboard:
    """One `python app.py --port 0` in ``folder`` (its instance/ there), stderr in a file."""

    def __init__(self, folder: Path, *args: str, name: str = "app", nats_port: int, scratch: Path,
                 database_url: str | None = None):
        self.folder = folder
        self.stderr_path = folder / f"{name}.stderr"
        env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL") and not k.startswith("DLQ_")}
        # TMPDIR: a dashboard killed with -9 leaves its mirror's temporary directory there.
        env.update(PYTHONUNBUFFERED="1", SECRET_KEY="bundled-server-test", TMPDIR=str(scratch),
                   **({"DATABASE_URL": database_url} if database_url else {}))
        with open(self.stderr_path, "wb") as stderr:
            # Its own port, not 4222: tests in the other worker start dashboards too.
            self.proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", "0", "--nats-port",
                                          str(nats_port), *args], cwd=folder,
                                         env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                         preexec_fn=support.ends_with_this_process())
        self.nats_url: str | None = None
        self.web_url: str | None = None

    def wait_serving(self) -> "Dashboard":
        """Read stdout until the web server's URL is printed (the bundled server's comes first)."""
        for line in self.proc.stdout:
            found = re.search(r"bundled nats-server at (\S+)", line)
            if found:
                self.nats_url = found.group(1)
            if line.startswith("DLQ Dashboard at "):
                self.web_url = line.split()[-1]
                return self
        raise AssertionError(f"app.py ended before serving: {self.stderr()}")

    @property
    def store(self) -> Path:
        return (self.folder / "instance" / "nats").resolve()

    def server_pid(self) -> int | None:
        """The pid of the bundled server this dashboard runs now (None while there is none)."""
        children = [pid for pid in servers_on(self.store) if parent_of(pid) == self.proc.pid]
        return children[0] if len(children) == 1 else None

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.proc.stdout.close()


def parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def servers_on(store: Path) -> list[int]:
    """The pids of every running nats-server whose store (``-sd``, relative to its working
    folder) is ``store``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0")]
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if (args and os.path.basename(args[0]).startswith("nats-server")
                and any(a == "-sd" and (Path(cwd) / b).resolve() == store for a, b in zip(args, args[1:]))
                and not support.gone(int(entry.name))):
            found.append(int(entry.name))
    return found


def entries_of(folder: Path, subject: str) -> int:
    with sqlite3.connect(folder / "instance" / "dlq.sqlite3", timeout=30) as conn:
        return conn.execute("SELECT COUNT(*) FROM entries WHERE original_subject = ?", (subject,)).fetchone()[0]


def dead_letter(url: str, subject: str) -> None:
    support.run(support.publish_many(url, [(f"dlq.{subject}", b'{"n": 1}', support.dlq_headers(subject))]), 30)


@pytest.fixture
def dashboards(tmp_path, scratch):
    """Start dashboards in tmp_path; every one, and any bundled server left, ends after the test."""
    started: list[Dashboard] = []
    nats_port = free_port()

    def start(*args: str, name: str = "app", database_url: str | None = None) -> Dashboard:
        dashboard = Dashboard(tmp_path, *args, name=name, nats_port=nats_port, scratch=scratch,
                              database_url=database_url)
        started.append(dashboard)
        return dashboard

    yield start
    for dashboard in started:
        dashboard.close()
    for pid in servers_on((tmp_path / "instance" / "nats").resolve()):
        os.kill(pid, signal.SIGKILL)  # a server this test's dashboards started and left


def test_a_killed_bundled_server_is_started_again_on_its_port_and_store_with_one_line_per_change(dashboards,
                                                                                                tmp_path):
    app = dashboards("--demo").wait_serving()
    first = support.wait_for(app.server_pid, message="the bundled server's pid file")
    dead_letter(app.nats_url, "orders.before")
    support.wait_for(lambda: entries_of(tmp_path, "orders.before") == 1, timeout=30, message="the first dead letter")

    os.kill(first, signal.SIGKILL)
    second = support.wait_for(lambda: (lambda pid: pid if pid and pid != first else None)(app.server_pid()),
                              timeout=30, message="the bundled server to be started again")
    # The dead one was reaped by the dashboard (a zombie would still be in /proc).
    support.wait_for(lambda: not Path(f"/proc/{first}").exists(), message="the dead server to be reaped")
    assert servers_on(app.store) == [second]
    support.wait_for(lambda: "NATS: reconnected to" in app.stderr(), timeout=30, message="the bridge to reconnect")

    # The URL printed at the start still reaches the dashboard, on the same store.
    dead_letter(app.nats_url, "orders.after")
    support.wait_for(lambda: entries_of(tmp_path, "orders.after") == 1, timeout=30, message="the dead letter after")
    assert entries_of(tmp_path, "orders.before") == 1

    log = app.stderr()
    assert "Traceback" not in log and "encountered error" not in log, log
    assert log.count(f"the bundled nats-server (pid {first}) died (killed by SIGKILL)") == 1, log
    assert log.count("restarted the bundled nats-server at " + app.nats_url) == 1, log
    assert log.count("NATS: disconnected; reconnecting") == 1, log
    assert log.count("NATS: ConnectionRefusedError") <= 1, log
    assert log.count("demo: disconnected from NATS") == 1, log


def test_the_bundled_server_ends_when_the_dashboard_is_killed_with_sigkill(dashboards):
    app = dashboards().wait_serving()
    server = support.wait_for(app.server_pid, message="the bundled server's pid file")
    app.proc.send_signal(signal.SIGKILL)
    app.proc.wait(30)
    support.wait_for(lambda: support.gone(server), timeout=30, message="the bundled server to end with its dashboard")


def test_a_second_start_on_the_same_instance_refuses_in_one_line_and_runs_no_second_server(dashboards, tmp_path):
    first = dashboards().wait_serving()
    server = support.wait_for(first.server_pid, message="the bundled server's pid file")

    second = dashboards(name="second")
    assert second.proc.wait(60) == 2
    errors = [line for line in second.stderr().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"another dashboard (pid {first.proc.pid})" in errors[0], second.stderr()
    assert "Traceback" not in second.stderr()
    assert servers_on(first.store) == [server]
    assert first.proc.poll() is None and first.server_pid() == server
    # On a database of its own, the refused start made no admin: its one-time password, never
    # shown, would have left every later start without a login to print.
    fresh = tmp_path / "fresh.sqlite3"
    third = dashboards(name="third", database_url=f"sqlite:///{fresh}")
    assert third.proc.wait(60) == 2 and "another dashboard" in third.stderr()
    with sqlite3.connect(fresh) as conn:
        assert conn.execute("SELECT COUNT(*) FROM users").fetchone()[0] == 0


def test_a_port_in_use_is_refused_in_one_line_before_anything_starts_and_the_first_password_is_kept(dashboards):
    """It was a traceback, after the bundled server had started and the first admin had been made
    with a password never shown (the next start makes none: it was lost)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        refused = dashboards("--port", str(port))
        assert refused.proc.wait(60) == 2
    errors = [line for line in refused.stderr().splitlines() if line.startswith("error:")]
    assert errors == [f"error: cannot listen on 127.0.0.1:{port}: the port is in use (another program, or another "
                      "dashboard, holds it: choose another with --port)"], refused.stderr()
    assert "Traceback" not in refused.stderr()
    assert servers_on(refused.store) == []
    with sqlite3.connect(refused.folder / "instance" / "dlq.sqlite3") as conn:
        assert conn.execute("SELECT COUNT(*) FROM users").fetchone()[0] == 0  # the next start makes the admin


def test_a_server_that_a_killed_dashboard_left_running_is_stopped_and_its_port_reused(dashboards):
    first = dashboards().wait_serving()
    leftover = support.wait_for(first.server_pid, message="the bundled server's pid file")
    # Frozen, the server outlives its dashboard (its parent-death SIGTERM waits, pending), as it
    # would where there is no parent-death signal; continued, at the latest when this process
    # ends (support.stopped), it acts on that SIGTERM.
    held = ExitStack()
    held.enter_context(support.stopped(leftover))
    try:
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
        assert not support.gone(leftover)

        second = dashboards(name="second").wait_serving()
        assert second.nats_url == first.nats_url
        assert support.gone(leftover)
        assert servers_on(second.store) == [second.server_pid()]
        assert "stopping the bundled nats-server (pid %d) that an earlier dashboard left running" % leftover \
            in second.stderr()
    finally:
        held.close()
        if not support.gone(leftover):
            os.kill(leftover, signal.SIGKILL)


def test_a_store_locked_by_another_process_is_refused_in_one_line(dashboards, tmp_path):
    store = tmp_path / "instance" / "nats"
    store.mkdir(parents=True)
    with open(store / LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        app = dashboards()
        assert app.proc.wait(60) == 2
    errors = [line for line in app.stderr().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "is in use by another process" in errors[0], app.stderr()
    assert servers_on(store.resolve()) == []


def test_a_nats_server_running_on_the_store_without_its_lock_is_refused_in_one_line(dashboards, tmp_path):
    # As a server left by a release without the lock, or started by hand, would be.
    other = NatsServer(store_dir=tmp_path / "instance" / "nats", port=0).start()
    try:
        app = dashboards()
        assert app.proc.wait(60) == 2
        errors = [line for line in app.stderr().splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and f"a nats-server (pid {other.proc.pid}) runs on" in errors[0], app.stderr()
        assert servers_on(app.store) == [other.proc.pid]
    finally:
        other.stop()


@pytest.mark.parametrize("while_", ["running", "its server is down"])
def test_sigterm_stops_the_dashboard_with_exit_code_0_and_nothing_left_pending(dashboards, while_):
    app = dashboards("--demo").wait_serving()
    server = support.wait_for(app.server_pid, message="the bundled server's pid file")
    support.wait_for(lambda: "demo:" in app.stderr() or "dlq_consumer" in app.stderr(), timeout=30,
                     message="the demo to run")
    if while_ == "its server is down":
        os.kill(server, signal.SIGKILL)
        support.wait_for(lambda: "NATS: disconnected" in app.stderr(), timeout=30, message="the disconnect")
    app.proc.send_signal(signal.SIGTERM)
    assert app.proc.wait(60) == 0
    log = app.stderr()
    assert "Task was destroyed" not in log and "RuntimeError" not in log, log
    # No traceback of nats-py's reconnect attempts, nor of a stop that timed out.
    assert "encountered error" not in log and "nats/aio/client.py" not in log, log
    assert "did not stop cleanly" not in log and "still running after their cancel" not in log, log
    support.wait_for(lambda: not servers_on(app.store), timeout=30, message="the bundled server to stop")


def test_a_bundled_server_that_cannot_start_again_is_given_up_on_in_one_line(tmp_path, monkeypatch, caplog):
    from dlq_dashboard.nats import bundled, server as server_module

    monkeypatch.setattr(bundled, "FIRST_DELAY", 0.01)
    monkeypatch.setattr(bundled, "MAX_DELAY", 0.02)
    monkeypatch.setattr(bundled, "MAX_FAILURES", 3)
    supervised = bundled.BundledServer(tmp_path / "nats", port=0).start()
    try:
        first = supervised.pid

        def missing() -> str:
            raise FileNotFoundError("nats-server not found")

        monkeypatch.setattr(server_module, "find_nats_server", missing)
        with caplog.at_level("INFO", logger=bundled.__name__):
            os.kill(first, signal.SIGKILL)
            support.wait_for(lambda: supervised.gave_up, message="the supervisor to give up")
        lines = [r.getMessage() for r in caplog.records if r.name == bundled.__name__]
        assert len(lines) == 4, lines  # died, two failed attempts, gave up
        assert lines[0].startswith(f"the bundled nats-server (pid {first}) died (killed by SIGKILL)")
        assert lines[-1].startswith("gave up starting the bundled nats-server after 3 attempts (nats-server not found)")
        assert not Path(f"/proc/{first}").exists()  # reaped
    finally:
        supervised.stop()


def test_nats_pys_default_error_callback_logs_one_line_per_different_error(caplog):
    from nats.aio.client import _default_error_callback

    from dlq_dashboard.nats.client_log import NATS_LOGGER, quiet_nats_tracebacks

    quiet_nats_tracebacks()
    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 4222)")
    with caplog.at_level("ERROR", logger=NATS_LOGGER):
        for exc in (refused, refused, refused, TimeoutError("nats: timeout"), TimeoutError("nats: timeout")):
            support.run(_default_error_callback(exc))
    records = [r for r in caplog.records if r.name == NATS_LOGGER]
    assert [r.getMessage() for r in records] == [
        "nats: ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 4222)",
        "nats: TimeoutError: nats: timeout"]
    assert not any(r.exc_info for r in records)


def test_ports_for_servers_are_chosen_where_no_outgoing_connection_can_take_them_first():
    """A port found free among the system's ports for outgoing connections can be a client's
    before the server binds it (EADDRINUSE, seen with the identity provider): free ports come
    from below that range, distinct, and skip one that is in use."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = free_ports(50)
    assert len(set(ports)) == 50 and all(port in LISTEN_PORTS and port < low for port in ports)
    assert all(free_port() in LISTEN_PORTS for _ in range(20))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports[0]))
        taken.listen()
        assert free_port(ports[0]) != ports[0]
        assert free_port(ports[1]) == ports[1]  # a free preferred port is kept


def _bindable_now(ports) -> list[int]:
    free = []
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            free.append(port)
    return free


def test_a_port_handed_out_is_not_handed_out_again_before_every_other_one_was(monkeypatch):
    """A cluster's node keeps its port across a restart: while it is down the port is free, and
    a choice made then (here in the same process) must not be that port."""
    mine = listen_ports()
    narrow = range(mine.stop - 12, mine.stop)
    monkeypatch.setattr(server_module, "_ports", mine)  # put back after the test
    choose_ports_in(narrow)
    free = _bindable_now(narrow)
    assert len(free) >= 6, f"too few free ports to test with in {narrow}"
    node_ports = free_ports(3)  # a cluster of three, then its first node goes down
    later = [free_port() for _ in range(len(free) - 3)]
    assert set(node_ports) | set(later) == set(free) and not set(node_ports) & set(later)
    assert free_port() in node_ports  # once every other one was handed out, the walk goes round


def test_each_worker_of_a_test_run_chooses_ports_in_a_part_of_its_own(monkeypatch):
    parts = [worker_ports(i, 4) for i in range(4)]
    assert all(len(part) >= 3000 for part in parts)
    assert all(a.stop <= b.start for a, b in zip(parts, parts[1:]))
    assert parts[0].start >= LISTEN_PORTS.start and parts[-1].stop <= LISTEN_PORTS.stop
    if "PYTEST_XDIST_WORKER" in os.environ:  # this run's worker: conftest.py gave it its part
        count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
        assert listen_ports() != LISTEN_PORTS and len(listen_ports()) <= len(LISTEN_PORTS) // count
    monkeypatch.setattr(server_module, "_ports", listen_ports())  # put back after the test
    choose_ports_in(parts[2])
    assert listen_ports() == parts[2] and all(port in parts[2] for port in free_ports(20))
    with pytest.raises(ValueError, match="not within 20000-32767"):
        choose_ports_in(range(2000, 3000))


def test_a_port_another_process_listens_on_is_never_taken_for_the_server_started_there(tmp_path, monkeypatch):
    # What a chosen port meets when another process binds it first (seen in CI: the server said
    # "address already in use" and ended, and its start answered with the other listener).
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        assert server_module.listens_on(os.getpid(), port) is True
        assert server_module.listens_on(os.getppid(), port) is False

        # Asked for that port, the start fails with the server's end, not another's answer.
        given = NatsServer(store_dir=tmp_path / "given", port=port, log_path=tmp_path / "given.log")
        with pytest.raises(server_module.ServerExited):
            given.start()
        assert "address already in use" in (tmp_path / "given.log").read_text()

        # Given it by the chooser, the server starts again on another port, and is the one there.
        chosen = iter([port])
        real = server_module.free_port
        monkeypatch.setattr(server_module, "free_port", lambda *a: next(chosen, None) or real(*a))
        server = NatsServer(store_dir=tmp_path / "chosen", log_path=tmp_path / "chosen.log").start()
        try:
            assert server.port != port and server_module.listens_on(server.proc.pid, server.port) is True
            assert "address already in use" in (tmp_path / "chosen.log").read_text()

            async def stream_count() -> int:
                nc = await nats.connect(server.url)
                try:
                    return (await nc.jetstream().account_info()).streams
                finally:
                    await nc.close()

            assert support.run(stream_count()) == 0
        finally:
            server.stop()
    finally:
        taken.close()
