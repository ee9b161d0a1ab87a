"""A rename and a new source in one change of DLQ_CONFIG (SPEC section 12), on real servers: source
``one`` renamed ``two`` and a new source ``cpy`` reading a copy of the same server's store (stream
DLQ of the same name and creation time). The takeover of one's position was the first asking
follower's: ``cpy`` could take it, and ``two`` stored all of one's messages again. Who takes over
is now decided at the start: ``renamed_from`` names the old name; without it, only the one source
new to the database takes over."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from dlq_dashboard.db.engine import create_db_engine
from dlq_dashboard.ingest.takeover import take_over_position, takeover_plan
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.sources import Source
from dlq_dashboard.times import utcnow

from . import support
from .test_sources_copies import copy_server, of_source, positions, publish, started  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

COUNT = 5


def renamed_beside_a_copy(make_app, tmp_path, nats_server, copy_server, two: dict, copy_first: bool):  # noqa: F811
    """Source one (server A) stores COUNT messages; then one becomes ``two`` (server A) and source
    cpy (server B, a copy of A's store) is added, in the file's order ``copy_first``."""
    first = started(make_app, tmp_path, [{"name": "one", "nats_url": nats_server.url, "stream": "DLQ"}])
    engine = runtime_of(first).engine
    publish(nats_server.url, COUNT)
    support.wait_for(lambda: len(of_source(engine, "one")) == COUNT, timeout=60, message="one's messages")
    runtime_of(first).stop()
    copy = copy_server(nats_server)
    cpy = {"name": "cpy", "nats_url": copy.url, "stream": "DLQ"}
    two = {"name": "two", "nats_url": nats_server.url, "stream": "DLQ", **two}
    app = started(make_app, tmp_path, [cpy, two] if copy_first else [two, cpy])
    return app, engine, copy


@pytest.mark.parametrize("copy_first", [True, False], ids=["copy-first", "renamed-first"])
def test_a_rename_with_renamed_from_beside_a_new_copy_source_stores_nothing_twice(
        make_app, tmp_path, nats_server, copy_server, copy_first):  # noqa: F811
    app, engine, copy = renamed_beside_a_copy(make_app, tmp_path, nats_server, copy_server,
                                              {"renamed_from": "one"}, copy_first)
    # The copy's source stores every message of its own stream; the renamed one goes on after one's.
    support.wait_for(lambda: len(of_source(engine, "cpy")) == COUNT, timeout=60, message="cpy's messages")
    publish(nats_server.url, 1, start=COUNT)
    support.wait_for(lambda: of_source(engine, "two") == [COUNT + 1], timeout=30, message="two's new one")
    assert of_source(engine, "one") == of_source(engine, "cpy") == list(range(1, COUNT + 1))
    assert positions(engine)[("two", "DLQ")] == COUNT + 1 and positions(engine)[("cpy", "DLQ")] == COUNT
    assert not any(source == "one" for source, _ in positions(engine))


@pytest.mark.parametrize("copy_first", [True, False], ids=["copy-first", "renamed-first"])
def test_two_new_sources_without_renamed_from_take_over_nothing(
        make_app, tmp_path, nats_server, copy_server, copy_first, caplog):  # noqa: F811
    caplog.set_level(logging.WARNING, logger="dlq_dashboard.ingest.takeover")
    app, engine, copy = renamed_beside_a_copy(make_app, tmp_path, nats_server, copy_server, {}, copy_first)
    support.wait_for(lambda: len(of_source(engine, "cpy")) == COUNT and len(of_source(engine, "two")) == COUNT,
                     timeout=60, message="each new source to read its stream from its start")
    assert positions(engine)[("one", "DLQ")] == COUNT  # one's position is left where it was
    assert not [r for r in caplog.records if "takes over" in r.getMessage()]
    [warning] = [r.getMessage() for r in caplog.records if "renamed_from" in r.getMessage()]
    assert warning.startswith("sources cpy, two are new" if copy_first else "sources two, cpy are new"), warning
    assert "sources one (no longer configured)" in warning


@pytest.mark.both_databases
def test_the_takeover_is_decided_at_the_start_whichever_follower_asks_first(database_url, caplog):
    caplog.set_level(logging.WARNING, logger="dlq_dashboard.ingest.takeover")
    engine = create_db_engine(database_url)

    def stored(source: str, stream: str = "DLQ", epoch: str = "e1") -> None:
        ingest_dlq_batch(engine, stream, epoch, [StreamMessage(seq, "dlq.x", None, b"{}", utcnow())
                                                 for seq in (1, 2, 3)], source=source)

    try:
        stored("one")
        stored("old", stream="DLQ2", epoch="e0")
        two, cpy = Source(name="two", renamed_from=("one",)), Source(name="cpy")
        for order in ((cpy, two), (two, cpy)):
            takes, kept = takeover_plan(engine, [two, cpy])
            assert takes == {"two": ("one",), "cpy": ()} and set(kept) == {"two", "cpy", "one"}
            answers = {s.name: take_over_position(engine, "DLQ", "e1", s.name, kept, takes[s.name]) for s in order}
            assert answers == {"two": ("e1", 3), "cpy": (None, 0)}
            # Undone for the other order.
            with engine.begin() as conn:
                conn.exec_driver_sql("UPDATE mirror_state SET source = 'one' WHERE source = 'two'")
        # renamed_from of a stream recreated since: logged, nothing taken.
        takes, kept = takeover_plan(engine, [Source(name="new", renamed_from=("old",))])
        assert take_over_position(engine, "DLQ2", "e9", "new", kept, takes["new"]) == (None, 0)
        assert any("was created at e0 and the stream DLQ2 now at e9" in r.getMessage() for r in caplog.records)
        # Without renamed_from: the one new source takes over; two new ones take nothing.
        alone, kept = takeover_plan(engine, [Source(name="solo")])
        assert alone == {"solo": None}
        both, kept = takeover_plan(engine, [Source(name="a"), Source(name="b")])
        assert both == {"a": (), "b": ()}
        assert take_over_position(engine, "DLQ", "e1", "a", kept, both["a"]) == (None, 0)
        assert take_over_position(engine, "DLQ", "e1", "solo", ("solo",), alone["solo"]) == ("e1", 3)
        assert positions(engine) == {("solo", "DLQ"): 3, ("old", "DLQ2"): 3}
        assert Counter(r.getMessage().split(" (no longer")[0] for r in caplog.records if "are new" in r.getMessage()
                       ) == Counter({"sources two, cpy are new and sources old": 2,  # old's, cpy cannot take
                                     "sources a, b are new and sources old, one": 1})
    finally:
        engine.dispose()
