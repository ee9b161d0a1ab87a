"""The list page's chart of failures over time: bar edges, then the counts of each bar drawn as
SVG by the template (server-side; no script), with labelled axes.

Counts are drawn on a log scale (the height of ``n`` is proportional to log(1 + n)), so an
hour with 3 failures stays visible beside a burst of 10,000; the axis says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

# Bar widths to choose from: the smallest that keeps the chart within MAX_BARS bars.
_SIZES = [timedelta(minutes=m) for m in (1, 5, 15, 30, 60, 180, 360, 720, 1440, 10080)]
MAX_BARS = 60
MIN_BARS = 30


@dataclass(frozen=True)
class Geometry:
    """An SVG's size in its own units and the plot area inside it: room on the left for the
    counts, below for the times; about ``x_ticks`` labelled times. The page scales the SVG to its
    column, and its text with it, so each width of column gets a drawing of its own."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x_ticks: int


#: A desk's column (the chart is at most 760 px wide: its text at the page's size).
WIDE = Geometry(760, 130, 52, 750, 20, 100, 5)
#: A phone's (app.css shows it in a figure narrower than 520 px): the wide drawing scaled to a
#: phone's 360 px made its labels 6 px high; this one's are 11.
NARROW = Geometry(440, 150, 40, 432, 22, 118, 3)


@dataclass(frozen=True)
class Tick:
    """A labelled mark on an axis: where (x or y) and what it says; ``anchor`` aligns its text."""

    at: float
    label: str
    anchor: str = "middle"


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
    geometry: Geometry = WIDE
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    #: The same bars drawn for a phone's column (the wide chart's only).
    narrow: "Chart | None" = None

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


def _height(n: int, peak: int, g: Geometry) -> float:
    """How tall a count is drawn: log(1 + n) against the peak's, at least 2 units for any count."""
    if not n:
        return 0.0
    return max(2.0, (g.bottom - g.top) * math.log1p(n) / math.log1p(peak))


def _count_ticks(peak: int, g: Geometry) -> list[Tick]:
    """0, then the powers of ten up to the peak, and the peak itself where it has room."""
    values = [0] + [10 ** k for k in range(len(str(peak))) if 10 ** k <= peak]
    ticks: list[Tick] = []
    for v in values + ([peak] if peak not in values else []):
        at = round(g.bottom - _height(v, peak, g), 2)
        if not ticks or ticks[-1].at - at >= 16:  # a label needs about 16 units of height
            ticks.append(Tick(at, f"{v:,}", "end"))
    return ticks


def _time_ticks(bounds: list[datetime], g: Geometry) -> list[Tick]:
    """About ``g.x_ticks`` labelled bar edges: hours and minutes, with the day when the chart
    spans more than one, the day alone for bars of a day or more."""
    bars = len(bounds) - 1
    step = max(1, math.ceil(bars / g.x_ticks))
    size = bounds[1] - bounds[0]
    if size >= timedelta(days=1):
        pattern = "%m-%d"
    elif bounds[-1] - bounds[0] > timedelta(days=1) or bounds[0].date() != bounds[-1].date():
        pattern = "%m-%d %H:%M"
    else:
        pattern = "%H:%M"
    slot = (g.right - g.left) / bars
    ticks = []
    for i in range(0, bars + 1, step):
        anchor = "start" if i == 0 else ("end" if i == bars else "middle")
        ticks.append(Tick(round(g.left + i * slot, 2), bounds[i].strftime(pattern), anchor))
    return ticks


def build_chart(bounds: list[datetime], totals: list[int], geometry: Geometry = WIDE) -> Chart:
    """Bars for the counts between consecutive ``bounds`` on a log scale, with the axes' ticks;
    the wide chart carries the same drawn for a phone (``narrow``)."""
    g = geometry
    narrow = build_chart(bounds, totals, NARROW) if g is WIDE else None
    if not bounds or not any(totals):
        return Chart([], None, None, 0, None, g, narrow=narrow)
    peak = max(totals)
    slot = (g.right - g.left) / len(totals)
    gap = 1 if slot > 3 else 0
    bars = []
    for i, n in enumerate(totals):
        height = _height(n, peak, g)
        bars.append(Bar(bounds[i], bounds[i + 1], n, round(g.left + i * slot, 2), round(g.bottom - height, 2),
                        round(max(slot - gap, 1), 2), round(height, 2)))
    return Chart(bars, bounds[0], bounds[-1], peak, bounds[1] - bounds[0], g,
                 x_ticks=_time_ticks(bounds, g), y_ticks=_count_ticks(peak, g), narrow=narrow)


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
    unit: str = "h"  # what one bar counts: an hour ("h") or a minute ("min")

    @property
    def description(self) -> str:
        """The text alternative: what the bars say, for those who do not see them."""
        bars = len(self.counts)
        if not self.total:
            return f"none in the last {bars} {self.unit}"
        return f"{self.total:,} in the last {bars} {self.unit}, peak {self.peak:,}/{self.unit}"


def build_sparkline(counts: list[int], unit: str = "h") -> Sparkline:
    """Bars for hourly ``counts``, scaled to the busiest hour, as one SVG path of vertical strokes
    (a page shows up to 200 of them: one short attribute each, no element per bar; the stroke
    width is in app.css); an hour with any arrival gets a visible bar, however small next to
    the peak."""
    peak = max(counts, default=0)
    scale = (SPARK_HEIGHT - 1) / peak if peak else 0
    path = "".join(f"M{i * SPARK_BAR + 1.5} {SPARK_HEIGHT}v-{max(2, round(n * scale))}"
                   for i, n in enumerate(counts) if n)
    return Sparkline(tuple(counts), path, sum(counts), peak, SPARK_BAR * len(counts), unit=unit)
