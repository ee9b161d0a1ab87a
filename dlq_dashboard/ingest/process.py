"""The mirror in a process of its own, as ``python app.py`` runs it: the mirror's NATS
connections, its followers and their parsing run in a child process (which starts its writer,
writer.py, as before), and the pages in the dashboard's process, so that a page does not wait for
the interpreter lock that receiving a backlog holds (docs/PERFORMANCE.md, "The mirror in a process
of its own").

The dashboard's process sees each source's mirror as a :class:`MirrorView`, with ``leader`` and
``progress`` as a Mirror has them (what /healthz, /metrics, the banner and /sources read, and what
the purge and the reopening ask), brought up to date from the child's report every
REPORT_INTERVAL. When the child ends it is started again, after a pause that doubles from
RESTART_FIRST up to RESTART_LONGEST, with the same lease holders, so that it takes its leases back
at once. It ends with the dashboard's process, however that ends: its pipe closes, and it stops
its followers and releases its leases. A child that neither reports nor ends (stopped, or hung) is
not left to hold the mirror without a word: after SILENT_STUCK its streams are told as stuck
(/healthz, the banner, /metrics), after SILENT_KILL it is killed and started again.
"""

from __future__ import annotations

import atexit
import gc
import logging
import multiprocessing
import multiprocessing.util
import shutil
import signal
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime
from multiprocessing.connection import Connection

from ..alerts.outbox import AlertRule
from ..children import log_as_parent, without_main
from ..config import Settings
from ..db.engine import create_db_engine, dispose_quietly
from ..db.leases import new_holder
from ..nats.bridge import Bridge
from ..nats.client_log import quiet_nats_tracebacks
from ..nats.streams import StreamSetup
from ..sources import source_settings, sources_of
from ..times import utcnow
from .mirror import Mirror
from .progress import StreamProgress, mirrored_streams
from .takeover import takeover_plan

log = logging.getLogger(__name__)

#: How often the child reports its streams' progress to the dashboard's process, in seconds.
REPORT_INTERVAL = 0.25
#: The pause before starting a child that ended, doubled at each end up to the longest; back to
#: the first once a child has run for RESTART_RESET seconds.
RESTART_FIRST = 1.0
RESTART_LONGEST = 30.0
RESTART_RESET = 60.0
#: How long a child asked to stop may take (its writes in flight end first) before it is killed.
STOP_TIMEOUT = 30.0
#: A child that has not reported for this long (it reports every REPORT_INTERVAL) is told as stuck
#: on every stream it mirrors; one silent for SILENT_KILL is killed, and another started.
SILENT_STUCK = 10.0
SILENT_KILL = 60.0
#: A child just started (a new interpreter importing the dashboard, slow on a loaded machine) is
#: given this long for its first report, however short SILENT_KILL: else a start slower than it
#: is killed, and so is each one after it.
FIRST_REPORT = 60.0


def snapshot(progress: StreamProgress) -> StreamProgress:
    """A copy of ``progress`` to send: its history of the stream's growth cut to the one point
    :meth:`StreamProgress.behind_since` reads, so that the copy answers as the original does."""
    behind = progress.behind_since()
    seen = deque([(behind, progress.stream_last_seq)]) if behind is not None else deque()
    return replace(progress, seen=seen)


@dataclass
class MirrorView:
    """One source's mirror as the dashboard's process sees it: the child's last report. Counts
    (``ingested``, ``outages``, ``missed``) go on from where an ended child left them."""

    source: str
    streams: list[str]
    holder: str = field(default_factory=new_holder)
    leader: bool = False
    _reported: dict[str, StreamProgress] = field(init=False, repr=False)
    _carried: dict[str, tuple[int, int, int]] = field(default_factory=dict, repr=False)
    _heard: float = field(default_factory=time.monotonic, repr=False)  # the last report's time
    _heard_at: datetime = field(default_factory=utcnow, repr=False)

    def __post_init__(self) -> None:
        self._reported = {name: StreamProgress(name, source=self.source) for name in self.streams}

    @property
    def progress(self) -> dict[str, StreamProgress]:
        """Each stream's progress as last reported; while mirroring, stuck from the last report on
        once the child has been silent for SILENT_STUCK (unless it said why already)."""
        silent = time.monotonic() - self._heard
        if not self.leader or silent < SILENT_STUCK:
            return self._reported
        error = f"the mirror's process has not reported for {silent:.0f} s"
        return {name: p if p.error else replace(p, error=error, stuck_since=self._heard_at)
                for name, p in self._reported.items()}

    def update(self, leader: bool, reported: list[StreamProgress]) -> None:
        progress = dict(self._reported)
        for p in reported:
            ingested, outages, missed = self._carried.get(p.stream, (0, 0, 0))
            progress[p.stream] = replace(p, ingested=p.ingested + ingested, outages=p.outages + outages,
                                         missed=p.missed + missed)
        self._heard, self._heard_at = time.monotonic(), utcnow()
        self._reported, self.leader = progress, leader

    def ended(self) -> None:
        """The child reporting for it has ended: not mirroring, its counts kept."""
        self.leader = False
        self._carried = {name: (p.ingested, p.outages, p.missed) for name, p in self._reported.items()}


class MirrorProcess:
    """Runs the mirrors of every source of ``settings`` in a child process, started again when it
    ends. ``servers``: the NATS URLs for every source (the bundled server's), or None for each
    source's own."""

    def __init__(self, settings: Settings, servers: list[str] | None = None):
        self.settings = settings
        self.servers = servers
        self.views = {source.name: MirrorView(source.name, mirrored_streams(source_settings(settings, source)))
                      for source in sources_of(settings)}
        self.restarts = 0  # children started after one ended
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._proc = None
        self._conn: Connection | None = None
        self._thread: threading.Thread | None = None
        self._scratch: str | None = None  # the running child's temporary directory

    @property
    def pid(self) -> int | None:
        """The running child's process id."""
        proc = self._proc
        return proc.pid if proc is not None else None

    @property
    def scratch(self) -> str | None:
        """The running child's temporary directory (removed once that child has ended)."""
        return self._scratch

    def start(self) -> MirrorProcess:
        self._thread = threading.Thread(target=self._supervise, name="mirror-process", daemon=True)
        self._thread.start()
        # Before multiprocessing's own exit handler, which would wait for the child forever.
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        """Ask the child to stop (its followers end, its leases are released) and wait for it."""
        self._stopping.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            try:
                conn.send("stop")
            except OSError:
                pass  # already ended
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(STOP_TIMEOUT + 10)
        atexit.unregister(self.stop)

    def _supervise(self) -> None:
        delay = RESTART_FIRST
        while True:
            with self._lock:
                if self._stopping.is_set():
                    return
                started = time.monotonic()
                self._start_child()
            code = self._follow_child()
            for view in self.views.values():
                view.ended()
            if self._stopping.is_set():
                return
            if time.monotonic() - started >= RESTART_RESET:
                delay = RESTART_FIRST
            log.warning("the mirror's process ended (exit code %s); starting another in %.0f s", code, delay)
            if self._stopping.wait(delay):
                return
            delay = min(delay * 2, RESTART_LONGEST)
            self.restarts += 1

    def _start_child(self) -> None:
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        holders = {name: view.holder for name, view in self.views.items()}
        # The child's temporary files (its writers' forkserver's socket) go in a directory this
        # process removes once the child has ended, however it ended: a child that is killed
        # cannot remove its own (serve, _temporary_files_in). A short name: a socket's path may
        # not be longer than 107 bytes.
        self._scratch = tempfile.mkdtemp(prefix="dlq-")
        # Not a daemon: a daemon may not start processes, and the child starts its writers. It
        # ends when its pipe closes, and stop() (also at exit) asks it first.
        self._proc = context.Process(target=serve, args=(self.settings, self.servers, holders, theirs,
                                                         logging.getLogger().getEffectiveLevel(), self._scratch),
                                     name=without_main("dlq-mirror"), daemon=False)
        self._proc.start()
        theirs.close()
        self._conn = ours

    def _follow_child(self) -> int | None:
        """Apply the child's reports until its pipe closes, or kill it once it has been silent for
        SILENT_KILL (FIRST_REPORT before its first report); its exit code."""
        conn, proc = self._conn, self._proc
        try:
            heard = False  # until its first report, a child may take FIRST_REPORT
            while True:
                if not conn.poll(SILENT_STUCK):
                    if self._stopping.is_set():
                        break  # asked to stop, it reports no more: joined, or killed, below
                    log.warning("the mirror's process (pid %s) has not reported for %.0f s", proc.pid, SILENT_STUCK)
                    limit = SILENT_KILL if heard else max(FIRST_REPORT, SILENT_KILL)
                    if not conn.poll(limit - SILENT_STUCK):
                        log.warning("the mirror's process (pid %s) has not reported for %.0f s; killing it",
                                    proc.pid, limit)
                        proc.kill()
                        break
                reports, heard = conn.recv(), True
                for name, (leader, progress) in reports.items():
                    view = self.views.get(name)
                    if view is not None:
                        view.update(leader, progress)
        except (EOFError, OSError):
            pass
        proc.join(STOP_TIMEOUT)
        if proc.is_alive():
            log.warning("the mirror's process did not stop within %.0f s; killing it", STOP_TIMEOUT)
            proc.kill()
            proc.join(10)
        with self._lock:
            self._conn = None
            conn.close()
        shutil.rmtree(self._scratch, ignore_errors=True)
        return proc.exitcode


def serve(settings: Settings, servers: list[str] | None, holders: dict[str, str], conn: Connection,
          level: int, scratch: str | None = None) -> None:
    """The child: every source's bridge and mirror, a report every REPORT_INTERVAL, until told
    to stop, its pipe closes (the dashboard's process ended) or SIGTERM. ``scratch``: the
    directory its temporary files go in (the dashboard's process removes it)."""
    if scratch is not None:
        _temporary_files_in(scratch)
    # Ctrl-C reaches every process of the terminal's group: the dashboard's process tells this one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    log_as_parent(level)
    quiet_nats_tracebacks()
    threading.Thread(target=_until_told, args=(conn, stopping), name="mirror-stop", daemon=True).start()
    engine = create_db_engine(settings.database_url, connect_timeout=settings.database_connect_timeout)
    sources = sources_of(settings)
    alerts = AlertRule.from_settings(settings)  # the dashboard's: it names the source of each group
    parts: list[tuple[Bridge, Mirror]] = []
    try:
        takes, kept = takeover_plan(engine, sources)  # once, before any follower asks
        for source in sources:
            own = source_settings(settings, source)
            bridge = Bridge(own, servers or list(own.nats_urls), source.name, purpose="mirror").start()
            mirror = Mirror(bridge, engine, own, StreamSetup(own), source.name, holder=holders[source.name],
                            sharing=len(sources), alerts=alerts, takes=takes[source.name], kept=kept)
            mirror.start()
            parts.append((bridge, mirror))
        # What the start made (modules, engines, bridges) lives as long as the child: the
        # collector need not walk it again at every full collection, which a backlog's many
        # new objects a message bring about (as cli/main.py and the writer do).
        gc.freeze()
        while not stopping.wait(REPORT_INTERVAL):
            try:
                reports = {m.source: (m.leader, [snapshot(p) for p in list(m.progress.values())]) for _, m in parts}
            except RuntimeError:  # a stream's history changed while it was read: the next report
                continue
            conn.send(reports)
    except (OSError, EOFError):
        pass  # the dashboard's process has ended
    finally:
        for bridge, _ in parts:
            bridge.stop()
        for _, mirror in parts:
            mirror.close()
        dispose_quietly(engine)
        conn.close()


def _temporary_files_in(scratch: str) -> None:
    """This child's temporary files go in ``scratch``, which is also multiprocessing's directory
    (its writers' forkserver's socket): removed when this child exits, as multiprocessing removes
    its own, and by the dashboard's process once the child has ended, killed too. Had the
    dashboard's process made a multiprocessing directory before starting this child, it came
    along with the Process object; multiprocessing.util.get_temp_dir reads this private entry,
    which has no public setter."""
    tempfile.tempdir = scratch
    multiprocessing.current_process()._config["tempdir"] = scratch
    multiprocessing.util.Finalize(None, shutil.rmtree, args=(scratch,), kwargs={"ignore_errors": True},
                                  exitpriority=-100)


def _until_told(conn: Connection, stopping: threading.Event) -> None:
    try:
        conn.recv()
    except (EOFError, OSError):
        pass
    stopping.set()
