"""GET /metrics: Prometheus text, read from the database and the runtime at scrape time.

A custom collector asks for the numbers when Prometheus scrapes, so every replica reports
what the shared database holds, and nothing has to be updated on the write paths. Labels
carry statuses, the contract's reasons, stream names, job actions and states only: never payloads, errors,
headers or any other text a sender chose.
"""

from __future__ import annotations

import logging
from typing import Iterator

from flask import Blueprint, Response, current_app
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from dlq_consumer.headers import REASONS

from ..actions.bulk.jobs import JOB_ACTIONS
from ..actions.purge import purged_totals
from ..alerts.sender import outbox_summary
from ..db.counts import GROUPS, STATUS_COLUMNS, status_sums
from ..db.engine import snapshot_transaction
from ..db.models import FailureGroup, Job, MirrorState, Republish
from ..ingest.search_index import search_lag
from ..runtime import Runtime
from ..times import utcnow
from . import current_runtime
from .api import committed_positions, stream_heads
from .auth import requires

log = logging.getLogger(__name__)

bp = Blueprint("metrics", __name__)

# The reason label: one of the contract's four, "none" without a Dlq-Reason, else this. Any
# sender chooses its Dlq-Reason, so its own words would be label values it chose: as many as it
# likes (Prometheus keeps a series for each) and readable by anyone who may scrape.
OTHER_REASON = "other"


def _label(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class DashboardCollector(Collector):
    """Entries, mirror progress, republish outcomes and the NATS connection, per scrape."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        # (source, stream) -> (the committed sequence, when a lag past it was first asked here):
        # how long the oldest message has waited at least, when the mirror cannot say (lag_and_wait).
        self.lagging: dict[tuple[str, str], tuple[int, object]] = {}

    def describe(self) -> list[Metric]:
        # Registering must not query the database; names are not needed to avoid clashes.
        return []

    def collect(self) -> Iterator[Metric]:
        """Yield every metric family; a database failure is reported, not raised."""
        yield from self._runtime_metrics()
        probe = self.runtime.database
        families = []
        # While the probe knows the database unreachable, the scrape does not wait on it.
        if probe is None or probe.state.reachable:
            try:
                families = list(self._database_metrics())
            except Exception:
                log.warning("metrics could not read the database", exc_info=True)
        up = GaugeMetricFamily("dlq_database_up", "1 when the last scrape could read the database.")
        up.add_metric([], 1 if families else 0)
        yield up
        yield from families

    def _runtime_metrics(self) -> Iterator[Metric]:
        rt = self.runtime
        # With several sources (SPEC section 12) the per-source figures carry a ``source`` label;
        # with one, every series reads as it did before sources existed.
        several = len(rt.feeds) > 1
        by = ["source"] if several else []
        parts = [(name, rt.bridge if name == rt.main_source else feed.bridge,
                  rt.mirror if name == rt.main_source else feed.mirror) for name, feed in rt.feeds.items()]
        connected = GaugeMetricFamily("dlq_nats_connected", "1 while the NATS connection is up.", labels=by)
        leader = GaugeMetricFamily("dlq_mirror_leader", "1 while this process holds the mirror lease.", labels=by)
        for name, bridge, mirror in parts:
            connected.add_metric([name] if several else [], 1 if bridge is not None and bridge.state.connected else 0)
            leader.add_metric([name] if several else [], 1 if mirror is not None and mirror.leader else 0)
        yield connected
        yield leader
        sender = GaugeMetricFamily("dlq_alert_sender_leader", "1 while this process holds the alerts lease.")
        sender.add_metric([], 1 if rt.alerts is not None and rt.alerts.leader else 0)
        yield sender
        purging = GaugeMetricFamily("dlq_retention_purge_failing", "1 when the last periodic retention purge of this "
                                    "process failed (it is tried again at its next hourly run).")
        purging.add_metric([], 1 if rt.retention is not None and rt.retention.failing else 0)
        yield purging
        if all(mirror is None for _, _, mirror in parts):
            return
        labels = [*by, "stream"]
        ingested = CounterMetricFamily("dlq_mirror_ingested",
                                       "Messages this process has mirrored since it started.", labels=labels)
        missed = CounterMetricFamily("dlq_mirror_missed_messages", "Messages the stream no longer held when the "
                                     "mirror came to them (removed by its limits, a purge or a delete before they "
                                     "were mirrored: lost to the dashboard), since this process started.",
                                     labels=labels)
        lag = GaugeMetricFamily("dlq_mirror_lag_messages", "Messages in the stream not yet mirrored (from the "
                                "process that mirrors; absent while its NATS or the stream does not answer).",
                                labels=labels)
        stuck = GaugeMetricFamily("dlq_mirror_stuck", "1 while writing the stream's messages fails (retried "
                                  "until it succeeds), the mirror's writer does not answer, or NATS answers but "
                                  "will not serve the stream (JetStream not enabled, a stream it will not make); "
                                  "not while NATS does not answer (from the process that mirrors).", labels=labels)
        behind = GaugeMetricFamily("dlq_mirror_behind_seconds", "How long the oldest message not yet mirrored "
                                   "has waited (0 when caught up; from the process that mirrors; absent while its "
                                   "NATS or the stream does not answer).", labels=labels)
        now = utcnow()
        for source, bridge, mirror in parts:
            if mirror is None:
                continue
            # What the stream holds is known only while its NATS answers: during an outage the lag
            # last seen would read as caught up (0), so the lag and the wait are left out then, as
            # /healthz says null (dlq_nats_connected says why).
            known = bridge is not None and bridge.state.connected
            # The streams asked now, as /healthz asks them: a mirror whose writer (or process) hangs
            # stops asking, and its own figures stay what they were (a lag of 0, no wait).
            heads = stream_heads(bridge, rt.feeds[source].settings)[1] if known and mirror.leader else None
            positions = self.positions(rt.feeds[source]) if heads else {}
            for name, progress in sorted(mirror.progress.items()):
                values = [source, name] if several else [name]
                ingested.add_metric(values, progress.ingested)
                missed.add_metric(values, progress.missed)
                # Only the lease holder follows the streams; another replica's figures are stale.
                if mirror.leader:
                    stuck.add_metric(values, 1 if progress.error is not None else 0)
                    # A stream the mirror could not read (one JetStream will not make) that does
                    # not answer now either: its lag is unknown, left out as during an outage.
                    if known and (progress.head_known or (heads or {}).get(name) is not None):
                        waiting, since = self.lag_and_wait(source, progress, (heads or {}).get(name),
                                                           positions.get(name) or 0, now)
                        lag.add_metric(values, waiting)
                        behind.add_metric(values, max((now - since).total_seconds(), 0) if since else 0)
        yield ingested
        yield missed
        yield lag
        yield stuck
        yield behind

    def positions(self, feed) -> dict[str, int]:
        """The sequences the database holds committed (what a silent mirror process's last report
        may not have told yet), unless the database cannot say now."""
        probe = self.runtime.database
        if probe is not None and not probe.state.reachable:
            return {}
        try:
            return committed_positions(self.runtime, feed)
        except SQLAlchemyError:
            return {}

    def lag_and_wait(self, source: str, progress, head: int | None, position: int, now):
        """The messages not mirrored and since when the oldest has waited: the mirror's own, or, when
        the stream (asked now, as /healthz asks it) holds more than the mirror has seen, the lag
        from the stream's head to what is committed, and a wait from when a scrape first found it
        (at least that long)."""
        lag, since = progress.lag, progress.behind_since()
        committed = max(progress.last_seq, position)
        if head is not None and head - committed > lag:
            lag = head - committed
            seen = self.lagging.get((source, progress.stream))
            if seen is None or seen[0] != committed:
                seen = self.lagging[(source, progress.stream)] = (committed, now)
            since = min(since, seen[1]) if since else seen[1]
        return lag, since

    def _database_metrics(self) -> Iterator[Metric]:
        several = len(self.runtime.feeds) > 1
        by = ["source"] if several else []

        def per_source(model, *columns):
            # The model's source after ``columns``, with several sources only.
            return [*columns, *([model.source] if several else [])]

        # One snapshot: the entries received are those held plus those purged, read in two
        # statements; on PostgreSQL a purge committing between them counted its entries twice,
        # and the counter went down at the next scrape (DLQFailuresSpiking fired on it).
        with snapshot_transaction(self.runtime.engine) as conn:
            # From the counts kept beside the entries (a row a failure group, db/counts.py), as
            # /groups counts them: a scrape reads no entry at a million of them. A group is of
            # one reason ('' where its entries have none).
            by_status_reason, statuses = [], len(STATUS_COLUMNS)
            for row in conn.execute(select(*status_sums(), *per_source(GROUPS.c, GROUPS.c.reason))
                                    .group_by(*per_source(GROUPS.c, GROUPS.c.reason))).all():
                by_status, (reason, *source) = row[:statuses], row[statuses:]
                by_status_reason += [(status, reason or None, *source, int(n))
                                     for status, n in zip(STATUS_COLUMNS, by_status) if n]
            positions = conn.execute(select(*per_source(MirrorState, MirrorState.stream), MirrorState.last_seq)).all()
            republishes = conn.execute(
                select(*per_source(Republish, Republish.state, Republish.duplicate), func.count())
                .group_by(*per_source(Republish, Republish.state, Republish.duplicate))).all()
            purged = purged_totals(conn)
            groups = conn.execute(select(*per_source(FailureGroup, FailureGroup.reason), func.count())
                                  .where(FailureGroup.open_count > 0)
                                  .group_by(*per_source(FailureGroup, FailureGroup.reason))).all()
            # Jobs are counted with their items' results in the same pass over the jobs (a row a job).
            jobs = conn.execute(select(Job.action, Job.state, func.count(), func.sum(Job.done), func.sum(Job.failed))
                                .group_by(Job.action, Job.state)).all()
            size = database_size(conn)

        entries = GaugeMetricFamily("dlq_entries", "Entries by status and reason.", labels=["status", "reason", *by])
        for key, count in sorted(_cap_reasons(by_status_reason).items()):
            entries.add_metric(list(key), count)
        yield entries

        # Every entry stored so far: those the database holds and those purges removed. Kept in
        # the database like the purge totals, so it only grows and every replica reports the same.
        received = CounterMetricFamily("dlq_entries_received", "Entries stored since the database was made "
                                       "(held now plus purged): its rate is the arrival rate.")
        received.add_metric([], sum(row[-1] for row in by_status_reason) + sum(purged.values()))
        yield received

        # Per group would be a series for every group ever seen; the reason label is bounded.
        open_groups = GaugeMetricFamily("dlq_groups_open", "Failure groups with open entries, by reason.",
                                        labels=["reason", *by])
        for key, count in sorted(_cap_groups(groups).items()):
            open_groups.add_metric(list(key), count)
        yield open_groups

        job_family = GaugeMetricFamily("dlq_jobs", "Bulk jobs by action and state.", labels=["action", "state"])
        # A job whose every item failed still ends "done": its items' results tell the failures.
        items = GaugeMetricFamily("dlq_job_items", "Items of bulk jobs by action and result (done; failed: "
                                  "failed or skipped).", labels=["action", "result"])
        # Every action's results from 0, before its first job: DLQJobItemsFailing compares the failed
        # count with the one 15 minutes before, so the first failures must rise from a 0 it saw.
        results = {(action, result): 0 for action in JOB_ACTIONS for result in ("done", "failed")}
        for action, state, count, done, failed in sorted(jobs):
            job_family.add_metric([action, state], count)
            for result, n in (("done", done), ("failed", failed)):
                results[(action, result)] = results.get((action, result), 0) + int(n or 0)
        for key, n in sorted(results.items()):
            items.add_metric(list(key), n)
        yield job_family
        yield items

        last_seq = GaugeMetricFamily("dlq_mirror_last_sequence",
                                     "The last stream sequence committed to the database.", labels=[*by, "stream"])
        for row in sorted(positions, key=lambda r: tuple(map(str, r))):
            *key, seq = row
            # The query's columns are (stream, source): the label order is (source, stream).
            last_seq.add_metric(key[::-1], seq)
        yield last_seq

        outcomes = GaugeMetricFamily("dlq_republishes",
                                     "Republishes by state, and whether the broker found them duplicates.",
                                     labels=["state", "duplicate", *by])
        # The failed count from 0, before the first failure, for the same reason as the jobs' items
        # (DLQRepublishesFailing); a failed republish has no duplicate answer.
        counted = {("failed", "none", *([name] if several else [])): 0 for name in self.runtime.feeds}
        for *key, count in republishes:
            counted[tuple(_label(v) for v in key)] = count
        for key, count in sorted(counted.items()):
            outcomes.add_metric(list(key), count)
        yield outcomes

        # Kept in the database, so every replica reports the same total.
        purged_family = CounterMetricFamily("dlq_entries_purged", "Resolved entries removed by retention purges, "
                                            "by the status they had.", labels=["status"])
        for status, count in sorted(purged.items()):
            purged_family.add_metric([status], count)
        yield purged_family

        search = GaugeMetricFamily("dlq_search_lag_entries", "Entries the search index does not cover yet "
                                   "(the search pass runs behind the mirror), counted up to 10,000.")
        search.add_metric([], search_lag(self.runtime.engine).pending)
        yield search

        size_family = GaugeMetricFamily("dlq_database_size_bytes", "The size of the database (SQLite: its pages; "
                                        "PostgreSQL: pg_database_size).")
        size_family.add_metric([], size)
        yield size_family
        yield from _alert_metrics(self.runtime)


def _alert_metrics(runtime: Runtime) -> Iterator[Metric]:
    outbox = outbox_summary(runtime.engine)
    alerts = GaugeMetricFamily("dlq_alerts", "Alert deliveries (one a webhook URL) by event and state.",
                               labels=["event", "state"])
    for state, by_event in (("pending", outbox.pending), ("sent", outbox.sent)):
        for event, count in sorted(by_event.items()):
            alerts.add_metric([event, state], count)
    yield alerts
    failed = CounterMetricFamily("dlq_alert_failed_attempts",
                                 "Alert deliveries a webhook refused or did not answer (each is retried).")
    failed.add_metric([], outbox.failed_attempts)
    yield failed
    oldest = GaugeMetricFamily("dlq_alert_oldest_pending_seconds",
                               "Age of the oldest alert not yet delivered (0 when none waits).")
    oldest.add_metric([], max((utcnow() - outbox.oldest_pending).total_seconds(), 0)
                      if outbox.oldest_pending else 0)
    yield oldest

def database_size(conn) -> int:
    """The database's size in bytes: SQLite's pages in use and free (the file, without its WAL),
    PostgreSQL's pg_database_size."""
    if conn.dialect.name == "sqlite":
        return conn.exec_driver_sql("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()"
                                    ).scalar()
    return conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar()


def reason_label(reason: str | None) -> str:
    """The ``reason`` label of an entry's Dlq-Reason: a contract reason, "none" or "other"."""
    if reason is None:
        return "none"
    return reason if reason in REASONS else OTHER_REASON


def _cap_groups(rows) -> dict[tuple[str, ...], int]:
    """(reason label[, source]) -> groups; a group's reason is '' where its entries had none."""
    result: dict[tuple[str, ...], int] = {}
    for reason, *source, count in rows:
        key = (reason_label(reason or None), *source)
        result[key] = result.get(key, 0) + count
    return result


def _cap_reasons(rows) -> dict[tuple[str, ...], int]:
    """(status, reason label[, source]) -> count; every reason outside the contract is counted as "other"."""
    result: dict[tuple[str, ...], int] = {}
    for status, reason, *source, count in rows:
        key = (status, reason_label(reason), *source)
        result[key] = result.get(key, 0) + count
    return result


def metrics_registry(runtime: Runtime) -> CollectorRegistry:
    """A registry of its own per app (tests run several apps in one process)."""
    registry = CollectorRegistry()
    registry.register(DashboardCollector(runtime))
    ProcessCollector(registry=registry)
    return registry


@bp.route("/metrics")
@requires(None, from_memory=True)
def metrics():
    """Prometheus text exposition; no login, no message data."""
    registry = current_app.extensions.get("dlq_metrics")
    if registry is None:
        registry = current_app.extensions["dlq_metrics"] = metrics_registry(current_runtime())
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
