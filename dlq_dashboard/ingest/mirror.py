"""The mirror: DLQ stream and advisory stream -> entries, commit first, then move on.

Each stream is read from the position committed in the database (a backlog by batched direct
gets, direct.py; then an ordered consumer, flow-controlled, without acks), and every batch is
written with its last sequence in one transaction: a crash loses nothing, and a restart stores
nothing twice (it resumes after the last committed sequence; the unique key on (source, stream,
epoch, sequence) absorbs any overlap). Batches are parsed on a thread of this process and written by a
process of its own at a lower CPU priority than the pages (writer.py).

Batches reach the writer in stream order (an advisory batch reads its payloads before it is
sent, and the next batch waits for that), and each write's outcome is looked at when it ends,
whether more messages arrive or not. A failed write stops the follower, which starts again from
the committed position until the write succeeds; the stream is "stuck" from the first failure to
the next success (the error in memory for /healthz and the banner, a log line each way).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Awaitable, Callable

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.errors import NotFoundError
from sqlalchemy import Engine

from ..alerts.outbox import AlertRule
from ..config import Settings
from ..db.leases import acquire_lease, new_holder, release_lease
from ..db.mirror_reports import encode_report
from ..nats.bridge import Bridge, on_loop
from ..nats.streams import StreamSetup, read_message, stream_epoch
from ..scopes import DEFAULT_SOURCE
from ..times import utcnow
from .direct import EPOCH, DirectReader, supports_batches
from .inbox import Budget, Inbox
from .parse import parse_advisory
from .progress import StreamProgress, mirrored_streams, nats_failure, of_source
from .writer import WriterError, WriterProcess
from .takeover import Takes, take_over_position
from .writes import FetchedMessage, StreamMessage, dlq_values

log = logging.getLogger(__name__)

# Larger batches: each commit costs an fsync (synchronous=FULL), about 9 ms here.
BATCH = 2000
QUEUE = 4 * BATCH
CHECK_INTERVAL = 1.0
QUEUE_BYTES = 64 * 1024 * 1024
BATCH_BYTES = 16 * 1024 * 1024
# Batches sent to the writer process before the first is committed, so that it never waits for
# the next: 12,300 -> 14,200 msg/s from two to four (a 200,000-message backlog, measured).
WRITES_IN_FLIGHT = 4
FEWEST_IN_FLIGHT = 2  # a source's, when several share a process (Mirror.sharing)
LEASE_NAME = "mirror"  # the default source's; another source's is "mirror:<name>" (lease_name)
LEASE_SECONDS = 15.0
# The pause before retrying a stuck stream: doubled at each failure up to the longest, and back
# to the first once a write has succeeded.
RETRY_FIRST = 0.5
RETRY_LONGEST = 10.0
# A writer that calls wait for and that has not answered for WRITER_STUCK seconds (a batch takes
# well under one) makes the streams it owes stuck; one silent for WRITER_KILL is killed and
# another started, as the mirror's process is (process.py, SILENT_STUCK and SILENT_KILL).
WRITER_STUCK = 10.0
WRITER_KILL = 60.0
# A writer still starting (a forkserver's first start on a loaded machine takes seconds) is given
# this long to say it is ready, however short WRITER_KILL, before it is told as stuck and killed,
# as the mirror's process is given its first report (FIRST_REPORT).
WRITER_FIRST = 60.0


def lease_name(source: str) -> str:
    """The lease whose holder mirrors ``source``: one replica a source (SPEC section 12)."""
    return LEASE_NAME if source == DEFAULT_SOURCE else f"{LEASE_NAME}:{source}"


class StreamChanged(Exception):
    """The stream was deleted or recreated under the mirror: start over from the database."""


class WriterSilent(WriterError):
    """The writer process has not answered the writes waiting for it for WRITER_STUCK seconds."""


@dataclass
class Mirror:
    """Runs the stream followers of one source on its bridge while this process holds the
    source's mirror lease. ``settings`` are the source's (sources.source_settings)."""

    bridge: Bridge
    engine: Engine
    settings: Settings
    streams: StreamSetup
    source: str = DEFAULT_SOURCE
    holder: str = field(default_factory=new_holder)
    leader: bool = False
    # The sources this process mirrors: each follower holds a share of the budget (QUEUE,
    # QUEUE_BYTES, the writes in flight), so the process holds one source's however many.
    sharing: int = 1
    # The alerts its writes raise: the dashboard's rule (AlertRule.from_settings of the whole
    # settings, since a source's own settings know no other source and so could not name it in
    # the alert's text); None raises none.
    alerts: AlertRule | None = None
    # Whose stream positions this source takes over where it has none (a rename), as decided once
    # at the start for every source (takeover.takeover_plan): the old names, or ANY source not
    # among ``kept`` (the configured sources and the old names). Empty: none.
    takes: Takes = ()
    kept: tuple[str, ...] = ()
    progress: dict[str, StreamProgress] = field(init=False)

    def __post_init__(self):
        # One thread parses, and waits on the database and on the writer process: the DLQ and
        # advisory followers never write at the same time, and the bridge's loop never blocks.
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mirror-writer")
        self._process = WriterProcess(self.settings.database_url, self.alerts, self.settings.teams, self.source)
        self.progress = {name: StreamProgress(name, source=self.source) for name in mirrored_streams(self.settings)}

    def start(self) -> None:
        """Start competing for the lease and mirroring (returns at once)."""
        self.bridge.spawn(self._keep_running())

    async def _keep_running(self) -> None:
        """The mirror's loop, started again after a pause if an error nothing in it expected
        ends it: logged with its traceback, and every stream told as stuck with it meanwhile
        (/healthz and the banner say so while this process mirrors). A stop cancels it."""
        delay = RETRY_FIRST
        while True:
            started = time.monotonic()
            try:
                await self._run()
            except Exception as exc:
                if time.monotonic() - started > RETRY_LONGEST * 6:
                    delay = RETRY_FIRST  # it had run well for a while: a new failure, not the same one again
                log.error("the mirror%s stopped (%s: %s); starting it again in %.1f s", of_source(self.source),
                          type(exc).__name__, exc, delay, exc_info=True)
                for progress in self.progress.values():
                    progress.stuck(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_LONGEST)

    def close(self) -> None:
        """Release the lease and the writer thread (after the bridge has stopped)."""
        if self.leader:
            try:
                release_lease(self.engine, lease_name(self.source), self.holder)
            except Exception:
                log.warning("releasing the mirror lease failed", exc_info=True)
        self._writer.shutdown(wait=True)
        self._process.close()

    async def _db(self, fn, *args):
        return await on_loop(self._writer.submit(fn, *args), asyncio.get_running_loop())

    async def _send(self, name: str, *args) -> asyncio.Future:
        """Hand a write to the writer process; the future has its outcome. It is sent (pickled)
        on the writer thread, which takes what it is given in order, so the writer process gets
        the writes in the order of the calls while the caller prepares the next batch, and runs
        them in that order."""
        loop = asyncio.get_running_loop()
        sent = on_loop(self._writer.submit(self._process.submit, name, *args), loop)

        async def outcome():
            return await on_loop(await sent, loop)

        return asyncio.ensure_future(outcome())

    async def _run(self) -> None:
        followers: list[asyncio.Task] = []
        renewing = True  # False while renewals fail: logged when that starts and when it ends
        try:
            while True:
                try:
                    held = await self._db(acquire_lease, self.engine, lease_name(self.source), self.holder,
                                          LEASE_SECONDS, encode_report(self.source, self.progress.values(),
                                                                        LEASE_SECONDS / 3))
                    if not renewing:
                        log.warning("the mirror lease%s is renewed again", of_source(self.source))
                    renewing = True
                except Exception as exc:
                    # The database is unreachable: no other process can take the lease either.
                    # The followers keep trying (their writes fail and restart from the committed
                    # position); the lease is renewed, or found taken, once the database answers.
                    if renewing:
                        log.warning("the mirror lease%s could not be renewed (%s: %s); retrying every %.0f s",
                                    of_source(self.source), type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "",
                                    LEASE_SECONDS / 3)
                    renewing = False
                    held = self.leader
                if held and not followers:
                    log.info("this process mirrors %s of source %s", ", ".join(self.progress), self.source)
                    try:
                        await self._db(self._process.ensure_running)
                    except Exception as exc:
                        # No writer process could be started (no process, pipe or socket may be
                        # made): each follower's first write starts it again, and its stream is
                        # told as stuck with this error until one does.
                        log.warning("the mirror's writer%s could not be started (%s: %s)", of_source(self.source),
                                    type(exc).__name__, exc)
                    followers = [asyncio.create_task(self._watch()),
                                 asyncio.create_task(self._follow_forever(self.settings.dlq_stream,
                                                                          self._prepare_dlq))]
                    if self.settings.capture_advisories:
                        followers.append(asyncio.create_task(
                            self._follow_forever(self.settings.advisory_stream, self._prepare_advisories)))
                elif not held and followers:
                    log.warning("the mirror lease%s went to another process; this one stops mirroring",
                                of_source(self.source))
                    for task in followers:
                        task.cancel()
                    await asyncio.gather(*followers, return_exceptions=True)
                    followers = []
                self.leader = held
                await asyncio.sleep(LEASE_SECONDS / 3)
        finally:
            for task in followers:
                task.cancel()
            await asyncio.gather(*followers, return_exceptions=True)

    async def _follow_forever(self, stream: str, prepare: Callable[[str, str, list, int], Awaitable[tuple]]) -> None:
        progress = self.progress[stream]
        delay = RETRY_FIRST
        while True:
            outages = progress.outages
            try:
                await self._follow(stream, prepare, progress)
            except asyncio.CancelledError:
                raise
            except StreamChanged as exc:
                log.warning("%s", exc)
                await asyncio.sleep(0)
                continue
            except Exception as exc:  # an outage, a failed write: start over from the database
                if nats_failure(exc):
                    progress.waits_for_nats(exc)  # the NATS line says it: not a stuck stream
                else:
                    progress.stuck(exc)
                if progress.outages != outages:
                    delay = RETRY_FIRST  # a new outage: the last one ended with a success
            await self._pause(stream, delay)
            delay = min(delay * 2, RETRY_LONGEST)

    async def _pause(self, stream: str, seconds: float) -> None:
        """Wait before following ``stream`` again after a failure."""
        await asyncio.sleep(seconds)

    async def _stream_info(self, stream: str):
        js = self.bridge.js
        try:
            return await js.stream_info(stream)
        except NotFoundError:
            await self.streams.ensure(js)
            return await js.stream_info(stream)

    async def _follow(self, stream: str, prepare, progress: StreamProgress) -> None:
        while not self.bridge.state.connected or self.bridge.js is None:
            await asyncio.sleep(0.2)
        js = self.bridge.js
        try:
            info = await self._stream_info(stream)
        except Exception:
            progress.lost_stream()  # its head (and so its lag) is unknown until the stream answers
            raise
        epoch = stream_epoch(info)
        saved_epoch, last_seq = await self._db(take_over_position, self.engine, stream, epoch, self.source,
                                               self.kept or (self.source,), self.takes)
        if saved_epoch is not None and saved_epoch != epoch:
            # Sequences restart at 1 in a recreated stream. Old entries keep their epoch, so
            # nothing is overwritten; the new stream is read from its start.
            log.warning("stream %s was recreated (created %s, was %s): reading it from the start",
                        progress.named, epoch, saved_epoch)
            last_seq = 0
        if progress.epoch != epoch:
            progress.seen.clear()
            progress.missed_through = 0
        if info.state.messages:
            progress.removed_before_mirrored(info.state.first_seq, last_seq)
        progress.epoch, progress.last_seq, progress.queued_seq = epoch, last_seq, last_seq
        progress.saw_stream(info.state.last_seq)
        if progress.lag:
            await self._date_backlog(stream, max(last_seq + 1, info.state.first_seq), progress)
        # The error stays until a write succeeds, or until nothing is left to write: a retry
        # that has not written yet has not recovered (health would flap to ok meanwhile).
        if progress.lag == 0:
            await self._writer_ready()
            progress.recovered()

        inbox = Inbox(progress.queued_seq, self._budget, self._direct_reader(stream, info),
                       verify=lambda: self._check_stream(stream, epoch, progress))
        # A backlog is read by batched direct gets (direct.py), the live stream by the ordered consumer.
        inbox.behind = inbox.direct is not None and info.state.last_seq - last_seq >= BATCH
        in_flight = max(WRITES_IN_FLIGHT // self.sharing, FEWEST_IN_FLIGHT)
        # Writes in flight while the next batch gathers (the database and the network overlap); each
        # commits with its last sequence after the one before, so they end in order: look at the oldest.
        writing: deque[asyncio.Future] = deque()
        last_check = 0.0
        try:
            while True:
                while writing and writing[0].done():
                    writing.popleft().result()  # a failed write ends this follower: retried from the database
                await inbox.follow(js, stream)
                if not inbox.messages:
                    # Idle: wake for a message or for the end of the oldest write, so that a write
                    # failing at the end of a burst is seen though nothing else arrives.
                    arrived = asyncio.ensure_future(inbox.arrived.wait())
                    try:
                        done, _ = await asyncio.wait([arrived, *list(writing)[:1], *inbox.reading], timeout=1.0,
                                                     return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        arrived.cancel()
                    if not done:
                        await self._check_stream(stream, epoch, progress)
                        if not writing and progress.lag == 0:
                            await self._writer_ready()
                            progress.recovered()
                    continue
                batch = inbox.take(BATCH, BATCH_BYTES)
                batch = [item for item in batch if item[0] > progress.queued_seq]
                if not batch:
                    continue
                after, progress.queued_seq = progress.queued_seq, batch[-1][0]
                now = asyncio.get_running_loop().time()
                if now - last_check > CHECK_INTERVAL:
                    # A message delivered after the stream was recreated must not be stored
                    # under the old epoch. nats-py re-creates a lost ordered consumer only after
                    # missed heartbeats (seconds), so a check a second is soon enough.
                    await self._check_stream(stream, epoch, progress)
                    last_check = now
                while len(writing) >= in_flight:
                    await writing.popleft()
                # Prepared and sent here, one batch after the other: a batch whose payloads take
                # long to fetch is never overtaken by the next (the writer would refuse that one).
                name, args = await prepare(stream, epoch, batch, after)
                outcome = await self._send(name, *args)
                writing.append(asyncio.ensure_future(self._committed(outcome, batch, after, progress)))
        finally:
            if writing:
                await asyncio.shield(asyncio.gather(*writing, return_exceptions=True))
            await inbox.close()

    async def _watch(self) -> None:
        """Every CHECK_INTERVAL while following: ask the head of each stream whose follower has not
        asked for a while (it waits on the writer), so the lag told stays the stream's head minus
        what is committed; and watch the writer. One that has not answered the writes waiting for
        it for WRITER_STUCK is logged once and makes the streams it owes stuck; one silent for
        WRITER_KILL is killed by its process id, its writes fail, and the followers start again from
        the committed position with a new writer (nothing is lost, nothing stored twice)."""
        told = None  # the silent writer (its pid) already logged
        while True:
            await asyncio.sleep(CHECK_INTERVAL)
            await self._ask_heads()
            silent, pid, ready = self._process.silent(), self._process.pid, self._process.ready
            kill_after = WRITER_KILL if ready else max(WRITER_FIRST, WRITER_KILL)
            if silent < (WRITER_STUCK if ready else kill_after):  # a writer still starting is not silent yet
                told = None
                continue
            owed = [p for p in self.progress.values() if p.queued_seq > p.last_seq]
            if told != pid:
                told = pid
                log.warning("the mirror's writer%s (pid %s) has not answered for %.0f s; waiting: %s; it is "
                            "killed and another started once silent for %.0f s", of_source(self.source), pid, silent,
                            ", ".join(f"{p.named} after sequence {p.last_seq} up to {p.queued_seq} "
                                      f"({p.lag} behind the stream)" for p in owed) or "nothing", kill_after)
            error = WriterSilent(f"the mirror's writer process (pid {pid}) has not answered for "
                                 f"{WRITER_STUCK if ready else kill_after:.0f} s")
            for progress in owed:
                if progress.error is None:
                    progress.stuck(error)
            if silent >= kill_after:
                log.warning("the mirror's writer%s (pid %s) has not answered for %.0f s; killing it, another "
                            "resumes from the committed position", of_source(self.source), pid, silent)
                self._process.kill(pid)

    async def _ask_heads(self) -> None:
        """Note each stream's last sequence where its follower last did more than two checks ago
        (it waits on the writer); not while NATS is away, nor across a recreated stream."""
        js = self.bridge.js
        if js is None or not self.bridge.state.connected:
            return
        for name, progress in self.progress.items():
            if progress.epoch is None or time.monotonic() - progress.asked < 2 * CHECK_INTERVAL:
                continue
            try:
                info = await asyncio.wait_for(js.stream_info(name), self.settings.request_timeout)
            except Exception as exc:  # noqa: BLE001 - its follower says what fails
                log.debug("the head of %s could not be read: %s", progress.named, exc)
                continue
            if stream_epoch(info) == progress.epoch:
                progress.saw_stream(info.state.last_seq)

    async def _writer_ready(self) -> None:
        """Start the writer process unless it runs, raising what stops it: a quiet stream is
        never told as well while nothing that arrives could be written (the follower is retried,
        its stream told as stuck with the error, until the writer starts)."""
        await self._db(self._process.ensure_running)

    @staticmethod
    async def _committed(outcome: asyncio.Future, batch: list, after: int, progress: StreamProgress) -> None:
        # The outcome is noted the moment the write ends, whatever the follower is doing. A write
        # behind one that failed is refused (OutOfOrder): the cause is the first one's error.
        try:
            await outcome
        except Exception as exc:
            if progress.last_seq == after:
                progress.stuck(exc)
            raise
        progress.committed(batch[-1][0], len(batch))

    def _budget(self) -> Budget:
        """A follower's share of QUEUE and QUEUE_BYTES (Mirror.sharing), never below a batch and a
        half: full batches still form."""
        return Budget(max(QUEUE // self.sharing, BATCH + BATCH // 2), max(QUEUE_BYTES // self.sharing, BATCH_BYTES),
                      BATCH, BATCH_BYTES)

    def _direct_reader(self, stream: str, info) -> DirectReader | None:
        """A reader of ``stream``'s backlog by batched direct gets, when the stream allows them
        and the server has them; None otherwise (the ordered consumer reads everything)."""
        nc = self.bridge.nc
        if not info.config.allow_direct or not supports_batches((getattr(nc, "_server_info", None) or {}).get("version")):
            return None
        if not hasattr(nc, "raw_subscribe"):
            return None
        return DirectReader(nc, stream, self.settings.request_timeout)

    async def _check_stream(self, stream: str, epoch: str, progress: StreamProgress) -> None:
        try:
            info = await self.bridge.js.stream_info(stream)
        except NotFoundError:
            raise StreamChanged(f"stream {progress.named} was deleted; waiting for it to be recreated") from None
        if stream_epoch(info) != epoch:
            raise StreamChanged(f"stream {progress.named} was recreated; reading the new one from its start")
        progress.saw_stream(info.state.last_seq)

    async def _prepare_dlq(self, stream: str, epoch: str, batch: list, after: int) -> tuple[str, tuple]:
        """The writer call that stores a batch of DLQ messages, parsed here off the loop (the writer's is the bottleneck)."""
        messages = [StreamMessage(seq, m.subject, m.headers, m.data, EPOCH + timedelta(microseconds=(ns + 500) // 1000))
                    for seq, ns, m in batch]
        names, values = await self._db(dlq_values, stream, epoch, messages, self.source)
        return "ingest_dlq_parsed", (stream, epoch, names, values, batch[-1][0], after)

    async def _prepare_advisories(self, stream: str, epoch: str, batch: list, after: int) -> tuple[str, tuple]:
        """The writer call that stores a batch of advisories, with the payloads they name."""
        now = utcnow()
        items = []
        for seq, _, m in batch:
            try:
                advisory = parse_advisory(m.subject, m.data, f"{stream}:{epoch}:{seq}", now)
            except Exception as exc:  # one the parse did not foresee: skipped, never a stuck stream
                log.warning("%s sequence %s skipped: not an advisory this dashboard can read (%s: %s)", stream, seq,
                            type(exc).__name__, exc)
                continue
            if advisory is None or advisory.stream in (self.settings.dlq_stream, self.settings.advisory_stream):
                continue
            fetched, missing = None, None
            if advisory.kind != "nak":
                fetched, missing = await self._fetch(advisory.stream, advisory.stream_seq)
            items.append((advisory, fetched, missing))
        return "ingest_advisory_batch", (stream, epoch, items, batch[-1][0], after)

    async def _date_backlog(self, stream: str, seq: int, progress: StreamProgress) -> None:
        """A backlog found as the mirror starts following a stream (after a start, an outage, or
        taking the lease over from a replica that died) waits since its oldest message was stored,
        not since this first look: "behind since" (the banner, /healthz, dlq_mirror_behind_seconds)
        dates from the stream's own time of ``seq``. Left as it was if that cannot be read."""
        try:
            oldest = await read_message(self.bridge.nc, self.bridge.js, stream, seq, self.settings.request_timeout)
        except Exception as exc:  # noqa: BLE001 - a date only: the mirror goes on without it
            log.debug("the time of %s #%d could not be read: %s", progress.named, seq, exc)
            return
        if oldest.stored_at is not None and progress.seen and oldest.stored_at < progress.seen[0][0]:
            progress.seen.appendleft((oldest.stored_at, oldest.seq))

    async def _fetch(self, stream: str, seq: int) -> tuple[FetchedMessage | None, str | None]:
        try:
            raw = await read_message(self.bridge.nc, self.bridge.js, stream, seq, self.settings.request_timeout)
        except NotFoundError as exc:
            if getattr(exc, "err_code", None) == 10059:
                return None, f"Stream {stream} no longer exists, so the payload could not be read."
            return None, (f"Stream {stream} no longer holds sequence {seq} (workqueue and interest "
                          "streams delete a terminated message), so the payload could not be read.")
        except (NoRespondersError, NatsTimeoutError, asyncio.TimeoutError):
            raise  # an outage: the batch is retried from the committed position
        return FetchedMessage(subject=raw.subject, headers=raw.headers, data=raw.data), None
