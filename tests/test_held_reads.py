"""A web request's reads share one connection (db/engine.py ``hold_reads``): checked out, and on
PostgreSQL checked by the pool, once a request instead of once a read; returned when the
request ends; never lent to another thread, nor to a read inside a read."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import event, text

from dlq_dashboard.db.engine import hold_reads, read_transaction, release_reads
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases


def _checkouts(engine) -> list[int]:
    made: list[int] = []
    event.listen(engine, "checkout", lambda *_: made.append(threading.get_ident()))
    return made


def test_a_page_and_an_api_answer_each_check_out_one_connection_and_return_it(make_app, database_url):
    app = make_app(database_url=database_url)
    engine = runtime_of(app).engine
    entry_id = support.dead_letter(app, 1)
    client = support.logged_in(app, "operator")
    urls = ["/", "/summary", f"/entries/{entry_id}", "/groups", "/api/entries", "/api/groups"]
    for url in urls:  # once first: a session's last use is written at most once a minute, apart
        assert client.get(url).status_code == 200, url
    made = _checkouts(engine)
    for url in urls:
        before = len(made)
        response = client.get(url)
        assert response.status_code == 200, url
        # Four to six reads a page (the session's user, the entries, the views, the groups' states...)
        assert len(made) - before == 1, f"{url}: {len(made) - before} checkouts"
        assert engine.pool.checkedout() == 0, f"{url} kept its connection"


def test_a_read_inside_a_read_and_another_thread_get_connections_of_their_own(make_app, database_url):
    engine = runtime_of(make_app(database_url=database_url)).engine
    seen: dict[str, object] = {}
    hold_reads()
    try:
        with read_transaction(engine) as outer:
            seen["outer"] = outer
            with read_transaction(engine) as inner:  # the held one is in a transaction: not lent
                seen["inner"] = inner
                assert inner.execute(text("SELECT 1")).scalar() == 1
        with read_transaction(engine) as again:
            seen["again"] = again
        worker = threading.Thread(target=lambda: seen.__setitem__("thread", _read_on(engine)))
        worker.start()
        worker.join(10)
        assert engine.pool.checkedout() == 1  # the held connection, between reads
    finally:
        release_reads()
    assert engine.pool.checkedout() == 0
    assert seen["again"] is seen["outer"] and seen["inner"] is not seen["outer"]
    assert seen["thread"] is not seen["outer"]
    with read_transaction(engine) as after:  # nothing held any more: a connection of its own
        assert after is not seen["outer"]


def _read_on(engine):
    with read_transaction(engine) as conn:
        return conn


def test_a_connection_the_database_dropped_is_replaced_by_the_next_read(make_app, database_url):
    engine = runtime_of(make_app(database_url=database_url)).engine
    hold_reads()
    try:
        with read_transaction(engine) as first:
            pass
        first.invalidate()  # what SQLAlchemy does when a statement meets a dropped connection
        with read_transaction(engine) as second:
            assert second is not first and second.execute(text("SELECT 1")).scalar() == 1
    finally:
        release_reads()
    assert engine.pool.checkedout() == 0
