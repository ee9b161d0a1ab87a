"""An id is never given twice: on SQLite an entry purged (or a group merged away) kept its id
free, and the next dead letter took the purged one's (revision 0033 made the tables AUTOINCREMENT).
The search pass took it as indexed, the audit of the purged entry showed on the new one, a page
read before the purge acted on the new entry, and the search index, told to remove an entry it
never held, made every later purge fail."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from dlq_dashboard.access.unread import GONE
from dlq_dashboard.accounts import create_token
from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.db.engine import create_db_engine, write_transaction
from dlq_dashboard.db.migrate import head, migrate
from dlq_dashboard.db.models import Action, Entry
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.entries.store import Store
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support
from .test_metrics import scrape, value


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """No periodic purge: the test purges with the command when it says so."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, retention=0)


def resolved_long_ago(engine, *ids: int) -> None:
    with write_transaction(engine) as conn:
        conn.execute(update(Entry).where(Entry.id.in_(ids)).values(updated_at=utcnow() - timedelta(days=2)))


def searched(engine, word: str) -> list[int]:
    return [e.id for e in Store(engine).list_entries(EntryFilter.from_args({"q": word})).entries]


@pytest.mark.both_databases
def test_a_dead_letter_after_a_purge_of_the_newest_entry_gets_a_new_id_and_is_searched(app, nats_server, tokens):
    rt = runtime_of(app)
    cli = app.test_cli_runner()
    first, second = support.dead_letter_orders(app, nats_server.url, [b'{"word": "alpha"}', b'{"word": "beta"}'])
    close_entry(rt, second, 1, actor="alice", note="handled by hand")
    resolved_long_ago(rt.engine, second)
    purged = cli.invoke(args=["purge", "--older-than", "1h"])
    assert purged.exit_code == 0 and "Purged 1 entry resolved" in purged.output, purged.output

    [new] = support.dead_letter_orders(app, nats_server.url, [b'{"word": "zebra"}'])

    assert new > second  # it was `second` again on SQLite
    assert searched(rt.engine, "zebra") == [new]
    client, operator = app.test_client(), support.bearer(tokens["operator"])
    # The purged entry is gone: its audit stays under its own id, shown on no other entry.
    assert client.get(f"/api/entries/{second}", headers=operator).status_code == 404
    shown = client.get(f"/api/entries/{new}", headers=operator).get_json()
    assert [a["action"] for a in shown["actions"] if a["action"] == "close"] == []
    # A page read before the purge acts on nothing else: the purged entry is unknown.
    stale = client.post(f"/api/entries/{second}/republish", json={"version": 1}, headers=operator)
    assert stale.status_code == 404
    with rt.engine.connect() as conn:
        assert conn.execute(select(Entry.status).where(Entry.id == new)).scalar_one() == "open"
    # A second purge works (the search index was told to remove an entry it never held).
    close_entry(rt, new, 1, actor="alice")
    close_entry(rt, first, 1, actor="alice")
    resolved_long_ago(rt.engine, first, new)
    again = cli.invoke(args=["purge", "--older-than", "1h"])
    assert again.exit_code == 0 and "Purged 2 entries" in again.output, again.output
    assert support.entry_count(rt.engine) == 0


@pytest.mark.fresh_database
def test_a_sqlite_database_that_gave_ids_twice_is_upgraded_to_give_none_again_and_search_every_entry(
        tmp_path, make_app):
    url = f"sqlite:///{tmp_path / 'dlq.sqlite3'}"
    engine = create_db_engine(url)
    assert migrate(engine, "0032") == "0032"
    for seq, word in enumerate(("alpha", "beta", "gamma"), start=1):
        payload = b'{"word": "%s", "customer": {"email": "u%d@ex.org"}}' % (word.encode(), seq)
        assert support.dead_letter(engine, seq, payload=payload) == seq
    with write_transaction(engine) as conn:  # beta closed with a note quoting its masked value
        conn.execute(Action.__table__.insert().values(entry_id=2, action="close", actor="token:tadmin", at=utcnow(),
                                                      note="closing u2@ex.org stuff", version=1, detail="{}"))

    def purge(*ids: int) -> None:
        with write_transaction(engine) as conn:
            conn.execute(Entry.__table__.delete().where(Entry.id.in_(ids)))

    purge(2, 3)
    # At 0032 the next two got the purged ids 2 and 3, above no search position: never indexed.
    assert support.dead_letter(engine, 4, payload=b'{"word": "delta"}') == 2
    assert support.dead_letter(engine, 5, payload=b'{"word": "epsilon"}') == 3
    assert searched(engine, "delta") == []
    purge(3)  # the index is told to remove text it never held: its counts are wrong from here
    with write_transaction(engine) as conn:
        # An audit record of an entry purged long ago, and a saved view of a group merged away.
        conn.exec_driver_sql("INSERT INTO actions (entry_id, action, actor, at, detail) "
                             "VALUES (9, 'close', 'alice', CURRENT_TIMESTAMP, '{}')")
        conn.exec_driver_sql("INSERT INTO saved_views (owner, name, page, query, shared, created_at) "
                             "VALUES ('alice', 'merged', 'list', 'status=open&group=7', 0, CURRENT_TIMESTAMP)")
    with engine.connect() as conn:
        kept = conn.execute(select(Entry.id, Entry.payload, Entry.group_id).order_by(Entry.id)).all()
        made = dict(conn.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE type IN ('index', 'trigger', "
                                         "'view') AND sql IS NOT NULL").all())

    assert migrate(engine) == head()

    # Beta's close is no longer delta's (it took beta's id): it is a purged entry's record, listed
    # by the audit and hidden from a masked viewer as the purged entries' texts are.
    app = make_app(database_url=url, mask=("/customer/email",))
    viewer = support.bearer(create_token(engine, "test-viewer", "viewer"))
    client = app.test_client()
    shown = client.get("/api/entries/2", headers=viewer).get_json()
    assert shown["version"] == 1 and shown["actions"] == []
    audit = client.get("/api/audit", headers=viewer)
    assert audit.status_code == 200 and "u2@ex.org" not in audit.get_data(as_text=True)
    [closed] = [a for a in audit.get_json()["actions"] if a["action"] == "close" and a["actor"] == "token:tadmin"]
    assert closed["entry_id"] not in (1, 2) and closed["note"] == GONE
    assert client.get(f"/api/entries/{closed['entry_id']}", headers=viewer).status_code == 404

    with engine.connect() as conn:
        assert conn.execute(select(Entry.id, Entry.payload, Entry.group_id).order_by(Entry.id)).all() == kept
        assert dict(conn.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE type IN ('index', 'trigger', "
                                         "'view') AND sql IS NOT NULL").all()) == made
        assert "AUTOINCREMENT" in conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = 'entries'").scalar()
    assert searched(engine, "delta") == [2] and searched(engine, "alpha") == [1]
    # Above every id the audit names, and a new group above the one the saved view names.
    assert support.dead_letter(engine, 6, payload=b'{"word": "zeta"}') == 11  # 10: beta's close
    newest = support.dead_letter(engine, 7, "payments.refused", b'{"word": "eta"}')
    with engine.connect() as conn:
        assert conn.execute(select(Entry.group_id).where(Entry.id == newest)).scalar_one() > 7
    assert searched(engine, "zeta") == [11]
    purge(1, 2, 11, newest)  # "database disk image is malformed" before the upgrade
    with write_transaction(engine) as conn:
        conn.exec_driver_sql("INSERT INTO entries_fts(entries_fts, rank) VALUES ('integrity-check', 1)")
    engine.dispose()


def test_a_purge_the_database_refuses_says_so_in_one_line_and_in_metrics(tmp_path, nats_server, make_app):
    app = make_app(settings=support.make_settings(tmp_path, nats_server.url, retention=3600, purge_interval=0.2),
                   online=True)
    rt = runtime_of(app)
    [entry] = support.dead_letter_orders(app, nats_server.url, [b'{"word": "alpha"}'])
    close_entry(rt, entry, 1, actor="alice")
    with write_transaction(rt.engine) as conn:  # what "database disk image is malformed" did to every purge
        conn.exec_driver_sql("CREATE TRIGGER refused BEFORE DELETE ON entries BEGIN "
                             "SELECT RAISE(ABORT, 'the database refuses'); END")
    resolved_long_ago(rt.engine, entry)

    # The periodic purge (DLQ_RETENTION) fails: /metrics says so, not only a log line.
    support.wait_for(lambda: value(scrape(app.test_client()), "dlq_retention_purge_failing") == 1,
                     message="the failing purge in /metrics")
    failed = app.test_cli_runner().invoke(args=["purge", "--older-than", "1h"])
    assert failed.exit_code == 1 and "Traceback" not in failed.output, failed.output
    [line] = failed.output.strip().splitlines()
    assert line.startswith("Error: the purge stopped: the database refused it (the database refuses)"), line

    with write_transaction(rt.engine) as conn:
        conn.exec_driver_sql("DROP TRIGGER refused")
    support.wait_for(lambda: support.entry_count(rt.engine) == 0, message="the periodic purge")
    support.wait_for(lambda: value(scrape(app.test_client()), "dlq_retention_purge_failing") == 0,
                     message="the purge working again in /metrics")
