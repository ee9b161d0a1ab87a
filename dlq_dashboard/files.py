"""Files only their owner may read: the instance folder (0700) and what the dashboard writes into
it or beside the SQLite database (0600): the database with payloads and password and token hashes,
its -wal and -shm files, the secret key, the bundled nats-server's store, log and URL.

Modes are given when a file or folder is created, never left to the umask (0644 by default), and
a file or folder this user owns from before is narrowed too.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

FOLDER_MODE = 0o700
FILE_MODE = 0o600
# SQLite creates these beside a database in WAL mode, with the database file's own mode.
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def _narrow(path: Path, mode: int) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    if info.st_uid == os.getuid() and info.st_mode & 0o777 & ~mode:
        os.chmod(path, info.st_mode & mode)


def private_folder(path: str | os.PathLike) -> Path:
    """Create ``path`` (and its missing parents) readable by its owner only; narrow it if it exists."""
    path = Path(path)
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        folder.mkdir(mode=FOLDER_MODE, exist_ok=True)
    _narrow(path, FOLDER_MODE)
    return path


def private_file(path: str | os.PathLike) -> Path:
    """Make sure ``path`` exists (empty if new) readable and writable by its owner only."""
    path = Path(path)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:  # never opened for writing: it may be a database we may only read
        _narrow(path, FILE_MODE)
    return path


def write_private(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path``, a file created (or narrowed) to its owner alone before it is written."""
    path = Path(path)
    private_file(path)
    path.write_text(text)


def private_sqlite(database: str | os.PathLike) -> None:
    """The SQLite database file, created empty if new, and its companions, owner only. SQLite
    gives the -wal and -shm files it creates later the database file's mode."""
    database = Path(database)
    if not database.parent.exists():  # an existing folder is the operator's choice, left as it is
        private_folder(database.parent)
    private_file(database)
    for suffix in SQLITE_COMPANIONS:
        _narrow(database.with_name(database.name + suffix), FILE_MODE)


def read_toml(path: str, error: type[Exception], shape: str) -> dict:
    """The parsed TOML file at ``path`` (DLQ_TEAMS, DLQ_CONFIG); ``error`` with one line saying why
    it cannot be read or is not TOML, then ``shape`` (what the file should be)."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise error(f"the file cannot be read ({exc.strerror or type(exc).__name__}); {shape}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"it is not TOML ({' '.join(str(exc).split())}); {shape}") from None
