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
    assert tallest.count == 5 and tallest.y + tallest.height == chart.geometry.bottom and tallest.y == chart.geometry.top
    assert describe_size(chart.bar_size) == "5 minutes" and describe_size(timedelta(days=1)) == "1 day"


def test_no_failures_is_no_bars():
    assert build_chart(chart_bounds(T0, T0), [0] * MIN_BARS).bars == []


def test_a_log_scale_keeps_one_failure_visible_beside_a_burst():
    bounds = chart_bounds(T0, T0 + timedelta(hours=3))
    totals = [0] * (len(bounds) - 1)
    totals[0], totals[5], totals[9] = 10_000, 1, 3
    chart = build_chart(bounds, totals)
    heights = {b.count: b.height for b in chart.bars if b.count}
    plot = chart.geometry.bottom - chart.geometry.top
    # Linear, 1 of 10,000 would be 0.01 units tall; on the log scale it is 1/13 of the plot.
    assert heights[10_000] == plot and heights[1] > plot / 14 and heights[1] < heights[3] < heights[10_000]
    # The count axis: 0 at the bottom, powers of ten up to the peak, each where its count would reach.
    labels = [t.label for t in chart.y_ticks]
    assert labels[0] == "0" and labels[-1] == "10,000" and "100" in labels and "1,000" in labels
    assert chart.y_ticks[0].at == chart.geometry.bottom and chart.y_ticks[-1].at == chart.geometry.top
    # The time axis: a few labelled edges from the first one, in UTC hours and minutes.
    assert [t.label for t in chart.x_ticks][:2] == ["10:00", "10:40"] and 4 <= len(chart.x_ticks) <= 6
    assert chart.x_ticks[0].at == chart.geometry.left and chart.x_ticks[0].anchor == "start"
    week = build_chart(chart_bounds(T0, T0 + timedelta(days=6)), [1] * 48)
    assert week.x_ticks[0].label == "11-29 09:00"
