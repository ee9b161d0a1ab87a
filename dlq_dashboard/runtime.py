"""What runs beside the web app: the database, the NATS bridge, the mirror, the job runner and
the bundled server, with the state they share. One Runtime per app; create_app makes it and
``python app.py`` starts it. Lower layers receive it as an argument (``rt``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from .actions.bulk.runner import JobRunner
from .actions.intents import Flights
from .actions.purge import RetentionSchedule
from .actions.subject_streams import SubjectStreams
from .actions.triage import ReopenSchedule
from .alerts.outbox import AlertRule
from .alerts.sender import AlertSender
from .config import Settings
from .db.engine import create_db_engine, dispose_quietly
from .db.liveness import DatabaseProbe
from .db.migrate import migrate
from .db.mirror_reports import StreamReport, read_reports
from .masking import Mask
from .entries.schemas import SchemaRegistry
from .entries.fields import check_database
from .entries.store import Store
from .files import private_folder, write_private
from .ingest.key_fields import KeyFieldBackfill
from .ingest.mirror import Mirror, lease_name
from .ingest.process import MirrorProcess, MirrorView
from .ingest.takeover import takeover_plan
from .nats.bridge import Bridge
from .nats.bundled import BundledServer
from .nats.streams import StreamSetup
from .sources import Source, acting_source, source_settings, sources_of

#: Where create_app keeps the runtime: ``app.extensions[EXTENSION]``.
EXTENSION = "dlq"


@dataclass
class Feed:
    """One source's parts (SPEC section 12): its settings (section 3's NATS fields taken from the
    source), its streams, and once started its own NATS connection and mirror. One that cannot
    reach its NATS stops nothing else."""

    source: Source
    settings: Settings
    streams: StreamSetup
    bridge: Bridge | None = None
    # This process's mirror, or the view of the one in the mirror's process (ingest/process.py).
    mirror: Mirror | MirrorView | None = None

    @property
    def name(self) -> str:
        return self.source.name


@dataclass
class Runtime:
    """The dashboard's long-lived parts, created by create_app and started explicitly."""

    settings: Settings
    engine: Engine
    store: Store
    schemas: SchemaRegistry
    streams: StreamSetup
    # What viewers do not see (DLQ_MASK); empty, and so no mask, by default.
    mask: Mask = field(default_factory=Mask)
    # The republishes this runtime is publishing right now (a double-click is refused with 409).
    flights: Flights = field(default_factory=Flights)
    # Which stream stores a subject, remembered a while (the entry page says if a republish can work).
    subject_streams: SubjectStreams = field(default_factory=SubjectStreams)
    bridge: Bridge | None = None
    # Whether the database answers, from memory (a probe thread; None until start()).
    database: DatabaseProbe | None = None
    mirror: Mirror | MirrorView | None = None
    # The child process that mirrors every source (``python app.py``; start(mirror_process=True)).
    mirror_process: MirrorProcess | None = None
    bundled: BundledServer | None = None
    # Sends the alerts outbox (webhooks and e-mails) while this process holds the alerts lease.
    alerts: AlertSender | None = None
    retention: RetentionSchedule | None = None
    # Opens ignored groups again when their time comes, on the replica that mirrors.
    reopening: ReopenSchedule | None = None
    # Records DLQ_LIST_FIELDS and fills the key fields of older entries, on the replica that mirrors.
    key_fields: KeyFieldBackfill | None = None
    jobs: JobRunner = field(init=False)
    # Each source's parts, in DLQ_CONFIG's order; the first is also ``streams``, ``bridge`` and
    # ``mirror`` above (what a page about "the" NATS connection, the CLI and the schedules use).
    feeds: dict[str, Feed] = field(default_factory=dict)
    # The mirror's reports of every source (db/mirror_reports.py), read by the database probe: what
    # a process that does not mirror a source tells of it (the banner, /sources).
    reports: dict[str, tuple[StreamReport, ...]] = field(default_factory=dict)

    def _read_reports(self, conn) -> None:
        self.reports = read_reports(conn, [lease_name(source) for source in self.feeds])

    def __post_init__(self) -> None:
        self.jobs = JobRunner(self)
        if not self.feeds:
            for source in sources_of(self.settings):
                settings = source_settings(self.settings, source)
                self.feeds[source.name] = Feed(source, settings, StreamSetup(settings))
            self.streams = next(iter(self.feeds.values())).streams

    @property
    def main_source(self) -> str:
        """The first source's name (``default`` without DLQ_CONFIG)."""
        return next(iter(self.feeds))

    def bridge_for(self, source: str | None) -> Bridge | None:
        """The NATS connection of ``source`` (None: the main one); None when not started or not a
        source of this dashboard (an entry of a source removed from DLQ_CONFIG)."""
        feed = self.feeds.get(acting_source(self.settings, source or self.main_source))  # an old name: its heir's
        return feed.bridge if feed is not None else None

    @classmethod
    def create(cls, settings: Settings) -> Runtime:
        """Open the database and bring its schema up to date (starts no thread)."""
        if Path(settings.instance_path).is_dir():  # made by an earlier release, readable by all
            private_folder(settings.instance_path)
        engine = create_db_engine(settings.database_url, connect_timeout=settings.database_connect_timeout)
        migrate(engine)
        check_database(engine, settings.list_fields)  # key fields the database could not read
        return cls(settings=settings, engine=engine, store=Store(engine, settings.trace_url),
                   schemas=SchemaRegistry.load(settings.schemas_dir), streams=StreamSetup(settings),
                   mask=Mask.from_settings(settings))

    def start(self, *, mirror: bool = True, mirror_process: bool = False, bundled_port: int = 4222) -> Runtime:
        """Start the bundled nats-server if no NATS_URL is set, the bridge, the mirror, the
        job runner (which first completes republishes a crash left pending) and, with
        DLQ_WEBHOOK_URL or a team's webhooks or e-mails, the alert sender; first the database probe.
        ``mirror_process``: the mirror runs in a child process (ingest/process.py), each source's
        ``mirror`` here its view."""
        self.database = DatabaseProbe(self.settings.database_url, watch=self._read_reports).start()
        servers = list(self.settings.nats_urls)
        if self.settings.bundled_nats:
            instance = private_folder(self.settings.instance_path)
            # Started again when it dies; refuses (StoreInUse) a store another server runs on.
            self.bundled = BundledServer(instance / "nats", port=bundled_port,
                                         log_path=instance / "nats-server.log").start()
            servers = [self.bundled.url]
            print(f"Started the bundled nats-server at {self.bundled.url}", flush=True)
            # For `flask --app app entries republish` and `purge`, which run beside this process.
            write_private(self._bundled_url_file(), self.bundled.url)
        alerts = AlertRule.from_settings(self.settings)  # the dashboard's: it names each group's source
        if mirror and not mirror_process:  # once, before any follower asks (the child does the same)
            takes, kept = takeover_plan(self.engine, [feed.source for feed in self.feeds.values()])
        for feed in self.feeds.values():
            feed.bridge = Bridge(feed.settings, servers if self.settings.bundled_nats else list(feed.settings.nats_urls),
                                 feed.name)
            feed.bridge.on_connect(lambda feed=feed: feed.streams.ensure(feed.bridge.js))
            feed.bridge.start()
            if mirror and not mirror_process:
                feed.mirror = Mirror(feed.bridge, self.engine, feed.settings, feed.streams, feed.name,
                                     sharing=len(self.feeds), alerts=alerts, takes=takes[feed.name], kept=kept)
                feed.mirror.start()
        if mirror and mirror_process:
            self.mirror_process = MirrorProcess(self.settings, servers if self.settings.bundled_nats else None).start()
            for feed in self.feeds.values():
                feed.mirror = self.mirror_process.views[feed.name]
        first = self.feeds[self.main_source]
        self.bridge, self.mirror = first.bridge, first.mirror
        if mirror:
            self.key_fields = KeyFieldBackfill(self.engine, self.settings.list_fields).start()
            # The purge runs where the mirror runs: one replica, beside the writes it could slow.
            self.retention = RetentionSchedule(self, lambda: self.mirror is not None and self.mirror.leader).start()
            self.reopening = ReopenSchedule(self.engine, AlertRule.from_settings(self.settings),
                                            lambda: self.mirror is not None and self.mirror.leader,
                                            interval=self.settings.reopen_interval).start()
        self.jobs.start()
        if AlertRule.from_settings(self.settings) is not None:
            self.alerts = AlertSender(self.engine, self.settings).start()
        return self

    def connect_nats(self) -> bool:
        """Start the bridges alone (the CLI's republish and purge), one a source: to its NATS
        URLs, or to the bundled server of a dashboard running on this instance folder. False if
        the main source's did not connect within the connect timeout (each action asks its own)."""
        bundled = None
        if self.settings.bundled_nats:
            url = self.bundled_nats_url()
            if url is None:
                return False
            bundled = [url]
        for feed in self.feeds.values():
            feed.bridge = Bridge(feed.settings, bundled or list(feed.settings.nats_urls), feed.name).start()
        self.bridge = self.feeds[self.main_source].bridge
        return self.bridge.wait_connected(self.settings.connect_timeout)

    def bundled_nats_url(self) -> str | None:
        """The URL of the bundled nats-server a dashboard running on this instance folder started;
        None when none runs there."""
        path = self._bundled_url_file()
        return path.read_text().strip() if path.exists() else None

    def _bundled_url_file(self) -> Path:
        return Path(self.settings.instance_path) / "nats-server.url"

    def stop(self) -> None:
        """Stop the jobs, the alert sender, the bridge and the mirror, then the bundled server; close the database."""
        self.jobs.stop()
        if self.database is not None:
            self.database.stop()
        if self.alerts is not None:
            self.alerts.stop()
        if self.retention is not None:
            self.retention.stop()
        if self.reopening is not None:
            self.reopening.stop()
        if self.key_fields is not None:
            self.key_fields.stop()
        if self.mirror_process is not None:
            self.mirror_process.stop()
        for feed in self.feeds.values():  # rt.bridge and rt.mirror are the first feed's
            if feed.bridge is not None:
                feed.bridge.stop()
        for feed in self.feeds.values():
            if isinstance(feed.mirror, Mirror):
                feed.mirror.close()
        if self.bundled is not None:
            self._bundled_url_file().unlink(missing_ok=True)
            self.bundled.stop()
        dispose_quietly(self.engine)


def runtime_of(app: Any) -> Runtime:
    """The Runtime create_app attached to a Flask app."""
    return app.extensions[EXTENSION]
