"""While a backlog drains, a page's request comes first: the dashboard serves with a short
switch interval, so that a request's thread takes the interpreter lock back from the bridge's at
once, and with what its start made frozen out of the collector's full walks, which stop every
thread (the writer's lower CPU priority is tested in test_writer.py)."""

from __future__ import annotations

import gc
import signal
import sys

from dlq_dashboard.cli import main as cli_main
from dlq_dashboard.runtime import Runtime


def test_the_dashboard_serves_with_a_short_switch_interval_and_its_start_frozen_out_of_the_collector(monkeypatch, tmp_path):
    seen = {}

    class Server:
        effective_port = 8080

        def run(self):
            seen["interval"], seen["frozen"] = sys.getswitchinterval(), gc.get_freeze_count()

        def close(self):
            pass

    monkeypatch.setattr("waitress.create_server", lambda *args, **kwargs: Server())
    monkeypatch.setattr(Runtime, "start", lambda self, **kwargs: None)
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'dlq.db'}")
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:1")
    monkeypatch.setenv("SECRET_KEY", "priorities-test")
    monkeypatch.chdir(tmp_path)
    before, handler = sys.getswitchinterval(), signal.getsignal(signal.SIGTERM)
    try:
        assert cli_main.main(["--port", "0"]) == 0
    finally:
        sys.setswitchinterval(before)
        signal.signal(signal.SIGTERM, handler)
        gc.unfreeze()
    assert seen["interval"] == cli_main.SWITCH_INTERVAL < before == 0.005
    assert seen["frozen"] > 10_000  # the modules and the app, at least
