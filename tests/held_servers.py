"""Run alone by tests/test_killed_run.py, which kills the pytest process running it; the suite
does not collect it (no ``test_`` prefix). It starts one of each process the tests start (a
nats-server, PostgreSQL, the identity provider, a dashboard), says their PIDs, and holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from . import support

ROOT = Path(__file__).resolve().parent.parent


def test_hold_the_servers_until_the_run_is_killed(nats_server, postgres_server, identity_provider, tmp_path):
    provider = identity_provider(shared=False).start()
    env = {**os.environ, "NATS_URL": nats_server.url, "DATABASE_URL": f"sqlite:///{tmp_path / 'dlq.sqlite3'}",
           "SECRET_KEY": "held"}
    with open(tmp_path / "dashboard.log", "ab") as log:
        dashboard = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--port", "0"], cwd=tmp_path, env=env,
                                     stdout=log, stderr=subprocess.STDOUT, preexec_fn=support.ends_with_this_process())
    support.wait_for(lambda: "DLQ Dashboard at http://" in (tmp_path / "dashboard.log").read_text(), timeout=60,
                     message="the dashboard to start")
    # Its mirror's process and that one's writer, once started.
    support.wait_for(lambda: len(support.descendants(dashboard.pid)) >= 2, timeout=60, message="the mirror's processes")
    said = Path(os.environ["HELD_SERVERS"])
    held = {"pytest": os.getpid(), "nats-server": nats_server.proc.pid, "postgres": postgres_server.proc.pid,
            "identity provider": provider.process.pid, "dashboard": dashboard.pid,
            **{f"dashboard's process {pid}": pid for pid in support.descendants(dashboard.pid)},
            "postgres_folder": str(postgres_server.folder)}
    said.with_suffix(".part").write_text(json.dumps(held))
    said.with_suffix(".part").rename(said)
    threading.Event().wait(timeout=300)  # held until the run is killed
