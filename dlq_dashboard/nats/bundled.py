"""The bundled nats-server of ``python app.py``: one per store, started again when it dies,
ended with the dashboard however the dashboard ends.

- **One server per store.** The store folder holds a lock file, locked (``flock``) by the
  dashboard and by every nats-server it starts (the server inherits the locked descriptor), so
  the lock is held while either lives. A start that finds it held reads the pid file beside it:
  a server that an earlier, killed dashboard left running on this store is stopped and its port
  reused; a server whose dashboard still runs, or a holder the pid file does not name, makes the
  start refuse with one sentence (StoreInUse).
- **Started again.** A supervisor thread waits on the process (reaping it, so no zombie
  stays), logs one line when it dies, starts it again on the same port and store after a
  growing delay, logs one line when it is back, and one when it gives up.
- **Ends with the dashboard.** On Linux each server gets a parent-death signal (SIGTERM). The
  kernel sends it when the *thread* that forked the server ends, so every server is forked by
  the supervisor thread, which lives until the dashboard stops the server.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path

from ..files import private_folder, write_private
from .server import NatsServer, free_port

log = logging.getLogger(__name__)

LOCK_FILE = "dashboard.lock"
PID_FILE = "nats-server.pid"
# Delays before a restart: 0.5, 1, 2 ... 30 s; back to the first after a server that stayed up.
FIRST_DELAY = 0.5
MAX_DELAY = 30.0
# A server up this long counts as a success: the next death is restarted after FIRST_DELAY.
STABLE_AFTER = 30.0
# Restarts in a row that failed (or died within STABLE_AFTER) before the supervisor gives up.
MAX_FAILURES = 10
# How long a leftover server (or one ending by its parent-death signal) may take to let go of the store.
LEFTOVER_TIMEOUT = 15.0


class StoreInUse(RuntimeError):
    """Another process holds the bundled server's store; the message says which, in one sentence."""


def describe_exit(code: int | None) -> str:
    """A process's end in words: ``exit status 1``, ``killed by SIGKILL``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class BundledServer:
    """The dashboard's own nats-server on ``store_dir``, supervised; ``start()`` returns once it
    listens, ``stop()`` ends it and the supervisor."""

    def __init__(self, store_dir: Path, *, port: int = 4222, log_path: Path | None = None,
                 start_timeout: float = 10.0):
        self.store_dir = Path(store_dir).resolve()
        self.preferred_port = port
        self.log_path = log_path
        self.start_timeout = start_timeout
        self.server: NatsServer | None = None
        self.restarts = 0
        self.gave_up = False
        self._lock_fd: int | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def pid(self) -> int | None:
        """The running server's pid (None between a death and its restart)."""
        server = self.server
        return server.proc.pid if server is not None and server.running else None

    # --- start and stop -----------------------------------------------------------------------

    def start(self) -> "BundledServer":
        """Take the store (stopping a leftover of a killed dashboard), start the server from the
        supervisor thread and wait until it listens. Raises StoreInUse or the start's error."""
        private_folder(self.store_dir)
        port = self._take_store()
        self.server = NatsServer(store_dir=self.store_dir, port=free_port(port), log_path=self.log_path,
                                 end_with_parent=True, pass_fds=(self._lock_fd,))
        self._thread = threading.Thread(target=self._supervise, name="nats-bundled", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            self._thread.join()
            self._release_store()
            raise self._start_error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server cleanly (SIGTERM), end the supervisor and let go of the store."""
        if self._thread is None:
            return
        self._stopping.set()
        if self.server is not None:
            self.server.stop(timeout)  # the supervisor's wait returns, and it sees _stopping
        self._thread.join(timeout)
        self._thread = None
        (self.store_dir / PID_FILE).unlink(missing_ok=True)
        self._release_store()

    # --- the supervisor -----------------------------------------------------------------------

    def _supervise(self) -> None:
        try:
            try:
                self._start_server()
            except Exception:
                # Another process took the free port between the choice and the start (no URL
                # is printed yet): once more on another free port.
                if free_port(self.server.port) == self.server.port:
                    raise
                self.server.port = free_port()
                self._start_server()
        except BaseException as exc:  # reported to start(), which raises it
            self._start_error = exc
            return
        finally:
            self._ready.set()
        delay, failures = FIRST_DELAY, 0
        while True:
            server = self.server
            if self._stopping.is_set():  # stop() came while this thread was starting it
                server.stop()
                return
            started = time.monotonic()
            code = server.proc.wait()  # reaps it: no zombie stays
            if self._stopping.is_set():
                return
            if time.monotonic() - started >= STABLE_AFTER:
                delay, failures = FIRST_DELAY, 0
            if failures >= MAX_FAILURES:
                log.error("gave up restarting the bundled nats-server: it died %d times in a row within %g s of "
                          "starting (last: %s); the dashboard runs without NATS until it is restarted",
                          failures, STABLE_AFTER, describe_exit(code))
                self.gave_up = True  # after the line: whoever waits for it finds the line written
                return
            log.warning("the bundled nats-server (pid %d) died (%s); starting it again in %.1f s on %s, same store",
                        server.proc.pid, describe_exit(code), delay, server.url)
            while True:
                if self._stopping.wait(delay):
                    return
                delay = min(delay * 2, MAX_DELAY)
                failures += 1
                try:
                    self._start_server()
                except Exception as exc:  # noqa: BLE001 - tried again, then given up with one line
                    if failures >= MAX_FAILURES:
                        log.error("gave up starting the bundled nats-server after %d attempts (%s); the dashboard "
                                  "runs without NATS until it is restarted", failures, exc)
                        self.gave_up = True
                        return
                    log.warning("the bundled nats-server did not start again (%s); next attempt in %.1f s", exc, delay)
                    continue
                self.restarts += 1
                log.info("restarted the bundled nats-server at %s (pid %d)", self.server.url, self.server.proc.pid)
                break

    def _start_server(self) -> None:
        # Forked by this thread only: the parent-death signal follows the thread that forked.
        self.server.start(self.start_timeout)
        self._write_pid_file()

    def _write_pid_file(self) -> None:
        record = {"pid": self.server.proc.pid, "dashboard": os.getpid(), "port": self.server.port}
        path = self.store_dir / PID_FILE
        temporary = path.with_suffix(".tmp")
        write_private(temporary, json.dumps(record) + "\n")
        temporary.replace(path)

    # --- the store's lock ---------------------------------------------------------------------

    def _take_store(self) -> int:
        """Lock the store; return the port to prefer (a stopped leftover's, so its URL stays)."""
        fd = os.open(self.store_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if _try_lock(fd):
                self._lock_fd = fd
                self._refuse_unlocked_servers()
                return self.preferred_port
            pid, port = self._leftover()
            log.warning("stopping the bundled nats-server (pid %d) that an earlier dashboard left running on %s",
                        pid, self.store_dir)
            _end_process(pid, LEFTOVER_TIMEOUT)
            deadline = time.monotonic() + LEFTOVER_TIMEOUT
            while not _try_lock(fd):
                if time.monotonic() > deadline:
                    raise StoreInUse(f"the bundled nats-server's store {self.store_dir} is still locked "
                                     f"{LEFTOVER_TIMEOUT:g} s after its leftover server (pid {pid}) was stopped")
                time.sleep(0.05)
            self._lock_fd = fd
            return port or self.preferred_port
        except BaseException:
            if self._lock_fd != fd:
                os.close(fd)
            raise

    def _refuse_unlocked_servers(self) -> None:
        """A nats-server on this store that does not hold its lock (started by hand, or by a
        release without the lock) is no reason to start a second one: refuse, naming it."""
        others = _servers_on(self.store_dir)
        if others:
            raise StoreInUse(f"a nats-server (pid {others[0]}) runs on the bundled server's store {self.store_dir} "
                             f"without its lock: stop it, or set NATS_URL to use it")

    def _leftover(self) -> tuple[int, int | None]:
        """The pid and port of the server holding the store when it is a leftover of a dashboard
        that is gone; raises StoreInUse for any other holder."""
        record = _read_pid_file(self.store_dir / PID_FILE)
        pid = record.get("pid")
        if not isinstance(pid, int) or not _runs_nats_server_on(pid, self.store_dir):
            raise StoreInUse(f"the bundled nats-server's store {self.store_dir} is in use by another process "
                             f"(it holds {LOCK_FILE}): stop the dashboard or server using it, or set NATS_URL")
        if _parent_of(pid) == record.get("dashboard"):
            raise StoreInUse(f"another dashboard (pid {record.get('dashboard')}) runs on this instance folder with "
                             f"its bundled nats-server (pid {pid}) on {self.store_dir}: stop it first, or start "
                             f"this one in another folder or with NATS_URL")
        port = record.get("port")
        return pid, port if isinstance(port, int) else None

    def _release_store(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # the lock goes with the last descriptor: a server's is closed already
            self._lock_fd = None


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise


def _read_pid_file(path: Path) -> dict:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _proc_fields(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process from /proc, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return fields[0], int(fields[1])


def _alive(pid: int) -> bool:
    fields = _proc_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _parent_of(pid: int) -> int | None:
    fields = _proc_fields(pid)
    return fields[1] if fields else None


def _store_of(pid: int) -> Path | None:
    """The store (``-sd``, relative to its working folder) of a running nats-server ``pid``."""
    if not _alive(pid):
        return None
    try:
        args = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    if not args or not os.path.basename(args[0]).startswith("nats-server"):
        return None
    for flag, value in zip(args, args[1:]):
        if flag in ("-sd", "--store_dir"):
            return (Path(cwd) / value).resolve()
    return None


def _runs_nats_server_on(pid: int, store: Path) -> bool:
    """Whether ``pid`` is a running nats-server whose store is ``store``."""
    return _store_of(pid) == store


def _servers_on(store: Path) -> list[int]:
    """Every running nats-server on ``store`` (Linux; none found elsewhere)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    return sorted(int(entry.name) for entry in proc.iterdir()
                  if entry.name.isdigit() and _runs_nats_server_on(int(entry.name), store))


def _end_process(pid: int, timeout: float) -> None:
    """SIGTERM a process that is not our child, SIGKILL it if it outlives ``timeout``; wait for it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
            os.kill(pid, signal.SIGCONT)  # a stopped process acts on its SIGTERM only when continued
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)
