"""What a start of `python app.py --demo` prints: one line per thing that matters (the bundled
server's URL, the demo, the dashboard's address), the one-time logins last in a frame, and no
Alembic paragraph per migration on stderr unless DLQ_LOG_LEVEL=debug."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dlq_dashboard.cli.main import configure_logging, framed, listen_error, parse_args
from dlq_dashboard.config import ConfigError
from dlq_dashboard.nats.server import free_port

from . import support

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def _start(folder: Path, again: bool = False, **env_changes: str) -> tuple[list[str], str]:
    """Start `python app.py --demo` in ``folder``, read stdout until the logins' frame closes,
    stop it with SIGTERM; its stdout lines and its stderr."""
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL") and not k.startswith("DLQ_")}
    env.update(PYTHONUNBUFFERED="1", SECRET_KEY="start-output-test", **env_changes)
    stdout_path, stderr_path = folder / "stdout.txt", folder / "stderr.txt"
    # Files, not pipes: the bundled server and the writer's processes share them and may
    # outlive the app by a moment.
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        # The bundled server on a port of this worker's (conftest.py), not one of all.
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--demo", "--port", "0", "--nats-port",
                                 str(free_port())], cwd=folder, env=env, stdout=stdout, stderr=stderr,
                                preexec_fn=support.ends_with_this_process())
    try:
        def started() -> bool:
            assert proc.poll() is None, f"app.py ended: {stderr_path.read_text(errors='replace')}"
            return "DLQ Dashboard at " in stdout_path.read_text()

        support.wait_for(started, timeout=60, message="app.py to serve")
        # Three lines, then (at the first start) the frame of four around the two logins.
        expected = 3 if again else 7
        support.wait_for(lambda: stdout_path.read_text().count("\n") >= expected, timeout=10, message="the logins")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    lines = stdout_path.read_text().splitlines()
    return lines, stderr_path.read_text(errors="replace")


def test_a_demo_start_prints_a_line_per_thing_and_its_logins_last_in_a_frame(tmp_path):
    lines, stderr = _start(tmp_path)
    assert re.fullmatch(r"Started the bundled nats-server at nats://127\.0\.0\.1:\d+", lines[0]), lines
    assert lines[1].startswith("Demo: orders flow into stream ORDERS")
    assert re.fullmatch(r"DLQ Dashboard at http://127\.0\.0\.1:\d+", lines[2])
    frame = lines[3:7]
    assert frame[0] == frame[3] and re.fullmatch(r"\+-+\+", frame[0])
    assert re.fullmatch(r"\| Created the first user: admin / \S+  \(shown once; change it with the CLI\) +\|", frame[1])
    assert re.fullmatch(r"\| Demo operator login: demo / \S+  \(shown once\) +\|", frame[2])
    assert len({len(line) for line in frame}) == 1
    assert lines[7:] == ["Stopping…"]
    # stderr: the log, without Alembic's paragraphs and without a line per stored order.
    assert "alembic" not in stderr and "Running upgrade" not in stderr
    assert "the database schema is at revision" in stderr
    assert "demo: stored order" not in stderr

    # The second start: no logins to show, so no frame.
    lines, _ = _start(tmp_path, again=True)
    assert [line.split(" at ")[0] for line in lines] == [
        "Started the bundled nats-server", lines[1], "DLQ Dashboard", "Stopping…"]


def test_alembics_lines_are_printed_with_dlq_log_level_debug(tmp_path):
    _, stderr = _start(tmp_path, DLQ_LOG_LEVEL="debug")
    assert "INFO alembic.runtime.migration: Running upgrade  -> 0001" in stderr


def test_a_log_level_is_one_of_four_words():
    with pytest.raises(ConfigError, match="DLQ_LOG_LEVEL='loud' is not one of debug, info, warning, error"):
        configure_logging({"DLQ_LOG_LEVEL": "loud"})
    root = logging.getLogger()
    before = (root.level, root.handlers[:], logging.getLogger("alembic").level)
    try:
        root.handlers[:] = []
        configure_logging({"DLQ_LOG_LEVEL": " Warning "})
        assert root.level == logging.WARNING and logging.getLogger("alembic").level == logging.WARNING
    finally:
        root.setLevel(before[0])
        root.handlers[:] = before[1]
        logging.getLogger("alembic").setLevel(before[2])


def test_a_frame_fits_its_longest_line():
    assert framed(["ab", "abcd"]).splitlines() == ["+------+", "| ab   |", "| abcd |", "+------+"]


@pytest.mark.parametrize("args, sentence", [
    (["--port", "99999"], "--port '99999' is not valid: use a whole number from 0 to 65,535 (0: a free port)"),
    (["--port", "-1"], "--port '-1' is not valid"),
    (["--threads", "0"], "--threads '0' is not valid: use a whole number from 1 to 256 (requests served at once)"),
    (["--nats-port", "70000"], "--nats-port '70000' is not valid"),
])
def test_a_port_or_a_thread_count_out_of_range_is_refused_in_one_line(args, sentence, capsys):
    """A port of 99999 served on 34463 (taken modulo 65536) and 0 threads answered nothing."""
    with pytest.raises(SystemExit) as ended:
        parse_args(args)
    assert ended.value.code == 2 and sentence in capsys.readouterr().err
    assert parse_args(["--port", "0", "--threads", "1"]).port == 0


def test_why_the_web_server_cannot_listen_says_what_to_change():
    import errno

    in_use = OSError(errno.EADDRINUSE, "Address already in use")
    assert listen_error("127.0.0.1", 8080, in_use) == (
        "cannot listen on 127.0.0.1:8080: the port is in use (another program, or another dashboard, holds it: "
        "choose another with --port)")
    assert listen_error("nope.invalid", 8080, ValueError("Invalid host/port specified.")) == (
        "cannot listen on nope.invalid:8080: the host does not resolve (give --host an address of this machine: "
        "127.0.0.1, 0.0.0.0)")
    assert listen_error("10.9.9.9", 80, OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")) == (
        "cannot listen on 10.9.9.9:80: Cannot assign requested address (check --host and --port)")
