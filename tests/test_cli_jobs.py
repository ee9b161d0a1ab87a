"""`flask --app app jobs list|show|start|cancel`: the API's bulk jobs on the server, through the
same code, audited as cli:<os user>; on a real nats-server."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.db.engine import create_db_engine
from dlq_dashboard.db.models import Action, Job
from dlq_dashboard.runtime import runtime_of

from . import support

REPO = Path(__file__).resolve().parent.parent
ACTOR = f"cli:{getpass.getuser()}"
VALID, INVALID = b'{"order_id": "o-1", "customer_id": "c-1"}', b'{"order_id": "o-2"}'


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """Orders whose schema requires customer_id."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url,
                                 schemas_dir=support.orders_schema_folder(tmp_path))


@pytest.fixture
def cli(app):
    runner = app.test_cli_runner()
    return lambda *args, input=None: runner.invoke(args=["jobs", *args], input=input)


def test_start_wait_republishes_once_and_names_the_failed_ones_as_a_selection_of_their_own(cli, app, nats_server):
    support.make_orders_stream(nats_server.url)
    valid = support.dead_letter_orders(app, nats_server.url, [VALID])
    invalid = support.dead_letter_orders(app, nats_server.url, [INVALID])
    dry = cli("start", "republish", "--subject", "orders.created", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "Would republish 2 entries:" in dry.output and "1 would be refused: The payload does not pass" in dry.output
    # Nothing made by a dry run.
    with runtime_of(app).engine.connect() as conn:
        assert conn.execute(select(Action.id).where(Action.job_id.is_not(None))).first() is None
    ran = cli("start", "republish", "--subject", "orders.created", "--wait")
    assert ran.exit_code == 1, ran.output  # an item failed: said by the exit code
    assert "finished: 1 done, 1 failed, 0 skipped, 0 to go, of 2." in ran.output
    assert "1 items of job 1 failed: jobs show 1 --state failed says why" in ran.output
    assert [m.data for m in support.stream_messages(nats_server.url)] == [VALID]
    shown = cli("show", "1")
    assert shown.exit_code == 0, shown.output
    assert "Job 1: bulk republish by " + ACTOR in shown.output
    assert "The failed ones are a selection of their own: --job 1:failed" in shown.output
    # That selection, closed in a second job by the command line, exactly the failed one.
    closed = cli("start", "close", "--job", "1:failed", "--note", "cannot be fixed", "--wait", "--json")
    assert closed.exit_code == 0, closed.output
    answer = json.loads(closed.output)
    assert (answer["done"], answer["total"], answer["selection_text"]) == (1, 1, "the failed items of job 1, status=open")
    assert runtime_of(app).store.get_entry(invalid[0]).status == "closed"
    assert runtime_of(app).store.get_entry(valid[0]).status == "republished"
    listed = cli("list")
    assert [line.split()[:3] for line in listed.output.splitlines()[1:]] == [["2", "close", "done"],
                                                                             ["1", "republish", "done"]]
    with runtime_of(app).engine.connect() as conn:
        actors = set(conn.execute(select(Action.actor).where(Action.action.like("bulk_%"))).scalars())
    assert actors == {ACTOR}


def test_start_without_wait_leaves_the_job_to_the_dashboard_which_runs_it(cli, app, nats_server):
    entry = support.dead_letter(app, 1, payload=VALID)
    made = cli("start", "close", "--id", str(entry), "--note", "duplicate")
    assert made.exit_code == 0, made.output
    assert made.output.startswith("Made job 1: bulk close of 1 (1 selected entry). The dashboard runs it")
    support.wait_for(lambda: jobs.job_status(runtime_of(app), 1, limit=0)["state"] == "done",
                     message="the dashboard's runner to run the job the command made")
    assert runtime_of(app).store.get_entry(entry).status == "closed"


def test_bad_requests_are_one_line_and_exit_code_two(cli, app):
    entry = support.dead_letter(app, 1, payload=VALID)
    for args, sentence in [
            (("start", "close", "--id", str(entry), "--subject", "orders.*"), "either by --id or by filters"),
            (("start", "close"), "by --id or by at least one filter (--status open for every open entry)"),
            (("start", "patch", "--subject", "orders.*"), "A patch job needs --patch-file"),
            (("start", "close", "--job", "7:lost"), "job '7:lost' is not valid"),
            (("start", "close", "--job", "7"), "job 7 is not a bulk job"),
            (("show", "99"), None)]:
        result = cli(*args)
        assert result.exit_code == (1 if sentence is None else 2), (args, result.output)
        assert sentence is None or sentence in result.output, (args, result.output)
    assert cli("cancel", "99").exit_code == 1


def test_a_selection_that_matches_no_entry_is_exit_code_one_as_no_such_entry_is(cli, app):
    """`jobs start close --id 99999` exited 2, a usage error, where `entries close 99999` exits 1:
    the request is right, and there is nothing it can be done to (docs/cli.md). Dry run or not."""
    support.dead_letter(app, 1, payload=VALID)
    assert app.test_cli_runner().invoke(args=["entries", "close", "99999"]).exit_code == 1
    for args in (("--id", "99999"), ("--subject", "billing.*"), ("--id", "99999", "--dry-run")):
        result = cli("start", "close", *args)
        assert result.exit_code == 1, (args, result.output)
        assert result.output.strip().splitlines() == ["Error: No entries match; nothing to do."], result.output
    with runtime_of(app).engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Job)).scalar_one() == 0


def test_a_patch_job_from_a_file_and_a_cancel_of_a_finished_job(cli, app, nats_server, tmp_path):
    support.make_orders_stream(nats_server.url)
    [entry] = support.dead_letter_orders(app, nats_server.url, [INVALID])
    patch = tmp_path / "patch.json"
    patch.write_text('[{"op": "add", "path": "/customer_id", "value": "c-9"}]')
    ran = cli("start", "patch", "--id", str(entry), "--patch-file", str(patch), "--wait")
    assert ran.exit_code == 0, ran.output
    [sent] = support.stream_messages(nats_server.url)
    assert json.loads(sent.data) == {"order_id": "o-2", "customer_id": "c-9"}
    assert cli("cancel", "1").output == "Job 1 had already finished; nothing was cancelled.\n"


def test_jobs_list_counts_every_item_so_its_columns_add_up_to_the_total(cli, app, monkeypatch):
    """A job cancelled after 190 of 1,672 read "190 0 0 1672": its 1,482 cancelled items were in
    no column of the list (jobs show and the API count them)."""
    from dlq_dashboard.access import visible

    job = {"id": 3, "action": "republish", "state": "cancelled", "done": 190, "failed": 0, "skipped": 0,
           "cancelled": 1_470, "pending": 12, "total": 1_672, "actor": "ops", "selection_text": "group 4"}
    monkeypatch.setattr(visible, "read_jobs", lambda *args, **kwargs: {"jobs": [job], "next_cursor": None})
    header, row = cli("list").output.splitlines()
    assert header.split()[:9] == ["ID", "ACTION", "STATE", "DONE", "FAILED", "SKIPPED", "CANCELLED", "PENDING", "TOTAL"]
    assert row.split()[:9] == ["3", "republish", "cancelled", "190", "0", "0", "1470", "12", "1672"]


@pytest.mark.slow
def test_a_command_of_its_own_runs_the_job_through_nats_by_itself(tmp_path, nats_server):
    """No dashboard running: ``--wait`` runs the job from the command, as the README says; with
    NATS down a republish job is not made at all."""
    support.make_orders_stream(nats_server.url)
    database = support.migrated_sqlite(tmp_path / "cli.sqlite3")
    engine = create_db_engine(database)
    entry = support.dead_letter(engine, 1, "orders.created", VALID)
    env = {**os.environ, "DATABASE_URL": database, "NATS_URL": nats_server.url, "SECRET_KEY": "cli-test",
           "PYTHONPATH": str(REPO)}
    command = [sys.executable, str(REPO / "app.py"), "jobs", "start", "republish", "--id", str(entry), "--wait"]
    # The command with NATS down waits out its connect timeout before it gives up: it runs beside
    # the other (it makes nothing: checked by the one job there is at the end).
    down = subprocess.Popen(command, cwd=tmp_path, env={**env, "NATS_URL": "nats://127.0.0.1:1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=support.ends_with_this_process())
    try:
        ran = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, ran.stderr
        assert "Job 1: finished: 1 done, 0 failed, 0 skipped, 0 to go, of 1." in ran.stdout
        assert [m.data for m in support.stream_messages(nats_server.url)] == [VALID]
        _, down_stderr = down.communicate(timeout=120)
    finally:
        if down.poll() is None:
            down.kill()
            down.communicate()
    assert down.returncode == 1 and "NATS is not reachable" in down_stderr, down_stderr
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Job)).scalar_one() == 1  # none made without NATS
    engine.dispose()


def test_start_wait_leaves_the_job_to_a_running_dashboard_which_runs_it_with_its_own_settings(
        app, make_app, settings, nats_server):
    """--wait took the job at once in the command's own process, with the command's settings: a
    repair there found no schema (the demo's live in the dashboard's process) and skipped every
    item the dashboard would have repaired. Here the command knows no schema; the dashboard's
    refuses the payload."""
    support.make_orders_stream(nats_server.url)
    [invalid] = support.dead_letter_orders(app, nats_server.url, [INVALID])
    command = make_app(settings=settings, schemas_dir=None)  # the same database and NATS, no schemas
    ran = command.test_cli_runner().invoke(args=["jobs", "start", "republish", "--id", str(invalid), "--wait"])
    assert ran.exit_code == 1, ran.output
    assert "finished: 0 done, 1 failed" in ran.output  # the dashboard's schema refused it
    assert support.stream_messages(nats_server.url) == []
    assert runtime_of(command).jobs._threads == {}  # the command ran nothing itself
