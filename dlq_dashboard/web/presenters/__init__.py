"""Presenters: plain functions that lay data out for the templates (the chart's bars, a
payload marked where its schema fails, an entry's timeline). No database, no request."""
