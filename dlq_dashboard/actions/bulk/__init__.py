"""Bulk jobs: republish or close many entries, paced, cancellable, resumed after a crash.

jobs.py selects the entries and creates, cancels and reports on jobs; runner.py runs a thread
per job (and the recovery of pending republishes); work.py is one job's loop; pacing.py its
rate limit.
"""
