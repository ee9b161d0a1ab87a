"""The list page's chart of failures over time: bar edges, then the counts of each bar drawn as
SVG by the template (server-side; no script)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

# Bar widths to choose from: the smallest that keeps the chart within MAX_BARS bars.
_SIZES = [timedelta(minutes=m) for m in (1, 5, 15, 30, 60, 180, 360, 720, 1440, 10080)]
MAX_BARS = 60
MIN_BARS = 30
WIDTH, HEIGHT = 720, 120


@dataclass
class Bar:
    """One bar: a time range, its count, and where it is drawn."""

    start: datetime
    end: datetime
    count: int
    x: float
    y: float
    width: float
    height: float


@dataclass
class Chart:
    """Bars over a time range, with the largest count for the axis label."""

    bars: list[Bar]
    start: datetime | None
    end: datetime | None
    peak: int
    bar_size: timedelta | None
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def total(self) -> int:
        return sum(b.count for b in self.bars)


def _floor(at: datetime, size: timedelta) -> datetime:
    epoch = datetime(1970, 1, 1)
    return epoch + ((at - epoch) // size) * size


def chart_bounds(first: datetime | None, last: datetime | None, *, max_bars: int = MAX_BARS) -> list[datetime]:
    """Bar edges covering first..last with the smallest bar width that needs ``max_bars`` or fewer."""
    if first is None or last is None:
        return []
    size = next((s for s in _SIZES if (last - first) / s < max_bars), _SIZES[-1])
    count = int((last - _floor(first, size)) / size) + 1
    # A short history is drawn with the quiet time before it, not as one bar filling the chart.
    count = max(count, MIN_BARS)
    start = _floor(last, size) - (count - 1) * size
    return [start + i * size for i in range(count + 1)]


def build_chart(bounds: list[datetime], totals: list[int]) -> Chart:
    """Bars for the counts between consecutive ``bounds``, scaled to the tallest."""
    if not bounds or not any(totals):
        return Chart([], None, None, 0, None)
    peak = max(totals)
    slot = WIDTH / len(totals)
    gap = 1 if slot > 3 else 0
    bars = []
    for i, n in enumerate(totals):
        height = 0 if not n else max(2.0, (HEIGHT - 4) * n / peak)
        bars.append(Bar(bounds[i], bounds[i + 1], n, round(i * slot, 2), round(HEIGHT - height, 2),
                        round(max(slot - gap, 1), 2), round(height, 2)))
    return Chart(bars, bounds[0], bounds[-1], peak, bounds[1] - bounds[0])


def describe_size(size: timedelta | None) -> str:
    """'5 minutes', '1 hour', '1 day' for the chart's caption (and the retention's)."""
    if size is None:
        return ""
    if size.total_seconds() % 60:
        seconds = int(size.total_seconds())
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = int(size.total_seconds() // 60)
    for unit, length in (("week", 10080), ("day", 1440), ("hour", 60), ("minute", 1)):
        if minutes % length == 0:
            n = minutes // length
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{minutes} minutes"


# --- a group's trend -----------------------------------------------------------------------------

SPARK_BAR, SPARK_HEIGHT = 4, 20


@dataclass(frozen=True)
class Sparkline:
    """A small bar per hour (the current hour last), drawn as one SVG path by the groups page."""

    counts: tuple[int, ...]
    path: str
    total: int
    peak: int
    width: int
    height: int = SPARK_HEIGHT

    @property
    def description(self) -> str:
        """The text alternative: what the bars say, for those who do not see them."""
        hours = len(self.counts)
        if not self.total:
            return f"none in the last {hours} h"
        return f"{self.total:,} in the last {hours} h, peak {self.peak:,}/h"


def build_sparkline(counts: list[int]) -> Sparkline:
    """Bars for hourly ``counts``, scaled to the busiest hour, as one SVG path of vertical strokes
    (a page shows up to 200 of them: one short attribute each, no element per bar; the stroke
    width is in app.css); an hour with any arrival gets a visible bar, however small next to
    the peak."""
    peak = max(counts, default=0)
    scale = (SPARK_HEIGHT - 1) / peak if peak else 0
    path = "".join(f"M{i * SPARK_BAR + 1.5} {SPARK_HEIGHT}v-{max(2, round(n * scale))}"
                   for i, n in enumerate(counts) if n)
    return Sparkline(tuple(counts), path, sum(counts), peak, SPARK_BAR * len(counts))
