"""The chart of failures over time: bar widths, padding, totals and drawing."""

from __future__ import annotations

from datetime import datetime, timedelta

from dlq_dashboard.web.presenters.charts import MAX_BARS, MIN_BARS, build_chart, chart_bounds, describe_size

T0 = datetime(2026, 11, 29, 10, 0)


def test_the_bar_width_is_the_smallest_that_fits_the_range():
    bounds = chart_bounds(T0, T0 + timedelta(hours=3))
    assert bounds[1] - bounds[0] == timedelta(minutes=5) and len(bounds) - 1 <= MAX_BARS
    week = chart_bounds(T0, T0 + timedelta(days=7))
    assert week[1] - week[0] == timedelta(hours=3)


def test_a_short_history_is_drawn_with_the_quiet_time_before_it():
    bounds = chart_bounds(T0, T0 + timedelta(minutes=2))
    assert len(bounds) - 1 == MIN_BARS and bounds[-1] > T0 + timedelta(minutes=2) >= bounds[-2]
    assert chart_bounds(None, None) == []


def test_bars_are_scaled_to_the_tallest():
    bounds = chart_bounds(T0, T0 + timedelta(hours=3))
    totals = [0] * (len(bounds) - 1)
    totals[bounds.index(T0)], totals[-1] = 5, 1
    chart = build_chart(bounds, totals)
    assert chart.peak == 5 and chart.total == 6
    tallest = max(chart.bars, key=lambda b: b.height)
    assert tallest.count == 5 and tallest.y + tallest.height == chart.height
    assert describe_size(chart.bar_size) == "5 minutes" and describe_size(timedelta(days=1)) == "1 day"


def test_no_failures_is_no_bars():
    assert build_chart(chart_bounds(T0, T0), [0] * MIN_BARS).bars == []
