"""What a database outage writes in the log (docs/deploy.md, "A database outage"): the probe's
line when it goes and when it comes back, and from each background pass (db/failing.py) one line
when it first fails and one when it works again, never a traceback at each retry."""

from __future__ import annotations

import logging

import pytest

from dlq_dashboard.actions.triage import ReopenSchedule
from dlq_dashboard.alerts.sender import AlertSender
from dlq_dashboard.db.engine import create_db_engine, dispose_quietly
from dlq_dashboard.db.failing import FailureLog
from dlq_dashboard.ingest.search_index import SearchPass

from . import support
from .postgres import PostgresServer

pytestmark = [pytest.mark.timeout(180)]

PASSES = ("dlq_dashboard.ingest.search_index", "dlq_dashboard.actions.triage", "dlq_dashboard.alerts.sender")


@pytest.fixture(scope="module")
def own_postgres():
    """A PostgreSQL server of this module's own: its test stops it."""
    server = PostgresServer().start()
    yield server
    server.remove()


def records(caplog, logger: str, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger and r.levelno == level]


def test_each_background_pass_logs_a_stopped_database_once_without_a_traceback_and_once_back(
        own_postgres, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="dlq_dashboard")
    url = own_postgres.create_database(migrated=True)
    engine = create_db_engine(url, connect_timeout=2.0)
    settings = support.make_settings(tmp_path, database_url=url, alert_poll=0.1)
    passes = [SearchPass(engine, interval=0.1).start(),
              ReopenSchedule(engine, None, lambda: True, interval=0.1).start(),
              AlertSender(engine, settings).start()]
    try:
        own_postgres.stop()
        # Each pass has failed, then failed again at three retries at least (said at debug only).
        support.wait_for(lambda: all(sum("failed again" in r.getMessage() for r in records(caplog, name, logging.DEBUG))
                                     >= 3 for name in PASSES), timeout=60, message="every pass to retry three times")
        own_postgres.start()
        # Its second warning (the first said it failed, "... it runs again every 5 s").
        support.wait_for(lambda: all(len(records(caplog, name, logging.WARNING)) >= 2 for name in PASSES),
                         timeout=60, message="every pass to say it works again")
    finally:
        if own_postgres.proc.poll() is not None:
            own_postgres.start()
        for each in passes:
            each.stop()
        dispose_quietly(engine)
    for name in PASSES:
        said = [(r.getMessage(), r.exc_info) for r in records(caplog, name, logging.WARNING)]
        assert len(said) == 2, said  # failed, then works again
        (failed, trace), (again, _) = said
        assert " failed (" in failed and trace is None, said
        assert again.endswith((" works again", " indexes again", " sent again")), said
    assert "Traceback" not in caplog.text


def test_an_error_that_is_not_the_database_away_is_logged_with_its_traceback_once_a_run(caplog):
    log = logging.getLogger("dlq_dashboard.test_failing")
    caplog.set_level(logging.WARNING, logger=log.name)
    failures = FailureLog(log, "the nightly pass", "it runs again in 5 s")
    for _ in range(3):
        failures.failed(KeyError("group"))
    failures.worked()
    failures.worked()
    failures.failed(KeyError("group"))
    said = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert said == [("the nightly pass failed; it runs again in 5 s", True),
                    ("the nightly pass works again", False),
                    ("the nightly pass failed; it runs again in 5 s", True)]


def test_the_alert_sender_that_holds_no_lease_says_an_outage_once_not_at_each_asking(tmp_path, caplog, monkeypatch):
    """A sender without the alerts lease asks for it every LEASE_SECONDS / 3 and touches the
    database at no other poll: each poll between was taken for a pass that worked, so through an
    outage the log read "failed", "alerts are sent again", "failed", ... at every asking."""
    from dlq_dashboard.alerts import sender as sending

    caplog.set_level(logging.DEBUG, logger=sending.__name__)
    monkeypatch.setattr(sending, "LEASE_SECONDS", 0.6)  # asked every 0.2 s
    engine = create_db_engine("postgresql://postgres@127.0.0.1:1/none", connect_timeout=1.0)  # nobody listens
    settings = support.make_settings(tmp_path, alert_poll=0.02)
    sender = AlertSender(engine, settings).start()
    try:
        # Three askings after the first failure, each told at debug as the same outage going on.
        support.wait_for(lambda: sum("failed again" in r.getMessage()
                                     for r in records(caplog, sending.__name__, logging.DEBUG)) >= 3,
                         timeout=30, message="three more askings to fail")
    finally:
        sender.stop()
        dispose_quietly(engine)
    said = [r.getMessage() for r in records(caplog, sending.__name__, logging.WARNING)]
    assert len(said) == 1 and said[0].startswith("sending alerts failed ("), said
