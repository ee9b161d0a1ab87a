"""A time window (``since`` and ``until``, as a bar of the chart links it) lists exactly the
entries received in it, and on SQLite reads those entries, not every one received after it.

SQLite keeps no statistics of the times, so it read a window the way it reads the list: from
the newest entry back (or along another filter's ``(status, id)`` index), testing each time, and
an hour three days back meant half a million entries read at a million (docs/PERFORMANCE.md,
"A time window"). The window's least and greatest ids, looked up in the time index
(entries/windows.py ``window_ids``), bound that walk.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import event

from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
from dlq_dashboard.db.models import Entry
from dlq_dashboard.entries import windows
from dlq_dashboard.entries.filters import EntryFilter
from dlq_dashboard.entries import store as store_module
from dlq_dashboard.entries.store import Store
from dlq_dashboard.entries.tallies import Tallies
from dlq_dashboard.ingest.search_index import index_pending
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support
from .support import migrated_sqlite

BASE = datetime(2026, 11, 1)
STATUSES = ("open", "closed", "republished")


def _rows(times: list[datetime], first_id: int = 1) -> list[dict]:
    """Entries with these receiving times, in id order; every third one open, every other
    one holding the word "alpha" in its payload."""
    return [{"id": first_id + i, "status": STATUSES[(first_id + i) % 3], "dlq_stream": "DLQ", "dlq_epoch": "e",
             "dlq_seq": first_id + i, "original_subject": "orders.created", "received_at": at,
             "payload": json.dumps({"word": "alpha" if (first_id + i) % 2 == 0 else "beta"}).encode()}
            for i, at in enumerate(times)]


def _insert(engine, rows: list[dict]) -> None:
    with engine.begin() as conn:
        conn.execute(Entry.__table__.insert(), rows)
    while index_pending(engine).more:
        pass


def _expected(rows: list[dict], flt: EntryFilter) -> list[int]:
    """The ids ``flt`` selects among ``rows``, newest first, worked out here."""
    return sorted((r["id"] for r in rows
                   if (flt.since is None or r["received_at"] >= flt.since)
                   and (flt.until is None or r["received_at"] < flt.until)
                   and (flt.status is None or r["status"] == flt.status)
                   and (flt.q is None or json.loads(r["payload"])["word"] == flt.q)), reverse=True)


def _listed(store: Store, flt: EntryFilter) -> list[int]:
    """Every id the list gives under ``flt``, page by page (a cursor after each page)."""
    ids, cursor = [], None
    while True:
        page = store.list_entries(EntryFilter(**{**flt.__dict__, "cursor": cursor, "limit": 7}))
        ids += [e.id for e in page.entries]
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


def _at(minutes: float) -> datetime:
    return BASE + timedelta(minutes=minutes)


# Entries 1-100 a minute apart; then the clock set back 50 minutes (101-160 received at the
# times of 51-110 again); then on from there (161-240): times and ids out of step.
TIMES = [_at(i) for i in range(1, 101)] + [_at(i - 50) for i in range(101, 161)] + [_at(i - 50) for i in range(161, 241)]
WINDOWS = [(None, _at(0.5)),         # before every entry: empty
           (_at(300), _at(400)),     # after every entry: empty
           (_at(20), _at(30)),       # before the clock was set back
           (_at(55), _at(70)),       # entries of both sides of the step
           (None, _at(60)),          # until alone
           (_at(95), _at(125)),      # across the step's end
           (_at(0), _at(1000)),      # everything
           (_at(40.5), _at(40.7)),   # between two entries: empty
           (_at(60), None),          # since alone: both sides of the step
           (_at(185), None),         # since alone: the newest
           (_at(300), None)]         # since alone, after every entry: empty


@pytest.mark.both_databases
@pytest.mark.parametrize(("cap", "after"), [(windows.WINDOW_IDS_CAP, 1), (25, 1), (windows.WINDOW_IDS_CAP, 60)],
                         ids=["windows-within-the-cap", "windows-beyond-it", "some-windows-too-recent-to-bound"])
def test_a_time_window_lists_exactly_the_entries_received_in_it_whatever_the_order_of_times_and_ids(
        database_url, monkeypatch, cap, after):
    # 240 entries: a window's ids are looked up from the first entry received after it (or 60).
    monkeypatch.setattr(windows, "WINDOW_IDS_CAP", cap)
    monkeypatch.setattr(windows, "WINDOW_AFTER", after)
    engine = create_db_engine(database_url)
    try:
        rows = _rows(TIMES)
        _insert(engine, rows)
        store = Store(engine)
        tallies = Tallies(store)
        for since, until in WINDOWS:
            for status in (None, "open"):
                for q in (None, "alpha"):
                    flt = EntryFilter(since=since, until=until, status=status, q=q)
                    expected = _expected(rows, flt)
                    assert _listed(store, flt) == expected, flt
                    assert [e.id for e in store.iter_entries(flt, batch=5)] == expected, flt
                    assert store.count_newer(flt, 0) == len(expected), flt
                    if q is None:  # the summary counts the same entries (as the groups do: Store.select_entries)
                        counts, _ = tallies.counts_by_status(flt)  # each status's, the others' filters applied
                        every = set(_expected(rows, EntryFilter(since=since, until=until)))
                        assert counts == {s: sum(1 for r in rows if r["id"] in every and r["status"] == s)
                                          for s in STATUSES}, flt
                    if expected:  # the entry pages' neighbours walk the same selection
                        assert store.neighbours(flt, expected[len(expected) // 2]) == (
                            expected[len(expected) // 2 - 1] if len(expected) > 1 and len(expected) // 2 else None,
                            expected[len(expected) // 2 + 1] if len(expected) // 2 + 1 < len(expected) else None), flt
        # A window that reaches the future lists an entry received after it was first asked:
        # its ids are looked up at each request.
        flt = EntryFilter(since=_at(150), until=_at(10_000))
        before = _listed(store, flt)
        later = _rows([_at(5_000)], first_id=241)
        _insert(engine, later)
        assert _listed(store, flt) == [241] + before
    finally:
        dispose_quietly(engine)


@pytest.mark.both_databases
def test_every_channel_a_reader_sees_gives_the_windows_entries(make_app, database_url, monkeypatch):
    """The list JSON (page by page), the exports and the command line give a window's entries,
    times and ids out of step, as the store does: each channel reads through the same selection."""
    monkeypatch.setattr(windows, "WINDOW_AFTER", 1)  # every window here with an entry after it is looked up
    app = make_app(database_url=database_url)
    rows = _rows(TIMES)
    _insert(runtime_of(app).engine, rows)
    client = support.logged_in(app, "viewer")
    for since, until in [(_at(55), _at(70)), (None, _at(60)), (_at(95), _at(125)), (_at(185), None)]:
        flt = EntryFilter(since=since, until=until)
        expected = _expected(rows, flt)
        args = "&".join(f"{k}={v}" for k, v in flt.to_args().items())
        listed, cursor = [], ""
        while cursor is not None:
            body = client.get(f"/api/entries?{args}&limit=7" + (f"&cursor={cursor}" if cursor else "")).get_json()
            listed += [e["id"] for e in body["entries"]]
            cursor = body["next_cursor"]
        assert listed == expected, args
        assert [e["id"] for e in client.get(f"/api/export.json?{args}").get_json()] == expected, args
        ndjson = client.get(f"/api/export.ndjson?{args}").get_data(as_text=True).splitlines()
        assert [json.loads(line)["id"] for line in ndjson] == expected, args
        options = [f"--{k}={v}" for k, v in flt.to_args().items()]
        result = app.test_cli_runner().invoke(args=["entries", "export", *options])
        assert result.exit_code == 0, result.output
        assert [e["id"] for e in json.loads(result.stdout)] == expected, args


@pytest.mark.both_databases
def test_until_as_since_takes_a_duration_back_from_now_and_links_keep_it_as_given(make_app, database_url):
    """``until=7d`` is what is older than a week, as ``since=7d`` is the week: on every channel,
    kept as given in the list's links (a saved view stays "older than a week"), a bad one a 400."""
    app = make_app(database_url=database_url)
    now = utcnow()
    _insert(runtime_of(app).engine, _rows([now - timedelta(days=10), now - timedelta(days=3),
                                           now - timedelta(hours=2), now - timedelta(minutes=5)]))
    client = support.logged_in(app, "viewer")
    for args, expected in [("until=7d", [1]), ("until=1d", [2, 1]), ("since=7d&until=1h", [3, 2]),
                           ("until=15m&status=open", [3]), ("until=1h&since=1h", [])]:
        assert [e["id"] for e in client.get(f"/api/entries?{args}").get_json()["entries"]] == expected, args
        assert [e["id"] for e in client.get(f"/api/export.json?{args}").get_json()] == expected, args
        options = [f"--{arg.replace('=', ' ', 1)}".split() for arg in args.split("&")]
        result = app.test_cli_runner().invoke(args=["entries", "export", *[o for pair in options for o in pair]])
        assert result.exit_code == 0, result.output
        assert [e["id"] for e in json.loads(result.stdout)] == expected, args
    assert client.get("/?until=1d", headers={"HX-Request": "true"}).headers["HX-Push-Url"] == "/?until=1d"
    page = client.get("/?until=1d&status=").get_data(as_text=True)
    assert "until=1d" in page and 'value="1d"' in page
    refused = client.get("/api/entries?until=7x")
    assert refused.status_code == 400 and refused.get_json()["error"] == (
        "until '7x' is not valid: use an RFC 3339 time such as 2026-11-29T10:00:00Z or a duration back from now "
        "such as 15m, 1h or 7d")


@settings(max_examples=60 * support.FUZZ_SCALE, derandomize=not support.LONG_RUN, deadline=None, database=None)
@given(steps=st.lists(st.integers(min_value=-30, max_value=30), min_size=1, max_size=60),
       since=st.none() | st.integers(min_value=-200, max_value=400),
       length=st.integers(min_value=0, max_value=300),
       cap=st.sampled_from([3, 20_000]), after=st.sampled_from([1, 5]), status=st.sampled_from([None, "open"]))
def test_any_window_over_any_order_of_times_lists_what_it_holds(tmp_path_factory, steps, since, length, cap,
                                                                 after, status):
    """Times that go back and forth (a minute a step, any step from -30 to 30), any window."""
    times, minute = [], 0
    for step in steps:
        minute += step
        times.append(_at(minute))
    until = _at((since if since is not None else -200) + length) if length < 300 else None  # 300: no until
    path = tmp_path_factory.mktemp("windows") / "dlq.sqlite3"
    engine = create_db_engine(migrated_sqlite(path))
    original = windows.WINDOW_IDS_CAP, windows.WINDOW_AFTER
    windows.WINDOW_IDS_CAP, windows.WINDOW_AFTER = cap, after
    try:
        rows = _rows(times)
        _insert(engine, rows)
        flt = EntryFilter(since=None if since is None else _at(since), until=until, status=status)
        assert _listed(Store(engine), flt) == _expected(rows, flt)
    finally:
        windows.WINDOW_IDS_CAP, windows.WINDOW_AFTER = original
        dispose_quietly(engine)


def _work(engine, run) -> int:
    """SQLite's virtual machine instructions (in thousands) that ``run()`` costs: what it reads,
    counted the same on any machine."""
    counted = [0]

    def count() -> int:
        counted[0] += 1
        return 0

    def watch(dbapi_connection, record) -> None:
        dbapi_connection.set_progress_handler(count, 1000)

    event.listen(engine, "connect", watch)
    engine.dispose()  # connections from now on count
    try:
        counted[0] = 0
        run()
        return counted[0]
    finally:
        event.remove(engine, "connect", watch)
        engine.dispose()


def test_a_window_in_the_past_reads_its_own_entries_not_those_received_after_it(tmp_path):
    """An hour's entries (60), then first 2,000 and then 20,000 more received after it: the
    window's page, with the open ones only (along the status index), with a search, and the
    page of ``until`` alone cost the same work however many came after."""
    engine = create_db_engine(migrated_sqlite(tmp_path / "dlq.sqlite3"))
    window = EntryFilter(since=_at(0), until=_at(60))
    asked = [window, EntryFilter(**{**window.__dict__, "status": "open"}),
             EntryFilter(**{**window.__dict__, "q": "alpha"}), EntryFilter(until=_at(60))]
    try:
        hour = _rows([_at(i + 0.5) for i in range(60)])
        _insert(engine, hour)
        work, present = {}, len(hour)
        for after in (2_000, 20_000):
            more = after - (present - len(hour))
            _insert(engine, _rows([_at(120 + i / 100) for i in range(more)], first_id=present + 1))
            present += more
            store = Store(engine)
            for flt in asked:
                assert [e.id for e in store.list_entries(flt).entries] == _expected(hour, flt)[:flt.limit]
            work[after] = {str(flt.to_args()): _work(engine, lambda flt=flt: store.list_entries(flt)) for flt in asked}
        for key, few in work[2_000].items():
            many = work[20_000][key]
            # Without the bounds the walk through the 18,000 more entries costs ten times the work.
            assert many <= few + 2, f"{key}: {few}k instructions after 2,000 newer entries, {many}k after 20,000"
    finally:
        dispose_quietly(engine)


def test_every_entry_of_a_window_read_in_batches_looks_its_ids_up_once(tmp_path, monkeypatch):
    """An export (Store.iter_entries, keyset batches) looks the window's ids up once, not at
    each batch: each lookup reads up to WINDOW_IDS_CAP entries of the time index."""
    engine = create_db_engine(migrated_sqlite(tmp_path / "dlq.sqlite3"))
    lookups = []

    def counted(conn, since, until):
        lookups.append((since, until))
        return windows.window_ids(conn, since, until)

    monkeypatch.setattr(store_module, "window_ids", counted)
    monkeypatch.setattr(windows, "WINDOW_AFTER", 1)
    try:
        rows = _rows(TIMES)
        _insert(engine, rows)
        flt = EntryFilter(since=_at(10), until=_at(200), status="open")
        assert [e.id for e in Store(engine).iter_entries(flt, batch=5)] == _expected(rows, flt)
        assert len(_expected(rows, flt)) > 5 * 10  # ten batches and more
        assert lookups == [(_at(10), _at(200))]
    finally:
        dispose_quietly(engine)


def _same_work_over_older_entries(tmp_path, asked: list[EntryFilter], newest: list[datetime]) -> None:
    """Each filter's page, over 2,000 and then 20,000 entries received before ``newest`` (and
    those), is what it should be and costs the same work."""
    work = {}
    for count in (2_000, 20_000):
        engine = create_db_engine(migrated_sqlite(tmp_path / f"{count}.sqlite3"))
        try:
            rows = _rows([_at(i) for i in range(count)] + newest)
            _insert(engine, rows)
            store = Store(engine)
            for flt in asked:
                assert [e.id for e in store.list_entries(flt).entries] == _expected(rows, flt)[:flt.limit]
            work[count] = {str(flt.to_args()): _work(engine, lambda flt=flt: store.list_entries(flt)) for flt in asked}
        finally:
            dispose_quietly(engine)
    for key, few in work[2_000].items():
        many = work[20_000][key]
        assert many <= few + 2, f"{key}: {few}k instructions over 2,000 older entries, {many}k over 20,000"


def test_a_window_that_ends_near_the_newest_entry_looks_nothing_up(tmp_path):
    """``until`` with ten entries received after it (an export frozen at its start): its page
    costs the same work over 2,000 older entries as over 20,000; the lookup, which would read
    the window up to WINDOW_IDS_CAP entries, is left out, as the walk from the newest entry
    reaches the window within a page. (Not a search of a word in half the entries: FTS5 reads
    the word's whole list of entries, so its cost grows with them, bounds or not.)"""
    until = _at(100_000)
    _same_work_over_older_entries(tmp_path, [EntryFilter(until=until), EntryFilter(until=until, status="open")],
                                  [_at(100_001 + i) for i in range(10)])


def test_the_last_hour_of_a_selective_filter_reads_the_hour_not_every_older_entry(tmp_path):
    """``since`` alone (the list's "last hour" link) with a filter that the hour's entries do
    not fill a page of (republished ones: 20 of its 60), as the summaries and groups count up to
    tallies.BOUND of them: its page costs the same work over 2,000 older entries as over 20,000,
    instead of walking on through every older republished entry."""
    since = _at(100_000)
    _same_work_over_older_entries(tmp_path, [EntryFilter(since=since, status="republished"),
                                             EntryFilter(since=since, status="republished", q="alpha")],
                                  [_at(100_000 + i) for i in range(60)])
