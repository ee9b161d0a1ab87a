"""Revision 0025 regroups a database grouped by version 3 of the rules: a hex id read as a duration
or a size ("6705176d", "1234567b") no longer makes a group apart from the other ids', its counts
move with it, real durations stay apart, and each entry stays in a group of its own source. A
group the move makes takes its team; a group left empty goes unless something was done with it."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, insert, select, text, update

from dlq_dashboard.db import regroup
from dlq_dashboard.db.counts import ARRIVALS, GROUPS, Change, count_changes, group_ids
from dlq_dashboard.db.engine import create_db_engine, write_transaction
from dlq_dashboard.db.migrate import head, migrate
from dlq_dashboard.db.models import Alert, Entry, GroupActivity
from dlq_dashboard.ingest.grouping import error_group

from .test_tallies import kept, truth

# The migrations' own tests: every database_url here starts empty (not the migrated template).
pytestmark = [pytest.mark.both_databases, pytest.mark.fresh_database]

START = datetime(2026, 11, 29, 10)
IGNORED_UNTIL = datetime(2026, 12, 31, 12)
# (error, the key version 3 gave it): the same refusal for four refunds made three groups.
V3_ROWS = [
    ("refund 6705176d rejected", "refund <duration> rejected"),
    ("refund 575142eb rejected", "refund <id> rejected"),
    ("refund 3f2a9c1e rejected", "refund <id> rejected"),
    ("refund 1234567b rejected", "refund <n>b rejected"),
    ("timeout after 30d", "timeout after <duration>"),  # a duration: apart before and after
    ("timeout after 1234567s", "timeout after <duration>"),
    ("disk full", "disk full"),
]


def store_grouped_by_v3(engine, rows: list[tuple[str, str, str]], count: int) -> dict[tuple[str, str], int]:
    """``count`` entries of ``rows`` (source, error, v3 key) in turn, in the groups v3 gave them,
    their counts kept; the id of each (source, v3 key) group."""
    rnd = random.Random(25)
    with write_transaction(engine) as conn:
        made = []
        for seq in range(1, count + 1):
            source, error, old_key = rows[seq % len(rows)]
            made.append({"seq": seq, "source": source, "error": error, "old_key": old_key,
                         "status": rnd.choice(["open", "open", "republished", "closed"]),
                         "at": START + timedelta(minutes=rnd.randrange(0, 600))})
        ids = {}
        for source in {r["source"] for r in made}:
            found = group_ids(conn, {("payments.refund", "fatal", r["old_key"]) for r in made if r["source"] == source},
                              source=source)
            ids.update({(source, key): group_id for (_, _, key), group_id in found.items()})
        conn.execute(text(
            "INSERT INTO entries (status, version, dlq_stream, dlq_epoch, dlq_seq, original_subject, reason, error, "
            "received_at, headers, payload, payload_available, sources, notes, group_id, source) VALUES "
            "(:status, 1, 'DLQ', :source, :seq, 'payments.refund', 'fatal', :error, :at, '{}', :payload, :yes, "
            "'dlq', '[]', :group, :source)"),
            [{**r, "payload": b"{}", "yes": True, "group": ids[(r["source"], r["old_key"])]} for r in made])
        count_changes(conn, [Change(None, ids[(r["source"], r["old_key"])], r["at"], None, r["status"])
                             for r in made])
    return ids


def groups_by_key(engine) -> dict[tuple[str, str], tuple]:
    """(source, key) -> (id, entries counted, team, assignee) of every stored group."""
    with engine.connect() as conn:
        return {(g.source, g.key): (g.id, g.open_count + g.republished_count + g.closed_count, g.team, g.assignee)
                for g in conn.execute(select(GROUPS))}


def check_counts_and_seen(engine) -> None:
    """The kept counts equal a recount, each group's first and last seen are its entries', every
    entry is in the group its error names now, and a second run moves nothing."""
    assert kept(engine) == truth(engine)
    with engine.connect() as conn:
        seen = {g: (first, last) for g, first, last in conn.execute(
            select(Entry.group_id, func.min(Entry.received_at), func.max(Entry.received_at)).group_by(Entry.group_id))}
        groups = {g.id: (g.first_seen, g.last_seen) for g in conn.execute(select(GROUPS)) if g.id in seen}
        arrival_groups = set(conn.execute(select(ARRIVALS.c.group_id).distinct()).scalars())
        all_groups = set(conn.execute(select(GROUPS.c.id)).scalars())
        stored = set(conn.execute(select(Entry.error, Entry.source, GROUPS.c.key, GROUPS.c.source)
                                  .join(GROUPS, GROUPS.c.id == Entry.group_id)).all())
    assert groups == seen
    assert arrival_groups <= all_groups | {0}
    assert all(key == error_group(error, None) and group_source == source
               for error, source, key, group_source in stored)
    with write_transaction(engine) as conn:
        assert regroup.regroup_entries(conn, error_group) == 0  # the next start moves nothing


def test_hex_ids_read_as_a_duration_or_a_size_by_v3_are_regrouped_into_one_group_with_their_counts(
        database_url, monkeypatch):
    monkeypatch.setattr(regroup, "BATCH", 5)  # several chunks, a group split across them
    engine = create_db_engine(database_url)
    assert migrate(engine, "0024") == "0024"
    store_grouped_by_v3(engine, [("default", error, key) for error, key in V3_ROWS], 70)  # 10 of each text
    assert kept(engine) == truth(engine)
    assert {key: n for (_, key), (_, n, _, _) in groups_by_key(engine).items()} == {
        "refund <duration> rejected": 10, "refund <id> rejected": 20, "refund <n>b rejected": 10,
        "timeout after <duration>": 20, "disk full": 10}

    assert migrate(engine) == head()
    assert {key: n for (_, key), (_, n, _, _) in groups_by_key(engine).items()} == {
        "refund <id> rejected": 40, "timeout after <duration>": 20, "disk full": 10}
    check_counts_and_seen(engine)
    engine.dispose()


def test_the_regrouping_keeps_sources_apart_gives_a_group_it_makes_its_team_and_triage_and_keeps_a_triaged_group(
        database_url):
    engine = create_db_engine(database_url)
    assert migrate(engine, "0024") == "0024"
    rows = [("default", "refund 6705176d rejected", "refund <duration> rejected"),
            ("default", "refund 575142eb rejected", "refund <id> rejected"),
            ("default", "refund 1234567b rejected", "refund <n>b rejected"),
            # The same failures in another source, where no id read as an id yet.
            ("eu", "refund 6705176d rejected", "refund <duration> rejected"),
            ("eu", "refund 1234567b rejected", "refund <n>b rejected")]
    ids = store_grouped_by_v3(engine, rows, 50)
    ana = ids[("default", "refund <duration> rejected")]  # assigned, with a note and alerts
    sent, unsent = START + timedelta(hours=11), None
    with write_transaction(engine) as conn:
        conn.execute(update(GROUPS).where(GROUPS.c.source == "eu").values(team="billing"))
        # The eu group the first eu entry is in (sequence 3) is ignored until a time, by bo: the
        # group the move makes for it takes that, not the other eu group's open state.
        conn.execute(update(GROUPS).where(GROUPS.c.id == ids[("eu", "refund <duration> rejected")]).values(
            state="ignored", assignee="bo", ignored_until=IGNORED_UNTIL, state_changed_at=START))
        conn.execute(update(GROUPS).where(GROUPS.c.id == ana).values(assignee="ana", note_count=1))
        conn.execute(insert(GroupActivity.__table__).values(group_id=ana, at=START, actor="ana", kind="note",
                                                            text="the bank's cut-off", detail="{}"))
        conn.execute(insert(Alert.__table__), [
            {"event_id": f"e{group_id}-{at}", "url": "https://hooks.example/x", "event": "group.new",
             "group_id": group_id, "body": "{}", "created_at": START, "attempts": 0, "next_attempt_at": START,
             "sent_at": at}
            for group_id, at in [(ana, sent), (ana, unsent), (ids[("default", "refund <n>b rejected")], unsent)]])

    assert migrate(engine) == head()
    groups = groups_by_key(engine)
    assert {k: v[1:] for k, v in groups.items()} == {
        ("default", "refund <id> rejected"): (30, None, None),
        ("default", "refund <duration> rejected"): (0, None, "ana"),  # emptied, kept with what was done
        ("eu", "refund <duration> rejected"): (0, "billing", "bo"),
        ("eu", "refund <id> rejected"): (20, "billing", "bo")}  # made by the move: its first entry's group's
    with engine.connect() as conn:
        made = conn.execute(select(GROUPS.c.state, GROUPS.c.ignored_until, GROUPS.c.state_changed_at).where(
            GROUPS.c.id == groups[("eu", "refund <id> rejected")][0])).one()
    assert tuple(made) == ("ignored", IGNORED_UNTIL, START)  # the cause stays ignored, as it was
    with engine.connect() as conn:
        alerts = conn.execute(select(Alert.group_id, Alert.sent_at)).all()
        notes = conn.execute(select(GroupActivity.group_id, GroupActivity.text)).all()
    assert alerts == [(ana, sent)]  # the emptied groups' alerts not sent yet are withdrawn
    assert notes == [(ana, "the bank's cut-off")]
    check_counts_and_seen(engine)
    engine.dispose()
