"""The mirror's writer in a process of its own: it commits each batch while the bridge's event
loop, in the mirror's process (process.py; the dashboard's with ``--mirror-in-process``),
receives and parses the next one. In one process the two share one interpreter lock, and each
waits for the other (docs/PERFORMANCE.md measured it).

The writer is started from a forkserver (a small process forked before any thread exists, with
the ingest code preloaded), so starting one is quick and never forks the dashboard's threads.
It runs only the ingest functions, with its own database engine; a batch's rows and its stream
position still commit in one transaction there. When the dashboard's process ends, however it
ends, the writer sees its pipe close and exits.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from functools import lru_cache
from multiprocessing.connection import Connection
from typing import Any

from ..alerts.outbox import AlertRule
from ..children import log_as_parent, without_main
from ..db.engine import create_db_engine, dispose_quietly
from ..scopes import DEFAULT_SOURCE
from ..teams import Team
from . import columns, writes
from .search_index import SearchPass

log = logging.getLogger(__name__)

#: How much lower than the dashboard's the writer's CPU priority is (os.nice). While a backlog
#: drains, the writer keeps a CPU busy; a page's request, in the dashboard's process, then gets
#: the CPU first instead of waiting in the run queue behind it (docs/PERFORMANCE.md, "Readers
#: while the mirror drains"). The writer still takes every cycle the requests leave. At 10 a
#: ninth of the dashboard's weight when both want a CPU; at 5 (a third) the pages still waited
#: in the run queue two to three times longer than after the catch-up.
WRITER_NICENESS = 10


class WriterError(RuntimeError):
    """A batch could not be written; the message is the writer's exception, in one line."""


@lru_cache(maxsize=1)
def _context():
    # One forkserver a process (multiprocessing's own rule); the first writer starts it.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["dlq_dashboard.ingest.writer"])
    return context


class WriterProcess:
    """A child process that runs the ingest writes on its own database engine, in the order they
    are submitted. Several may be in flight: while it commits one batch the next one is already
    waiting in its pipe, so the writer never waits for the dashboard's process."""

    def __init__(self, database_url: str, alerts: AlertRule | None = None, teams: tuple[Team, ...] = (),
                 source: str = DEFAULT_SOURCE):
        self.database_url = database_url
        self.alerts = alerts  # raised in the writes' transactions; None: no alerts
        self.teams = teams  # DLQ_TEAMS: the team each new group is given
        self.source = source  # the source (SPEC section 12) whose entries and position it writes
        self._conn: Connection | None = None
        self._proc = None
        self._pending: deque[Future] = deque()  # the calls the current process has not answered
        self._ended = threading.Event()  # set when the current process's pipe has closed
        self._lock = threading.Lock()
        # Since when the current process owes an answer it has not given (monotonic): set when a
        # call is sent while none was waiting, moved on by each answer, None once none waits.
        self._owed_since: float | None = None
        self.ready = False  # whether the current process has said it is ready (its start done)

    def submit(self, name: str, *args: Any) -> Future:
        """Send ingest function ``name`` and its ``args`` to the writer; the future has its
        result. A writer that died is replaced; the calls it had are failed (the mirror resumes
        from the committed position)."""
        future: Future = Future()
        with self._lock:
            self._ensure_running()
            if self._owed_since is None:
                self._owed_since = time.monotonic()
            try:
                self._conn.send((name, args))
            except OSError as exc:
                future.set_exception(WriterError(f"the writer process ended before {name}: {type(exc).__name__}"))
                return future
            self._pending.append(future)
        return future

    def ensure_running(self) -> None:
        """Start the writer process unless it runs: its search pass catches up at once, though
        nothing new arrives (the mirror calls it when it takes its lease)."""
        with self._lock:
            self._ensure_running()

    def _ensure_running(self) -> None:
        # A writer whose pipe has closed is gone, though its parent may not have reaped it yet.
        if self._proc is None or self._ended.is_set() or not self._proc.is_alive():
            if self._proc is not None:
                log.warning("the mirror's writer process ended (exit code %s); starting another",
                            self._proc.exitcode)
                self._stop_process()
            self._start()

    @property
    def pid(self) -> int | None:
        """The current writer process's id (None before the first starts)."""
        proc = self._proc
        return proc.pid if proc is not None else None

    def silent(self) -> float:
        """How long, in seconds, calls have waited for the writer without it answering one (0 while
        none waits): a writer that commits gives an answer a batch, well within a second."""
        since = self._owed_since
        return 0.0 if since is None else max(time.monotonic() - since, 0.0)

    def kill(self, pid: int) -> None:
        """Kill the writer process ``pid`` if it is still the current one: one that stopped
        answering (stopped, or hung) gets no say. Its calls fail (nothing they had is committed,
        as each commits with its position), and the next call starts another writer. The lock is
        not taken: a call may be waiting, holding it, for a pipe the hung writer does not read."""
        proc = self._proc
        if proc is not None and proc.pid == pid:
            proc.kill()

    def call(self, name: str, *args: Any) -> Any:
        """Run ingest function ``name`` in the writer and return its result."""
        return self.submit(name, *args).result()

    def _start(self) -> None:
        ours, theirs = _context().Pipe()
        self._proc = _context().Process(target=serve, args=(self.database_url, theirs, self.alerts, self.teams,
                                                            self.source, logging.getLogger().getEffectiveLevel()),
                                        name=without_main(f"dlq-mirror-writer-{self.source}"), daemon=True)
        self._proc.start()
        theirs.close()
        self._conn, self._pending, self._ended = ours, deque(), threading.Event()
        self._owed_since, self.ready = None, False
        threading.Thread(target=self._read_replies, args=(ours, self._pending, self._ended),
                         name="mirror-writer-replies", daemon=True).start()

    def _read_replies(self, conn: Connection, pending: deque[Future], ended: threading.Event) -> None:
        # Replies come in the order of the calls: each settles the oldest pending future.
        while True:
            try:
                status, value = conn.recv()
            except (EOFError, OSError):
                conn.close()  # closed here only: closed under a read, the read raised a TypeError
                ended.set()
                with self._lock:
                    if pending is self._pending:
                        self._owed_since = None
                    while pending:
                        _settle(pending.popleft(), exception=WriterError("the writer process ended"))
                return
            if status == "ready":  # its start is done: a slow start is not a silence (serve)
                with self._lock:
                    if pending is self._pending:
                        self.ready = True
                        self._owed_since = time.monotonic() if pending else None
                continue
            with self._lock:
                future = pending.popleft()
                if pending is self._pending:
                    self._owed_since = time.monotonic() if pending else None
            if status == "ok":
                _settle(future, result=value)
            else:
                _settle(future, exception=WriterError(value))

    def close(self, timeout: float = 10.0) -> None:
        """Let the writer finish what it was sent, and exit."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.send(None)
                except OSError:
                    pass
            self._stop_process(timeout)

    def _stop_process(self, timeout: float = 10.0) -> None:
        if self._proc is not None:
            self._proc.join(timeout)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(timeout)
        # The process has ended: the reply reader reads the pipe's end, fails what is left and
        # closes its side of the pipe.
        self._proc, self._conn = None, None


def _ingest_dlq_rows(engine, alerts: AlertRule | None, teams: tuple[Team, ...], source: str, stream: str,
                     epoch: str, rows: list[tuple], after: int | None = None) -> int:
    # Plain tuples cross the pipe: pickling them costs a fraction of pickling dataclasses.
    return writes.ingest_dlq_batch(engine, stream, epoch, [writes.StreamMessage(*row) for row in rows], after,
                                   alerts, teams, source)


def _ingest_advisory_batch(engine, alerts: AlertRule | None, teams: tuple[Team, ...], source: str, stream: str,
                           epoch: str, items, last_seq: int, after: int | None = None) -> int:
    return writes.ingest_advisory_batch(engine, stream, epoch, items, last_seq, after, alerts, teams, source)


def _ingest_dlq_parsed(engine, alerts: AlertRule | None, teams: tuple[Team, ...], source: str, stream: str,
                       epoch: str, names: tuple[str, ...], values: list[tuple], last_seq: int,
                       after: int | None = None) -> int:
    # A parsed batch crosses the pipe as one tuple a row (its columns named once): a fraction
    # of pickling a dict a row, and written as it came (columns.py).
    return columns.ingest_dlq_parsed(engine, stream, epoch, names, values, last_seq, after, alerts, teams, source)


FUNCTIONS = {"ingest_dlq_rows": _ingest_dlq_rows, "ingest_dlq_parsed": _ingest_dlq_parsed,
             "ingest_advisory_batch": _ingest_advisory_batch}


def serve(database_url: str, conn: Connection, alerts: AlertRule | None = None, teams: tuple[Team, ...] = (),
          source: str = DEFAULT_SOURCE, level: int = logging.WARNING) -> None:
    """The writer's loop: run each requested ingest function until told to stop or orphaned;
    ``alerts``, ``teams`` and ``source`` are what the writes apply (the process has no Settings);
    its log lines at the dashboard's ``level``."""
    log_as_parent(level)
    lower_priority(WRITER_NICENESS)
    engine = create_db_engine(database_url)
    # The search index is written behind the writes, by a thread of this process: its statements
    # release the interpreter lock while they run, beside the next batch's parsing.
    search = SearchPass(engine).start()
    # What exists now (modules, the engine) lives as long as the writer: the collector need not
    # walk it again at every full collection, which a batch's many new objects bring about.
    gc.freeze()
    try:
        conn.send(("ready", None))
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):
                return  # the dashboard's process is gone
            if request is None:
                return
            name, args = request
            try:
                reply = ("ok", FUNCTIONS[name](engine, alerts, teams, source, *args))
            except Exception as exc:  # reported to the mirror, which resumes from the committed position
                reply = ("error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            try:
                conn.send(reply)
            except OSError:
                return
            search.poke()
    finally:
        search.stop()
        dispose_quietly(engine)


def lower_priority(niceness: int) -> None:
    """Lower this process's CPU priority by ``niceness`` (never raised: that needs privileges)."""
    try:
        os.nice(niceness)
    except OSError as exc:  # a platform or a sandbox that refuses it: the writer runs as it was
        log.warning("the mirror's writer keeps its CPU priority: %s", exc)


def _settle(future: Future, *, result=None, exception: BaseException | None = None) -> None:
    """Give ``future`` its outcome unless it was cancelled meanwhile (a stop cancels the mirror's
    waits; the reply still comes and must not end the reply reader)."""
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass
