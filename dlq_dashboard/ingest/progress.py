"""How far each mirrored stream has got (StreamProgress): what /healthz, /metrics, /sources and the
banner read from memory, changed on the bridge's thread only. Its log lines are the mirror's."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime

from nats.errors import Error as NatsError
from nats.js.errors import APIError, ServiceUnavailableError
from sqlalchemy.exc import SQLAlchemyError

from ..config import Settings
from ..db.liveness import describe
from ..nats.bridge import NatsUnavailable
from ..nats.streams import NO_JETSTREAM, jetstream_missing
from ..redaction import scrub
from ..scopes import DEFAULT_SOURCE
from ..times import utcnow

# The mirror's logger: a stream stuck or recovered is the mirror's news.
log = logging.getLogger("dlq_dashboard.ingest.mirror")


@dataclass
class StreamProgress:
    """How far one stream has been mirrored (for /healthz and /metrics)."""

    stream: str
    epoch: str | None = None
    last_seq: int = 0
    stream_last_seq: int = 0
    ingested: int = 0
    error: str | None = None  # why the stream is stuck: set at a failure, cleared by the next success
    stuck_since: datetime | None = None
    outages: int = 0  # times it became stuck
    queued_seq: int = 0  # handed to the writer, maybe not yet committed
    # (when, the stream's last seq) each time it was seen to have grown: the first past last_seq is how
    # long the oldest message not mirrored has waited. Changed on the bridge's thread; pages read a copy.
    seen: deque = field(default_factory=lambda: deque(maxlen=4096), repr=False)
    source: str = DEFAULT_SOURCE  # the source (SPEC section 12) whose stream this is
    # When the stream's last sequence was last asked (monotonic; 0: never): the mirror asks again
    # while its follower waits on the writer, so the lag stays the stream's head minus what is committed.
    asked: float = field(default=0.0, repr=False, compare=False)
    # Why the follower waits for NATS (its last failure was NATS not answering), None once NATS
    # answers: a NATS outage is told by the NATS line, not as a stuck stream (docs/sources.md).
    nats_wait: str | None = field(default=None, repr=False, compare=False)
    # Whether the stream's last sequence is known: not until the mirror has first read it, nor
    # while reading it fails (a stream JetStream will not make, JetStream not answering): its lag
    # is unknown then, null, not 0 (/api/sources, /metrics, as /healthz asks the stream itself).
    head_known: bool = field(default=False, compare=False)
    # Messages the stream no longer held when the mirror came to them (removed by its limits, a
    # purge or a delete before they were mirrored), counted since the start; ``missed_through``
    # is the last sequence counted, so a follower starting again counts a gap once.
    missed: int = 0
    missed_through: int = field(default=0, repr=False, compare=False)

    @property
    def named(self) -> str:
        """The stream as the log lines name it: with its source, unless that is the default one."""
        return self.stream + of_source(self.source)

    @property
    def lag(self) -> int:
        return max(self.stream_last_seq - self.last_seq, 0)

    @property
    def known_lag(self) -> int | None:
        """The lag, None while the stream's last sequence is not known."""
        return self.lag if self.head_known else None

    @property
    def known_head(self) -> int | None:
        """The stream's last sequence, None while it is not known."""
        return self.stream_last_seq if self.head_known else None

    def stuck(self, exc: BaseException) -> None:
        """Note a failure: the stream is stuck until a write succeeds (logged once, not each retry)."""
        # Every role reads it on the banner: a database's error as its driver's first line, without
        # the server's address (liveness.describe), not SQLAlchemy's text (the statement, a link).
        error = failure_text(exc)
        if self.error is None:
            self.stuck_since = utcnow()
            self.outages += 1
            log.warning("mirroring %s is stuck (%s); retrying until it succeeds", self.named, error)
        else:
            log.debug("mirroring %s is still stuck (%s)", self.named, error)
        self.error = error

    def waits_for_nats(self, exc: BaseException) -> None:
        """Note a failure of NATS's (it did not answer, or not usefully): the follower waits for
        NATS and starts again from the committed position; the stream is not stuck for it
        (logged once an outage)."""
        error = scrub(f"{type(exc).__name__}: {exc}")
        if self.nats_wait is None:
            log.warning("mirroring %s waits for NATS (%s); it resumes from the committed position once NATS "
                        "answers", self.named, error)
        self.nats_wait = error

    def recovered(self) -> None:
        """Note a success (a committed write, or nothing left to write): the stream is not stuck."""
        if self.error is not None:
            log.warning("mirroring %s recovered (stuck since %s: %s)", self.named,
                        self.stuck_since.isoformat(timespec="seconds"), self.error)
        self.error, self.stuck_since = None, None

    def committed(self, last_seq: int, count: int) -> None:
        """Note a committed write of ``count`` messages up to ``last_seq``: the stream holds at least
        that sequence, whatever the last stream_info (asked before the batch arrived) said."""
        self.last_seq = last_seq
        self.ingested += count
        self.stream_last_seq = max(self.stream_last_seq, last_seq)
        self.recovered()

    def removed_before_mirrored(self, first_seq: int, last_seq: int) -> None:
        """Note that the stream's first sequence is ``first_seq`` while ``last_seq`` is committed:
        the messages between were removed before they were mirrored (logged, and counted once)."""
        through = first_seq - 1
        if through <= last_seq:
            return
        log.warning("stream %s no longer holds sequences %d to %d (removed before they were mirrored: "
                    "by its limits, a purge or a delete)", self.named, last_seq + 1, through)
        if through > self.missed_through:
            self.missed += through - max(last_seq, self.missed_through)
            self.missed_through = through

    def saw_stream(self, last_seq: int) -> None:
        """Note the stream's last sequence as stream_info (or the first sight of it) says now."""
        self.stream_last_seq = last_seq
        self.asked = time.monotonic()
        self.nats_wait = None
        self.head_known = True
        while self.seen and self.seen[0][1] <= self.last_seq:
            self.seen.popleft()
        if not self.seen or last_seq > self.seen[-1][1]:
            self.seen.append((utcnow(), last_seq))

    def lost_stream(self) -> None:
        """Note that reading the stream's last sequence failed: it is not known until it is read."""
        self.head_known = False

    def behind_since(self) -> datetime | None:
        """Since when a message the stream holds has been waiting unmirrored; None when caught up."""
        last_seq = self.last_seq
        if self.stream_last_seq <= last_seq:
            return None
        return next((at for at, seq in list(self.seen) if seq > last_seq), None)


def failure_text(exc: BaseException) -> str:
    """A failure as the banner, the log and /healthz say it: a sentence for JetStream missing,
    a database's error as its driver's first line, else the exception's class and text."""
    if jetstream_missing(exc):
        return NO_JETSTREAM
    return scrub(f"{type(exc).__name__}: {describe(exc) if isinstance(exc, SQLAlchemyError) else exc}")


def nats_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is NATS not answering (a timeout, no responders, a closed connection,
    JetStream saying it is unavailable for now): the mirror then waits for NATS. Anything else
    makes the stream stuck: a write the database or the writer refused, an error nothing foresaw,
    an answer of JetStream's refusing what the mirror asks (``DLQ_REPLICAS=3`` against a server
    that is not clustered: "replicas > 1 not supported in non-clustered mode"), and a server that
    answers without JetStream for the account (``jetstream_missing``), which NATS answering will
    not mend and the person must read."""
    if isinstance(exc, APIError):
        return isinstance(exc, ServiceUnavailableError) and not jetstream_missing(exc)
    return isinstance(exc, (NatsError, asyncio.TimeoutError, NatsUnavailable))


def mirrored_streams(settings: Settings) -> list[str]:
    """The streams the mirror follows: the DLQ stream, then the advisories when captured."""
    return [settings.dlq_stream] + ([settings.advisory_stream] if settings.capture_advisories else [])


def of_source(source: str) -> str:
    return "" if source == DEFAULT_SOURCE else f" of source {source}"
