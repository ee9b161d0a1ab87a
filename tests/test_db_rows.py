"""db/rows.py's SQLite values: times written as SQLAlchemy writes them, so that its reads parse them
and the text sorts as the times do."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import example, given
from hypothesis import strategies as st
from sqlalchemy.dialects.sqlite import DATETIME

from dlq_dashboard.db.rows import sqlite_values

SQLALCHEMY = DATETIME().bind_processor(None)


@given(st.datetimes(timezones=st.none() | st.just(timezone.utc) | st.just(timezone(timedelta(hours=-3)))))
@example(datetime(1, 1, 1))
@example(datetime(999, 5, 5, 1, 2, 3, 4))
@example(datetime(9999, 12, 31, 23, 59, 59, 999999))
def test_a_time_is_written_as_sqlalchemy_writes_it(moment):
    (row,) = sqlite_values([{"at": moment, "n": 1}], ["at", "n"])
    assert row == (SQLALCHEMY(moment), 1)


def test_times_of_every_century_sort_as_text_as_they_do_as_times():
    moments = [datetime(999, 1, 1), datetime(1000, 1, 1), datetime(2026, 11, 30, 0, 0, 0, 1), datetime(80, 6, 1)]
    written = [row[0] for row in sqlite_values([{"at": m} for m in moments], ["at"])]
    assert sorted(written) == [SQLALCHEMY(m) for m in sorted(moments)]
    assert sqlite_values([{"at": None}, {"at": moments[0]}], ["at"]) == [(None,), (SQLALCHEMY(moments[0]),)]
