"""A test run killed before its teardown (kill -9 of pytest, a CI job's timeout) leaves nothing
of its own running: each process the tests start (nats-server, PostgreSQL, the identity
provider, a dashboard and its mirror's processes) ends with the pytest process that started it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from . import support

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
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
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
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for name, pid in held.items():  # what this test's run started, by PID, if the test failed
            if isinstance(pid, int) and not support.gone(pid):
                os.kill(pid, signal.SIGKILL)
        if "postgres_data" in held:  # /tmp, where the server's user reaches it: not removed by pytest
            shutil.rmtree(held["postgres_data"], ignore_errors=True)
