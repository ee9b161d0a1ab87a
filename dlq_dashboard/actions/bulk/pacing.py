"""Pacing bulk republishes: a job works in windows of items, taken from a token bucket.

DLQ_REPUBLISH_RATE (messages a second, 0 for no limit) sets both the bucket's rate and the
window size, so a rate-limited job publishes small windows often rather than big ones in bursts.
"""

from __future__ import annotations

import threading
import time

# Two windows are in flight at once: well within nats-py's default of 4,000 pending async publishes.
WINDOW = 1000


class TokenBucket:
    """At most ``rate`` tokens a second after an initial burst of ``burst`` (rate 0: no limit)."""

    def __init__(self, rate: float, burst: int):
        self.rate, self.capacity = rate, max(1, burst)
        self.tokens, self.at = float(self.capacity), time.monotonic()

    def take(self, n: int, stop: threading.Event) -> bool:
        """Wait until ``n`` (at most the burst) tokens are there and take them; False if stopped."""
        if self.rate <= 0:
            return True
        n = min(n, self.capacity)
        while True:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
            self.at = now
            if self.tokens >= n:
                self.tokens -= n
                return True
            if stop.wait((n - self.tokens) / self.rate):
                return False


def window_size(rate: int) -> int:
    """Items per window: a tenth of a second's worth when rate-limited, so pacing stays smooth."""
    return WINDOW if rate <= 0 else max(1, min(WINDOW, rate // 10))
