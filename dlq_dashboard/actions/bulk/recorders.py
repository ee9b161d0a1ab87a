"""A bulk republish's outcomes recorded beside its loop, on PostgreSQL (work.py): the server's
work for an outcome (a new version of each entry in every one of its indexes) is most of a
window's time, so RECORDERS windows' outcomes are recorded at once, each by a thread in a
transaction and on a connection of its own (docs/PERFORMANCE.md, "Republish")."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

#: How many windows' outcomes are recorded at once.
RECORDERS = 2


class Recorders:
    """The threads recording a job's outcomes, and the outcomes being recorded, oldest first.
    Each outcome is (its lane, how many of its republishes wait for NATS)."""

    def __init__(self, job_id: int):
        self._threads = ThreadPoolExecutor(RECORDERS, thread_name_prefix=f"job-{job_id}-outcomes")
        self._running: deque[Future] = deque()

    @property
    def busy(self) -> bool:
        """Whether an outcome is being recorded (or recorded and not taken yet)."""
        return bool(self._running)

    @property
    def full(self) -> bool:
        """Whether as many outcomes are being recorded as there are threads."""
        return len(self._running) >= RECORDERS

    def submit(self, record: Callable[..., tuple[Any, int]], *args) -> None:
        self._running.append(self._threads.submit(record, *args))

    def recorded(self, block: bool = False, every: bool = False) -> tuple[Any, int]:
        """Take the outcomes recorded by now, oldest first, up to the first still being recorded
        (``block``: the oldest is awaited; ``every``: each is, until none is left); their errors
        are raised here. Returns the first lane whose republishes wait for NATS and how many of
        them do, or (None, 0)."""
        found: tuple[Any, int] = (None, 0)
        while self._running and (block or every or self._running[0].done()):
            block = False
            recorded = self._running.popleft().result()
            found = found if found[1] else recorded
        return found

    def wait(self) -> tuple[Any, int]:
        """Wait for every outcome being recorded (the first error is raised here)."""
        return self.recorded(every=True)

    def shutdown(self) -> None:
        """End the threads once what they record is recorded."""
        self._threads.shutdown(wait=True)
