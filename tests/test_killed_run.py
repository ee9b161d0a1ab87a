"""A test run killed before its teardown (kill -9 of pytest, a CI job's timeout) leaves nothing
of its own running: each process the tests start (nats-server, PostgreSQL, the identity
provider, a dashboard and its mirror's processes) ends with the pytest process that started it,
and the next PostgreSQL server a run starts removes the data the killed one left in /tmp."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from . import support
from .postgres import PostgresServer, remove_abandoned_folders

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "1"], ids=["one process", "a worker process"])
def test_the_processes_a_killed_run_started_end_with_it(tmp_path, workers):
    # With workers (as the suite runs), the process killed is the one that started them: each
    # worker ends once it finds it gone (execnet: measured 16 s), and what it started with it.
    said = tmp_path / "held.json"
    env = {**os.environ, "HELD_SERVERS": str(said)}
    with open(tmp_path / "run.log", "ab") as log:
        run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-n", workers, "-p", "no:randomly",
                                f"--basetemp={tmp_path / 'run'}", "tests/held_servers.py"],
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               preexec_fn=support.ends_with_this_process())  # a killed suite ends it too
    held: dict = {}
    try:
        support.wait_for(lambda: said.exists() or run.poll() is not None, timeout=180,
                         message="the run to start its servers")
        assert said.exists(), (tmp_path / "run.log").read_text()[-3000:]
        held = json.loads(said.read_text())
        pids = {name: pid for name, pid in held.items() if isinstance(pid, int)}
        assert len(pids) >= 7, held  # the tests' process, the servers, the dashboard and its mirror's two
        assert not [name for name, pid in pids.items() if support.gone(pid)], held

        os.kill(run.pid, signal.SIGKILL)  # no teardown, no atexit
        run.wait(30)
        try:
            support.wait_for(lambda: all(support.gone(pid) for pid in pids.values()), timeout=90,
                             message="every process the killed run started to end")
        except AssertionError as failed:
            running = [name for name, pid in pids.items() if not support.gone(pid)]
            raise AssertionError(f"{failed}; still running: {running}") from None
        # Without a teardown its PostgreSQL's folder stays (in /dev/shm or /tmp, where the server's
        # user reaches it) until a server is next made: here asked directly, as that one's start does.
        # (A worker that finds its run gone tears its session down, which removes it. In the suite,
        # another worker's PostgreSQL starting meanwhile may be the one that removes it: gone either
        # way, by remove_abandoned_folders, which this test's own call shows when it comes first.)
        folder = Path(held["postgres_folder"])
        removed = remove_abandoned_folders()
        assert not folder.exists(), removed
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for name, pid in held.items():  # what this test's run started, by PID, if the test failed
            if isinstance(pid, int) and not support.gone(pid):
                os.kill(pid, signal.SIGKILL)
        if "postgres_folder" in held:  # where the server's user reaches it: not removed by pytest
            shutil.rmtree(held["postgres_folder"], ignore_errors=True)


#: Run in a process group of its own: PostgreSQL and a nats-server started and frozen as the
#: tests freeze them (test_database_outage.frozen, support.frozen), their PIDs said, held.
FROZEN_SERVERS = """
import json, sys, threading
from pathlib import Path
import psutil
from dlq_dashboard.nats.server import NatsServer
from tests import support
from tests.postgres import PostgresServer
from tests.test_database_outage import frozen as postgres_frozen
postgres = PostgresServer().start()
nats = NatsServer(store_dir=Path(sys.argv[1]) / "nats").start()
pids = [postgres.proc.pid, *[c.pid for c in psutil.Process(postgres.proc.pid).children(recursive=True)], nats.proc.pid]
with postgres_frozen(postgres), support.frozen(nats):
    print(json.dumps({"pids": pids, "folder": str(postgres.folder)}), flush=True)
    threading.Event().wait(timeout=300)
"""


@pytest.mark.slow
def test_servers_frozen_when_their_run_is_killed_end_with_it(tmp_path):
    # A stopped process acts on its parent-death signal only once continued: before, a run killed
    # while a test held PostgreSQL or a nats-server stopped left it stopped, with parent 1, for good.
    with open(tmp_path / "run.log", "wb") as log:
        run = subprocess.Popen([sys.executable, "-c", FROZEN_SERVERS, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=log, start_new_session=True, preexec_fn=support.ends_with_this_process())
    held: dict = {}
    try:
        support.wait_for(lambda: select.select([run.stdout], [], [], 0)[0], timeout=120,
                         message="the servers to start and be frozen")
        said = run.stdout.readline()
        assert said, (tmp_path / "run.log").read_text()[-3000:]
        held = json.loads(said)
        assert [support.process_state(pid) for pid in held["pids"]] == ["T"] * len(held["pids"])

        os.killpg(run.pid, signal.SIGKILL)  # the run's process group, as a CI job's timeout does
        run.wait(30)
        try:
            support.wait_for(lambda: all(support.gone(pid) for pid in held["pids"]), timeout=60,
                             message="the frozen servers to end with the run")
        except AssertionError as failed:
            left = {pid: support.process_state(pid) for pid in held["pids"] if not support.gone(pid)}
            raise AssertionError(f"{failed}; still there: {left}") from None
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for pid in held.get("pids", ()):  # what the run started, by PID, if the test failed
            if not support.gone(pid):
                os.kill(pid, signal.SIGKILL)
        if "folder" in held:
            shutil.rmtree(held["folder"], ignore_errors=True)
        run.stdout.close()


def test_a_postgresql_folder_whose_maker_lives_is_never_taken_for_abandoned():
    server = PostgresServer()  # its folder made and held, the server not started yet
    try:
        assert (server.folder / "owner.lock").exists() and server.data_dir == server.folder / "data"
        assert server.folder not in remove_abandoned_folders() and server.data_dir.is_dir()
        # Another process sees it held as well (a lock of this process, not of this file object).
        other = subprocess.run([sys.executable, "-c", "from tests.postgres import remove_abandoned_folders; "
                                "print(*remove_abandoned_folders())"], cwd=ROOT, capture_output=True, text=True, check=True)
        assert str(server.folder) not in other.stdout and server.data_dir.is_dir()
    finally:
        server.remove()
    assert not server.folder.exists()


def test_every_process_a_test_starts_directly_is_told_to_end_with_it():
    # What test_the_processes_a_killed_run_started_end_with_it shows for one of each kind holds
    # for every Popen of the tests: each gets a parent-death signal (support.ends_with_this_process),
    # or says why it needs none (support.stopped's, which ends by itself once its stdin closes).
    import ast

    missing = []
    for path in sorted(ROOT.joinpath("tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "Popen" \
                    and "preexec_fn" not in {k.arg for k in node.keywords}:
                missing.append(f"{path.name}:{node.lineno}")
    assert missing == []


def test_a_process_reaped_between_opening_and_reading_its_stat_counts_as_gone(monkeypatch):
    """The kernel answers a read of an open /proc/<pid>/stat with ESRCH once the process is
    reaped; the helpers every kill test waits with take that for "gone", as a missing file."""
    child = subprocess.Popen(["sleep", "60"], preexec_fn=support.ends_with_this_process())
    opened = open(f"/proc/{child.pid}/stat")
    child.kill()
    child.wait()
    with opened:
        with pytest.raises(ProcessLookupError):
            opened.read()  # what the race looks like
        monkeypatch.setattr(support, "open", lambda *args, **kwargs: opened, raising=False)
        assert support.gone(child.pid)
