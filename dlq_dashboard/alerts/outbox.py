"""Raising alerts inside the mirror's write transaction: a failure group seen for the first time
(``group.new``) or one whose new entries within 5 minutes reach DLQ_ALERT_THRESHOLD
(``group.spike``) becomes one row a target in ``alerts``, its body as it will be sent. The
targets of a group's alert (:func:`targets_for`) are every DLQ_WEBHOOK_URL and, for a group with
a team (DLQ_TEAMS), the team's webhooks and e-mail addresses (``mailto:<address>``), each once.

Written with the entries, so an alert is never lost (a crash before the commit loses the entries
too, and the mirror writes them again) and never made twice (a batch commits once).

The spike rule: a write raises ``group.spike`` for a group when it takes that group's new entries
of the last 5 minutes (this minute and the four before, from the per-minute arrivals) from below
the threshold to the threshold or more, and the group had no spike alert in the 5 minutes before.
A flood that goes on therefore alerts once; one that dies down below the threshold and comes
back alerts again, at most once every 5 minutes.

The body names the group's ``source`` (SPEC section 12); with DLQ_CONFIG's sources its text does too.

A failure reported by an advisory before its DLQ copy arrives is an entry of the advisory's group
first (its reason "terminated" or "max_deliveries"); the copy moves it to the group of its own
error (ingest/writes.py). So the alerts an advisory's write raises wait ADVISORY_HOLD before they
are sent, and a move that leaves a group empty withdraws its alerts not sent yet
(:func:`withdraw_emptied`): a cause announces itself once, from the group it stays in. A move
that takes a group back below the threshold withdraws its spike not sent yet
(:func:`withdraw_passed_spikes`): failures that only passed through it made no spike there.

Triage (db/triage.py): a write that makes a resolved group ``regressed`` raises ``group.regressed``,
one that opens an ignored group again ``group.reopened`` (so does the periodic pass,
``raise_state_alerts``); a group still ignored raises nothing, not even a spike.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from functools import lru_cache
from datetime import datetime, timedelta
from typing import Iterable, NamedTuple

from sqlalchemy import Connection, delete, func, select

from ..actors import ALERTS as ALERTS_ACTOR  # who a group's activity names for an alert sent
from ..config import Settings
from ..db.counts import ALL_GROUPS, bucket
from ..db.models import Alert, Arrival, Entry, FailureGroup
from ..db.rows import insert_rows
from ..db.triage import Transitions, record_activity
from ..masking import Mask
from ..surrogates import loads_shown
from ..teams import Team, team_named
from ..times import format_time

ALERTS, ARRIVALS, ENTRIES, GROUPS = Alert.__table__, Arrival.__table__, Entry.__table__, FailureGroup.__table__
WINDOW = timedelta(minutes=5)
#: How long the alerts of an advisory's write wait before they are sent: its DLQ copy, written by
#: the consumer before it terminated the message, usually reaches the mirror within seconds.
ADVISORY_HOLD = timedelta(seconds=60)
NEW, SPIKE, REGRESSED, REOPENED = "group.new", "group.spike", "group.regressed", "group.reopened"
# Group keys are normalised error texts of up to 300 characters; a chat line shows the start.
_TEXT_KEY = 160
# The namespace of group.new ids (uuid5 over the group): one id a group, whoever writes it.
_NAMESPACE = uuid.UUID("5b0c1f2e-7c1d-4a8e-9a43-0d1c6f1e2a77")


@dataclass(frozen=True)
class AlertRule:
    """What the writer needs to raise alerts: where they go, the spike threshold, and the
    dashboard's public address for the links (sent to the writer process, so plain values)."""

    urls: tuple[str, ...]
    threshold: int = 100
    public_url: str | None = None
    # DLQ_MASK: a chat channel is read as a viewer reads, so a masked value quoted by a group's
    # error is hidden in its alerts too.
    mask: tuple[str, ...] = ()
    # DLQ_TEAMS: a group's team also receives its alerts, at the team's webhooks and e-mails.
    teams: tuple[Team, ...] = ()
    # DLQ_CONFIG names the sources (SPEC section 12): an alert's text says whose group it is.
    name_sources: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> AlertRule | None:
        """The rule the settings give; None when neither DLQ_WEBHOOK_URL nor a team names a
        webhook or an e-mail (nothing is raised)."""
        if not settings.webhook_urls and not any(t.webhooks or t.emails for t in settings.teams):
            return None
        return cls(urls=settings.webhook_urls, threshold=settings.alert_threshold, public_url=settings.public_url,
                   mask=tuple(settings.mask), teams=tuple(settings.teams), name_sources=bool(settings.sources))

    def group_url(self, group_id: int) -> str:
        """Where the dashboard opens the group (SPEC sections 9 and 11): its page, with its
        state, triage actions and activity, and links to its entries."""
        return f"{self.public_url or ''}/groups/{group_id}"


def raise_alerts(conn: Connection, rule: AlertRule, made: Iterable[int], arrived: dict[int, int],
                 now: datetime, transitions: Transitions | None = None, hold: timedelta = timedelta(0)) -> int:
    """Write the alerts of a write, in its transaction: ``made`` are the groups it made,
    ``arrived`` the new entries it gave each group, ``transitions`` what it did to their states
    (db/triage.py apply_arrivals); each is sent ``hold`` after ``now`` at the soonest. Returns how
    many rows were written."""
    moved = transitions or Transitions()
    silent = moved.silenced
    made = set(made) - silent
    spikes = _spikes(conn, rule, {g: n for g, n in arrived.items() if g not in silent}, now)
    events: dict[int, list[tuple[str, str, int | None]]] = {}
    for group_id in sorted(made | set(spikes) | moved.regressed | moved.reopened):
        if group_id in made:
            events.setdefault(group_id, []).append((NEW, "", None))
        if group_id in moved.regressed:
            events.setdefault(group_id, []).append((REGRESSED, str(uuid.uuid4()), None))
        if group_id in moved.reopened:
            events.setdefault(group_id, []).append((REOPENED, str(uuid.uuid4()), None))
        if group_id in spikes:
            events.setdefault(group_id, []).append((SPIKE, str(uuid.uuid4()), spikes[group_id]))
    return _write(conn, rule, events, now, now + hold)


def withdraw_emptied(conn: Connection, group_ids: Iterable[int]) -> int:
    """Delete the unsent alerts of those of ``group_ids`` that hold no entry any more (their
    entries moved to another group: a DLQ copy joined its advisory's entry); how many."""
    emptied = select(GROUPS.c.id).where(GROUPS.c.id.in_(sorted(set(group_ids))), GROUPS.c.open_count == 0,
                                        GROUPS.c.republished_count == 0, GROUPS.c.closed_count == 0)
    return conn.execute(delete(ALERTS).where(ALERTS.c.group_id.in_(emptied), ALERTS.c.sent_at.is_(None))).rowcount


def withdraw_passed_spikes(conn: Connection, left: dict[int, list[datetime]]) -> int:
    """Delete the unsent ``group.spike`` of each group of ``left`` (failures moved out of it, with
    when each arrived: db/triage.py undo_passing's) that no longer reaches its threshold once they
    are taken back: the failures within its 5 minutes counted again from the arrivals, which the
    move has already left. A spike they were not part of (none arrived in its minutes) stays, and
    so does one the failures still counted there reach. Returns how many rows went."""
    if not left:
        return 0
    held = conn.execute(select(ALERTS.c.id, ALERTS.c.group_id, ALERTS.c.created_at, ALERTS.c.body).where(
        ALERTS.c.group_id.in_(sorted(left)), ALERTS.c.event == SPIKE, ALERTS.c.sent_at.is_(None))).all()
    gone = []
    for alert in held:
        since = bucket(alert.created_at, 60) - (WINDOW - timedelta(minutes=1))
        if not any(since <= bucket(at, 60) for at in left[alert.group_id]):
            continue
        try:
            threshold = int(json.loads(alert.body)["spike"]["threshold"])
        except (ValueError, KeyError, TypeError):
            continue
        recent = conn.execute(select(func.coalesce(func.sum(ARRIVALS.c.count), 0)).where(
            ARRIVALS.c.width == 60, ARRIVALS.c.bucket >= since, ARRIVALS.c.group_id == alert.group_id)).scalar()
        if int(recent or 0) < threshold:
            gone.append(alert.id)
    if not gone:
        return 0
    return conn.execute(delete(ALERTS).where(ALERTS.c.id.in_(gone))).rowcount


def raise_state_alerts(conn: Connection, rule: AlertRule, reopened: Iterable[int], now: datetime) -> int:
    """Write a ``group.reopened`` for each of ``reopened`` (the periodic pass that ends the ignored
    groups whose time has come: db/triage.py reopen_due), in its transaction."""
    return _write(conn, rule, {g: [(REOPENED, str(uuid.uuid4()), None)] for g in sorted(set(reopened))}, now)


def _write(conn: Connection, rule: AlertRule, events: dict[int, list[tuple[str, str, int | None]]],
           now: datetime, due: datetime | None = None) -> int:
    """One outbox row a URL for each (event, id, recent) of each group; a group.new's id is its own."""
    if not events:
        return 0
    groups = {row.id: row for row in conn.execute(select(GROUPS).where(GROUPS.c.id.in_(sorted(events))))}
    shown = _shown_keys(conn, rule, groups)
    rows = []
    for group_id, raised in events.items():
        group = groups.get(group_id)
        if group is None or not group.open_count + group.republished_count + group.closed_count:
            # A group the write named but left empty (a DLQ copy joined its advisory's entry
            # in another group): nothing failed there to announce.
            continue
        for event, event_id, recent in raised:
            if event == NEW:
                event_id = str(uuid.uuid5(_NAMESPACE, f"{NEW}:{group_id}:{group.subject}\0{group.reason}\0{group.key}"))
            rows += _rows(rule, event, event_id, group, now, recent=recent, key=shown.get(group_id), due=due)
    return insert_rows(conn, ALERTS, rows, skip_duplicates=True)


@lru_cache(maxsize=8)
def _mask_of(items: tuple[str, ...]) -> Mask:
    """DLQ_MASK parsed once for the writer process, not at every write that raises an alert."""
    return Mask.parse(items)


def _shown_keys(conn: Connection, rule: AlertRule, groups: dict) -> dict[int, str]:
    """{group: its key with the values DLQ_MASK hides in its newest entry left out} (only where
    that changes the key)."""
    mask = _mask_of(rule.mask) if rule.mask else None
    if not mask:
        return {}
    shown = {}
    for group_id, group in groups.items():
        values = _newest_values(conn, mask, group_id)
        # As visible.groups shows a group to a viewer (Mask.group_key's rule), from the columns.
        key = mask.mask_text(group.key, values) if values is not None else group.key
        if key != group.key:
            shown[group_id] = key
    return shown


def _newest_values(conn: Connection, mask: Mask, group_id: int) -> tuple[str, ...] | None:
    """What ``mask`` hides in the group's newest entry (None: the group has none)."""
    newest = conn.execute(select(ENTRIES.c.payload, ENTRIES.c.payload_available, ENTRIES.c.headers)
                          .where(ENTRIES.c.group_id == group_id).order_by(ENTRIES.c.id.desc()).limit(1)).first()
    if newest is None:
        return None
    try:
        headers = loads_shown(newest.headers or "{}")
    except ValueError:
        headers = {}
    return mask.values_in(bytes(newest.payload or b""), newest.payload_available, headers)


def masked_body(conn: Connection, items: tuple[str, ...], body: str, group_id: int) -> str:
    """An alert's stored body as it may be sent under DLQ_MASK's ``items`` now: with what they hide
    in the group's newest entry hidden in ``group.key`` and in the key ``text`` quotes, as
    _shown_keys hides it when the alert is raised. A body raised under this mask is returned as it
    is (the same text: sent byte for byte); one raised before DLQ_MASK named a field its key
    quotes is made again with the value hidden (alerts/sender.py stores it, so every later
    attempt sends that). A body no release wrote, or a group with no entry left, is as stored."""
    mask = _mask_of(items) if items else None
    if not mask:
        return body
    try:
        alert = json.loads(body)
    except ValueError:
        return body
    group = alert.get("group") if isinstance(alert, dict) else None
    key = group.get("key") if isinstance(group, dict) else None
    values = _newest_values(conn, mask, group_id) if isinstance(key, str) else None
    shown = mask.mask_text(key, values) if values else key
    if not values or shown == key:
        return body
    alert["group"] = {**group, "key": shown}
    if isinstance(alert.get("text"), str):
        alert["text"] = alert["text"].replace(f'"{_quoted(key)}"', f'"{_quoted(shown)}"')
    return json.dumps(alert, ensure_ascii=False, separators=(",", ":"))


def _spikes(conn: Connection, rule: AlertRule, arrived: dict[int, int], now: datetime) -> dict[int, int]:
    """{group: its new entries within 5 minutes} for the groups this write took over the threshold."""
    touched = sorted(g for g, n in arrived.items() if n > 0 and g != ALL_GROUPS)
    if not touched:
        return {}
    since = bucket(now, 60) - (WINDOW - timedelta(minutes=1))
    recent = dict(conn.execute(
        select(ARRIVALS.c.group_id, func.sum(ARRIVALS.c.count))
        .where(ARRIVALS.c.width == 60, ARRIVALS.c.bucket >= since, ARRIVALS.c.group_id.in_(touched))
        .group_by(ARRIVALS.c.group_id)).all())
    crossed = {g: int(recent.get(g) or 0) for g in touched
               if int(recent.get(g) or 0) >= rule.threshold > int(recent.get(g) or 0) - arrived[g]}
    if not crossed:
        return {}
    alerted = set(conn.execute(
        select(ALERTS.c.group_id).distinct()
        .where(ALERTS.c.group_id.in_(sorted(crossed)), ALERTS.c.event == SPIKE, ALERTS.c.created_at > now - WINDOW)
    ).scalars())
    return {g: n for g, n in crossed.items() if g not in alerted}


MAILTO = "mailto:"


def targets_for(rule: AlertRule, group) -> tuple[str, ...]:
    """Where an alert of ``group`` goes, each once: every DLQ_WEBHOOK_URL, then, when the group
    has a team the file still names, that team's webhooks and its e-mails as ``mailto:<address>``
    (the alerts table's ``url``; alerts/sender.py mails those)."""
    targets = list(rule.urls)
    team = team_named(rule.teams, getattr(group, "team", None))
    if team is not None:
        targets += team.webhooks
        targets += [MAILTO + address for address in team.emails]
    return tuple(dict.fromkeys(targets))


def _rows(rule: AlertRule, event: str, event_id: str, group, now: datetime, recent: int | None = None,
          key: str | None = None, due: datetime | None = None) -> list[dict]:
    body = alert_body(rule, event, event_id, group, recent, key)
    return [{"event_id": event_id, "url": url, "event": event, "group_id": group.id, "body": body,
             "created_at": now, "attempts": 0, "next_attempt_at": due or now, "sent_at": None, "last_error": None}
            for url in targets_for(rule, group)]


def alert_body(rule: AlertRule, event: str, event_id: str, group, recent: int | None = None,
               key: str | None = None) -> str:
    """The JSON POSTed for an alert (SPEC section 9), as text: stored once, sent as stored.
    ``key`` is the group's key as a viewer reads it, when DLQ_MASK hides part of it."""
    count = group.open_count + group.republished_count + group.closed_count
    link = rule.group_url(group.id)
    key = key or group.key
    body = {"event": event, "id": event_id, "text": alert_text(event, group, count, recent, rule, key),
            "group": {"id": group.id, "source": group.source, "subject": group.subject or None, "reason": group.reason or None,
                      "key": key, "count": count, "first_seen": format_time(group.first_seen),
                      "last_seen": format_time(group.last_seen)},
            "url": link}
    state = getattr(group, "state", None)
    if state is not None:
        body["group"].update(state=state, team=getattr(group, "team", None))
        if event == REGRESSED:
            body["group"]["resolved_in"] = group.resolved_in
    if recent is not None:
        body["spike"] = {"count": recent, "minutes": int(WINDOW.total_seconds() // 60), "threshold": rule.threshold}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def alert_text(event: str, group, count: int, recent: int | None, rule: AlertRule, key: str | None = None) -> str:
    """One line a person reads in a chat channel; a link only where the address is known."""
    where = f"{group.subject or '(no subject)'}, {group.reason or '(no reason)'}"
    if rule.name_sources:  # with several sources the same failure may burn in two: say which
        where += f" (source {group.source})"
    key = _cut(key or group.key)
    if event == NEW:
        line = f"New failure group on {where}: \"{key}\" ({count} {_entries(count)} so far)"
    elif event == REGRESSED:
        release = getattr(group, "resolved_in", None)
        line = (f"Failure group regressed on {where}: \"{key}\" failed again after it was resolved"
                f"{f' in {release}' if release else ''} ({count} {_entries(count)} so far)")
    elif event == REOPENED:
        line = f"Ignored failure group open again on {where}: \"{key}\" ({count} {_entries(count)} so far)"
    else:
        line = (f"Failure spike on {where}: {recent} new {_entries(recent)} within 5 minutes "
                f"(threshold {rule.threshold}): \"{key}\"")
    if rule.public_url:
        line += f" {rule.group_url(group.id)}"
    return _escaped(line)


def _cut(key: str) -> str:
    return key if len(key) <= _TEXT_KEY else key[:_TEXT_KEY - 1] + "…"


def _escaped(text: str) -> str:
    # Slack reads <, > and & as markup (Mattermost's Markdown decodes the same entities back).
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _quoted(key: str) -> str:
    """A group's key as alert_text quotes it."""
    return _escaped(_cut(key))


def _entries(n: int | None) -> str:
    return "entry" if n == 1 else "entries"


class Forgotten(NamedTuple):
    """What forget_sent deleted: how many alerts, and their failed attempts."""

    count: int
    failed_attempts: int


def forget_sent(conn: Connection, before: datetime, *, dry_run: bool = False) -> Forgotten:
    """Delete the alerts delivered before ``before`` (history once sent; the retention purge
    calls it with its cutoff); an alert still pending stays however old. A group still stored
    keeps each event forgotten as a row of its activity (:func:`keep_in_activity`). Returns how
    many (with ``dry_run``, how many it would delete) and their failed attempts (every attempt
    but the one answered), which the purge keeps counted."""
    sent_before = (ALERTS.c.sent_at.is_not(None), ALERTS.c.sent_at < before)
    count, attempts = conn.execute(select(func.count(), func.coalesce(func.sum(ALERTS.c.attempts), 0))
                                   .where(*sent_before)).one()
    if not dry_run and count:
        keep_in_activity(conn, sent_before)
        conn.execute(delete(ALERTS).where(*sent_before))
    return Forgotten(count, int(attempts) - count)


def keep_in_activity(conn: Connection, which: tuple) -> int:
    """Write the alerts ``which`` selects into their groups' activity, one row an event (when it
    was first sent, to how many addresses), before the outbox forgets them: a group's activity
    includes the alerts sent about it (SPEC section 11) for as long as the group is kept, however
    long ago they were sent. How many rows were written."""
    first_sent = func.min(ALERTS.c.sent_at)
    events = conn.execute(select(ALERTS.c.group_id, ALERTS.c.event, ALERTS.c.event_id, first_sent, func.count())
                          .where(*which, ALERTS.c.group_id.in_(select(GROUPS.c.id)))
                          .group_by(ALERTS.c.group_id, ALERTS.c.event, ALERTS.c.event_id)
                          .order_by(first_sent, ALERTS.c.event_id)).all()
    record_activity(conn, [{"group_id": group_id, "at": at, "actor": ALERTS_ACTOR, "kind": "alert",
                            "detail": {"event": event, "id": event_id, "urls": int(urls)}}
                           for group_id, event, event_id, at, urls in events])
    return len(events)
