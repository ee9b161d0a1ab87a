"""Pacing bulk republishes: a job works in windows of items, taken from a token bucket.

DLQ_REPUBLISH_RATE (messages a second, 0 for no limit) sets both the bucket's rate and the
window size, so a rate-limited job publishes small windows often rather than big ones in bursts.
With several sources each source has a bucket of its own (lanes.py): the rate applies to each.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

# Two windows are in flight at once: well within nats-py's default of 4,000 pending async publishes.
WINDOW = 1000


class TokenBucket:
    """At most ``rate`` tokens a second after an initial burst of ``burst`` (rate 0: no limit).
    ``name``: the source it paces (None: the one of a job with one source); ``taken``: the
    tokens it has given; ``clock``: the time in seconds (time.monotonic)."""

    def __init__(self, rate: float, burst: int, *, name: str | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.rate, self.capacity, self.name, self.clock = rate, max(1, burst), name, clock
        self.tokens, self.at = float(self.capacity), clock()
        self.taken = 0

    def try_take(self, n: int) -> float:
        """Take ``n`` (at most the burst) tokens if they are there and return 0; else take none and
        return the seconds until they are."""
        if self.rate <= 0:
            self.taken += n
            return 0.0
        wanted, n = n, min(n, self.capacity)
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= n:
            self.tokens -= n
            self.taken += wanted
            return 0.0
        return (n - self.tokens) / self.rate

    def take(self, n: int, stop: threading.Event) -> bool:
        """Wait until ``n`` (at most the burst) tokens are there and take them; False if stopped."""
        while True:
            wait = self.try_take(n)
            if not wait:
                return True
            if stop.wait(wait):
                return False


def window_size(rate: int) -> int:
    """Items per window: a tenth of a second's worth when rate-limited, so pacing stays smooth."""
    return WINDOW if rate <= 0 else max(1, min(WINDOW, rate // 10))
