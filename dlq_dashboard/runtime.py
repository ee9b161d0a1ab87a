"""What runs beside the web app: the database, the NATS bridge, the mirror, the bundled server."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from .bridge import Bridge
from .config import Settings
from .db import create_db_engine, dispose_quietly, migrate
from .mirror import Mirror, ensure_streams
from .natsserver import NatsServer, free_port
from .schemas import SchemaRegistry
from .store import Store

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """The dashboard's long-lived parts, created by create_app and started explicitly."""

    settings: Settings
    engine: Engine
    store: Store
    schemas: SchemaRegistry = field(default_factory=SchemaRegistry)
    bridge: Bridge | None = None
    mirror: Mirror | None = None
    bundled: NatsServer | None = None
    jobs: Any = None  # the JobRunner (dlq_dashboard.jobrunner): bulk jobs and republish recovery

    @classmethod
    def create(cls, settings: Settings) -> "Runtime":
        """Open the database and bring its schema up to date (starts no thread)."""
        engine = create_db_engine(settings.database_url)
        migrate(engine)
        return cls(settings=settings, engine=engine, store=Store(engine),
                   schemas=SchemaRegistry.load(settings.schemas_dir))

    def start(self, *, mirror: bool = True, bundled_port: int = 4222) -> "Runtime":
        """Start the bundled nats-server if no NATS_URL is set, the bridge, and the mirror."""
        servers = list(self.settings.nats_urls)
        if self.settings.bundled_nats:
            self.bundled = NatsServer(store_dir=Path(self.settings.instance_path) / "nats",
                                      port=free_port(bundled_port),
                                      log_path=Path(self.settings.instance_path) / "nats-server.log").start()
            servers = [self.bundled.url]
            print(f"Started the bundled nats-server at {self.bundled.url}", flush=True)
        self.bridge = Bridge(self.settings, servers)
        self.bridge.on_connect(lambda: ensure_streams(self.bridge.js, self.settings))
        self.bridge.start()
        if mirror:
            self.mirror = Mirror(self.bridge, self.engine, self.settings)
            self.mirror.start()
        from .jobrunner import runner_for

        # Finishes republishes a crash left pending and resumes jobs once NATS is connected.
        runner_for(self).start()
        return self

    def stop(self) -> None:
        """Stop the mirror and the bridge, then the bundled server, then close the database."""
        if self.jobs is not None:
            self.jobs.stop()
        if self.bridge is not None:
            self.bridge.stop()
        if self.mirror is not None:
            self.mirror.close()
        if self.bundled is not None:
            self.bundled.stop()
        dispose_quietly(self.engine)
