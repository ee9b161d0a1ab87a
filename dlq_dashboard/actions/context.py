"""What the actions need from the runtime that runs them, as a Protocol: the actions take it as
``rt`` without importing the Runtime that assembles them (runtime.py sits above this layer)."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from sqlalchemy import Engine

from ..config import Settings
from ..entries.schemas import SchemaRegistry
from ..entries.store import Store
from ..nats.bridge import Bridge
from .intents import Flights
from .subject_streams import SubjectStreams


class JobQueue(Protocol):
    """Where a new or cancelled bulk job is handed to the thread that runs it."""

    def submit(self, job_id: int) -> None:
        """Start running a job (no-op if it runs already)."""

    def wake(self, job_id: int) -> None:
        """Interrupt a job's pacing wait, so that it sees a cancel at once."""


class ActionContext(Protocol):
    """The parts of the runtime an action uses (dlq_dashboard.runtime.Runtime has them all)."""

    settings: Settings
    engine: Engine
    store: Store
    schemas: SchemaRegistry
    bridge: Bridge | None
    flights: Flights
    jobs: JobQueue
    subject_streams: SubjectStreams
    # Each source's parts by name (runtime.Feed), in DLQ_CONFIG's order: which sources exist here.
    feeds: Mapping[str, Any]

    @property
    def main_source(self) -> str:
        """The first source's name, whose connection is ``bridge``."""

    def bridge_for(self, source: str | None) -> Bridge | None:
        """The NATS connection of an entry's source (SPEC section 12); None when there is none."""
