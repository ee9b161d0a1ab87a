"""Whether the database answers, kept in memory: a probe thread asks it a trivial question every
second, each answer bounded, so that /healthz, the banner and every page know at once while the
database is stopped or frozen, without waiting on it themselves (docs/deploy.md, "A database
outage")."""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ..times import format_time, utcnow
from .bounds import Bounds, bounded
from .engine import create_db_engine, dispose_quietly

log = logging.getLogger(__name__)

# Errors that say the database cannot be used now (stopped, frozen, unreachable, a full disk, a
# file that cannot be opened, a statement or lock wait cut short), as opposed to a bug in a query.
UNAVAILABLE = (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)

UNREACHABLE = ("The database is not reachable, and this needs it; the dashboard answers again as soon "
               "as the database does.")
TOO_SLOW = "The database did not answer in time; try again in a moment."
CANNOT_WRITE = "The database cannot write now (its disk may be full, or the file read-only); try again once it can."

PROBE_INTERVAL = 1.0
# The probe's own bound: a trivial statement unanswered for this long means unreachable.
PROBE_BOUNDS = Bounds(statement=1.5, grace=0.5)

# libpq names the server it tried: not for every reader of /healthz.
_ADDRESS = re.compile(r'connection to server (?:at "[^"]*"(?: \([^)]*\))?, port \d+|on socket "[^"]*") failed: ')


#: Told when a stored value could not be read back (not the database's state: a defect).
UNREADABLE = ("A stored value could not be read as text; the database itself is fine. This is a defect "
              "of the dashboard, written to its log.")


def is_data_error(exc: BaseException) -> bool:
    """True when ``exc`` is about a value read, not the database: SQLite's driver raises an
    OperationalError ("Could not decode to UTF-8 column ...") for text that is not UTF-8."""
    return "Could not decode to UTF-8" in str(getattr(exc, "orig", None) or exc)


def is_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` says the database cannot be used now, not that a query is wrong."""
    if is_data_error(exc):
        return False
    return isinstance(exc, UNAVAILABLE) or (isinstance(exc, DBAPIError) and exc.connection_invalidated)


def is_timeout(exc: BaseException) -> bool:
    """True when the database answered nothing in time: a statement or lock wait cut short, or
    no pooled connection free (the database may be well, only busy)."""
    cause = getattr(exc, "orig", None) or exc
    return isinstance(exc, PoolTimeout) or type(cause).__name__ in ("QueryCanceled", "LockNotAvailable") \
        or "database is locked" in str(cause)


def _unanswered(exc: BaseException) -> bool:
    # bounded_pg's "did not answer within", libpq's "connection timeout expired".
    text = str(getattr(exc, "orig", None) or exc)
    return "did not answer within" in text or "timeout expired" in text


def sentence(exc: BaseException) -> str:
    """What a person is told when ``exc`` stopped their request (no driver text, no address)."""
    if is_timeout(exc):
        return TOO_SLOW
    cause = getattr(exc, "orig", None) or exc
    # SQLite says "disk I/O error" for a file it may not write (chattr +i) and a failing disk
    # alike: a write that met it could not write; a read that met it, the database is not usable.
    reading = (getattr(exc, "statement", None) or "").lstrip()[:6].upper() == "SELECT"
    if type(cause).__name__ in ("DiskFull", "ReadOnlySqlTransaction") or any(
            words in str(cause) for words in ("disk is full", "readonly database", "No space left")) or (
            "disk I/O error" in str(cause) and not reading):
        return CANNOT_WRITE
    return UNREACHABLE


def describe(exc: BaseException) -> str:
    """The driver's first line about why, without the server's address."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(cause).strip().splitlines() or [type(cause).__name__]
    return _ADDRESS.sub("", lines[0]).strip() or type(cause).__name__


@dataclass(frozen=True)
class DatabaseState:
    """What the pages and /healthz say about the database: ``reachable`` while the probe's last
    question was answered; ``unreachable_since`` when that stopped; ``last_error`` why."""

    reachable: bool = True
    unreachable_since: datetime | None = None
    last_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"connected": self.reachable, "unreachable_since": format_time(self.unreachable_since),
                "last_error": self.last_error}

    def reason(self) -> str:
        """Why nothing that needs the database can be done now, as a sentence."""
        return UNREACHABLE


class DatabaseProbe:
    """Asks the database ``SELECT 1`` every PROBE_INTERVAL on a connection of its own, and keeps
    the answer in ``state``; one log line per change. ``watch``, if given, is called with the
    connection after each answer, to read something small the pages keep in memory (the
    mirror's reports); its failure to read is logged once, and counts as an outage only when the
    database cannot be used."""

    def __init__(self, url: str, *, connect_timeout: float = 2.0, interval: float = PROBE_INTERVAL,
                 watch: Callable[[Connection], None] | None = None):
        # A pool of one of its own: the probe never waits behind the requests for a connection.
        self._engine = create_db_engine(url, connect_timeout=connect_timeout, pool_size=1, max_overflow=0)
        self.interval = interval
        self.watch = watch
        self._watch_failed = False
        self.state = DatabaseState()
        self._failed_in_a_row = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> DatabaseProbe:
        """Probe in a daemon thread until stop()."""
        self._thread = threading.Thread(target=self._run, name="database-probe", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check()
            self._stop.wait(self.interval)

    def check(self) -> DatabaseState:
        """Ask once now; returns (and keeps) the new state."""
        try:
            with bounded(PROBE_BOUNDS), self._engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1").scalar()
                if self.watch is not None:
                    self._watched(conn)
        except Exception as exc:  # anything that stops the question being answered is an outage
            self._failed_in_a_row += 1
            # A refusal is certain at once; a question unanswered in time may be a moment's load
            # on the server's host, so it counts from the second in a row (a freeze is a few
            # seconds old by then).
            if self._failed_in_a_row >= 2 or not _unanswered(exc):
                self._unreachable(describe(exc))
        else:
            self._failed_in_a_row = 0
            self._answered()
        return self.state

    def _watched(self, conn: Connection) -> None:
        try:
            self.watch(conn)
        except Exception as exc:
            if is_unavailable(exc):
                raise
            if not self._watch_failed:
                log.warning("the database probe could not read what it watches: %s", describe(exc))
            self._watch_failed = True
        else:
            self._watch_failed = False

    def _answered(self) -> None:
        if not self.state.reachable:
            log.warning("the database answers again (it was unreachable since %s)",
                        format_time(self.state.unreachable_since))
        self.state = DatabaseState()

    def _unreachable(self, error: str) -> None:
        previous = self.state
        if previous.reachable:
            log.warning("the database is not reachable: %s; pages and the API answer 503 until it is", error)
        self.state = DatabaseState(False, previous.unreachable_since or utcnow(), error)

    def stop(self) -> None:
        """Stop probing and close the probe's connection."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(PROBE_BOUNDS.wait + 5)
        dispose_quietly(self._engine)
