"""`flask --app app entries ...`: the API's reads and actions on the server, through the same code,
audited as cli:<os user>."""

from __future__ import annotations

import getpass
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from dlq_dashboard.accounts import create_token
from dlq_dashboard.controls import shown
from dlq_dashboard.db.engine import create_db_engine
from dlq_dashboard.db.models import Action
from dlq_dashboard.masking import PAYLOAD_REPEATED
from dlq_dashboard.runtime import runtime_of

from . import support

REPO = Path(__file__).resolve().parent.parent
ACTOR = f"cli:{getpass.getuser()}"


@pytest.fixture
def cli(app):
    runner = app.test_cli_runner()
    return lambda *args, input=None: runner.invoke(args=["entries", *args], input=input)


@pytest.fixture
def api(app, tokens):
    client = app.test_client()
    return lambda path: client.get(path, headers=support.bearer(tokens["viewer"]))


def audit(engine, entry_id: int) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(select(Action.action, Action.actor).where(Action.entry_id == entry_id)
                                               .order_by(Action.id))]


@pytest.fixture
def three(app):
    engine = runtime_of(app).engine
    return [support.dead_letter(engine, 1, "orders.created", b'{"order": 1}', Dlq_Reason="fatal", Dlq_Error="boom"),
            support.dead_letter(engine, 2, "orders.updated", b'{"order": 2}', Dlq_Reason="fatal"),
            support.dead_letter(engine, 3, "payments.captured", b'{"pay": 3}', Dlq_Reason="max_deliveries")]


# --- reading -------------------------------------------------------------------------------------

def test_list_prints_a_table_and_its_json_is_the_apis(cli, api, three):
    table = cli("list", "--subject", "orders.*")
    assert table.exit_code == 0, table.output
    lines = table.output.strip().splitlines()
    assert lines[0].split()[:4] == ["ID", "STATUS", "VERSION", "SUBJECT"]
    assert [line.split()[0] for line in lines[1:]] == [str(three[1]), str(three[0])]
    as_json = cli("list", "--subject", "orders.*", "--reason", "fatal", "--json")
    assert json.loads(as_json.stdout) == api("/api/entries?subject=orders.*&reason=fatal").get_json()


def test_list_pages_with_the_apis_cursor(cli, three):
    first = json.loads(cli("list", "--limit", "2", "--json").stdout)
    assert [e["id"] for e in first["entries"]] == [three[2], three[1]] and first["next_cursor"]
    second = json.loads(cli("list", "--limit", "2", "--cursor", first["next_cursor"], "--json").stdout)
    assert [e["id"] for e in second["entries"]] == [three[0]] and second["next_cursor"] is None


def test_a_bad_filter_is_one_line_and_exit_code_2(cli, three):
    result = cli("list", "--since", "yesterday")
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "since" in result.output


def test_arguments_out_of_range_or_not_utf8_are_one_line_and_exit_code_2_never_a_traceback(app, cli, three, tmp_path):
    runner = app.test_cli_runner()
    for args in (["entries", "show", str(2**63)], ["entries", "close", "0"], ["groups", "show", str(2**63)],
                 ["jobs", "show", str(2**63)], ["jobs", "start", "close", "--id", "-5"],
                 ["entries", "close", str(three[0]), "--version", str(2**40)],
                 ["entries", "close", str(three[0]), "--note", "bad \udcff byte"],
                 ["entries", "list", "--subject", "a\udcff"], ["groups", "note", "1", "bad \udcff byte"],
                 ["entries", "export", "--format", "csv", "-o", str(tmp_path / "no-such-folder" / "x.csv")],
                 ["purge", "--older-than", "99999999999d", "--dry-run"], ["purge", "--older-than", "800000d"]):
        result = runner.invoke(args=args)
        assert result.exit_code == 2, (args, result.output, result.exception)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)
        assert "Traceback" not in result.output and result.output.strip(), args
    assert "is not UTF-8 text" in runner.invoke(args=["entries", "list", "--subject", "a\udcff"]).output
    assert "is not in the range 1<=x<=9223372036854775807" in runner.invoke(
        args=["entries", "show", str(2**63)]).output
    # The entries are as they were.
    assert [runtime_of(app).store.get_entry(i).status for i in three] == ["open"] * 3


def test_an_empty_payload_file_republishes_nothing(app, cli, nats_server, three):
    """`jq ... | flask entries republish N --payload-file -` with jq failing reads nothing."""
    support.make_orders_stream(nats_server.url)
    result = cli("republish", str(three[0]), "--payload-file", "-", input=b"")
    assert result.exit_code == 2 and "--payload-file <stdin> is empty; nothing was republished" in result.output
    assert support.stream_messages(nats_server.url) == []
    assert runtime_of(app).store.get_entry(three[0]).version == 1


@pytest.fixture
def keyed(make_app):
    """An app (nothing started) with key fields Customer and sku, the command line on it, an API
    client with a viewer's token, and entries of two customers."""
    app = make_app(list_fields=(("Customer", "/customer/id"), ("sku", "/items/0/sku")))
    rt = runtime_of(app)
    ids = [support.dead_letter(app, seq, payload=json.dumps({"customer": {"id": customer}, "items": [{"sku": sku}]})
                               .encode(), Dlq_Reason="fatal")
           for seq, (customer, sku) in enumerate((("C-42", "A-1"), ("C-7", "A-1"), ("C-42", "B-2"), ("a=b", "A-1")),
                                                 start=1)]
    runner, client = app.test_cli_runner(), app.test_client()
    token = create_token(rt.engine, "test-viewer", "viewer")
    yield (lambda *args: runner.invoke(args=["entries", *args]),
           lambda path: client.get(path, headers=support.bearer(token)), ids)


def test_list_and_export_filter_by_a_key_field_as_the_api_does(keyed):
    cli, api, ids = keyed
    listed = cli("list", "--field", "Customer=C-42", "--json")
    assert listed.exit_code == 0, listed.output
    assert [e["id"] for e in json.loads(listed.stdout)["entries"]] == [ids[2], ids[0]]
    assert json.loads(listed.stdout) == api("/api/entries?field.Customer=C-42").get_json()
    both = cli("list", "--field", "Customer=C-42", "--field", "sku=B-2", "--json")
    assert [e["id"] for e in json.loads(both.stdout)["entries"]] == [ids[2]]
    # Only the first '=' separates the label: the rest is the value.
    assert [e["id"] for e in json.loads(cli("list", "--field", "Customer=a=b", "--json").stdout)["entries"]] == [ids[3]]
    exported = cli("export", "--format", "ndjson", "--field", "sku=A-1", "--status", "open")
    assert exported.exit_code == 0, exported.output
    assert [json.loads(line)["id"] for line in exported.stdout.splitlines()] == [ids[3], ids[1], ids[0]]


@pytest.mark.parametrize("given, sentence", [
    (["--field", "nope=1"], "--field nope is not a key field: the key fields are Customer, sku"),
    (["--field", "Customer"], "--field 'Customer' is not LABEL=VALUE"),
    (["--field", "=C-42"], "--field '=C-42' is not LABEL=VALUE"),
    (["--field", "Customer=C-42", "--field", "Customer=C-7"], "field.Customer is given 2 times"),
])
def test_a_key_field_option_that_names_no_field_or_no_value_is_one_line_and_exit_code_2(keyed, given, sentence):
    cli, _, _ = keyed
    for command in ("list", "export"):
        result = cli(command, *given)
        assert result.exit_code == 2, (command, result.output)
        assert len(result.output.strip().splitlines()) == 1 and sentence in result.output, (command, result.output)


def test_show_is_the_apis_entry_and_an_unknown_id_is_exit_code_1(cli, api, three):
    shown = cli("show", str(three[0]), "--json")
    assert json.loads(shown.stdout) == api(f"/api/entries/{three[0]}").get_json()
    text = cli("show", str(three[0])).output
    assert "orders.created" in text and '{"order": 1}' in text and "boom" in text
    missing = cli("show", "999999")
    assert missing.exit_code == 1 and missing.output.strip() == "Error: There is no entry 999999."


def test_show_prints_a_gzip_payload_decompressed_as_the_entry_page_shows_it(app, cli):
    entry = support.dead_letter(runtime_of(app).engine, 9, payload=gzip.compress(b'{"order": 9}'))
    text = cli("show", str(entry)).output
    assert "(compressed: gzip bytes, " in text and "; shown decompressed, 12 bytes)\n{\"order\": 9}\n" in text
    assert "base64" not in text


# --- acting --------------------------------------------------------------------------------------

def test_close_and_reopen_act_on_the_current_version_audited_as_the_os_user(app, cli, three):
    engine = runtime_of(app).engine
    closed = cli("close", str(three[0]), "--note", "known issue", "--json")
    assert closed.exit_code == 0, closed.output
    entry = json.loads(closed.stdout)["entry"]
    assert (entry["status"], entry["version"], entry["close_note"]) == ("closed", 2, "known issue")
    assert "Reopened entry" in cli("reopen", str(three[0])).output
    assert audit(engine, three[0]) == [("close", ACTOR), ("reopen", ACTOR)]


def test_a_stale_version_is_refused_and_changes_nothing(app, cli, three):
    cli("close", str(three[1]))
    stale = cli("reopen", str(three[1]), "--version", "1")
    assert stale.exit_code == 1 and "version" in stale.output
    assert runtime_of(app).store.get_entry(three[1]).status == "closed"


def test_republish_publishes_once_to_the_original_subject(app, cli, nats_server, three, tmp_path):
    support.make_orders_stream(nats_server.url)
    edited = tmp_path / "fixed.json"
    edited.write_bytes(b'{"order": 1, "fixed": true}')
    done = cli("republish", str(three[0]), "--payload-file", str(edited))
    assert done.exit_code == 0, done.output
    assert f"Republished entry {three[0]} to orders.created" in done.output
    messages = support.stream_messages(nats_server.url)
    assert [m.data for m in messages] == [b'{"order": 1, "fixed": true}']
    again = cli("republish", str(three[0]), "--version", "1")  # what was seen before: refused
    assert again.exit_code == 1 and len(support.stream_messages(nats_server.url)) == 1
    assert audit(runtime_of(app).engine, three[0]) == [("republish", ACTOR)]


def test_the_same_republish_run_again_asks_for_again_before_sending_once_more(app, cli, nats_server, three):
    """Run again from the shell's history (or after a dropped connection), `entries republish N`
    sent the entry a second time without a word; the pages ask first."""
    support.make_orders_stream(nats_server.url)
    assert cli("republish", str(three[0])).exit_code == 0
    again = cli("republish", str(three[0]))
    assert again.exit_code == 1
    assert again.output.strip() == (f"Error: Entry {three[0]} was republished already (it is at version 2): this "
                                    "would send it once more. Run it with --again to, or with --version 2; nothing "
                                    "was republished.")
    assert len(support.stream_messages(nats_server.url)) == 1
    sent = cli("republish", str(three[0]), "--again")
    assert sent.exit_code == 0, sent.output
    assert len(support.stream_messages(nats_server.url)) == 2
    assert audit(runtime_of(app).engine, three[0]) == [("republish", ACTOR), ("republish", ACTOR)]


def test_republish_without_a_stream_for_the_subject_is_refused(cli, three):
    result = cli("republish", str(three[2]))  # no stream stores payments.>
    assert result.exit_code == 1 and "No stream stores subject payments.captured" in result.output


# --- export --------------------------------------------------------------------------------------

def test_export_streams_what_the_api_exports(cli, api, three, tmp_path):
    ndjson = cli("export", "--format", "ndjson", "--status", "open", "-o", str(tmp_path / "open.ndjson"))
    assert ndjson.exit_code == 0, ndjson.output
    assert (tmp_path / "open.ndjson").read_bytes() == api("/api/export.ndjson?status=open").get_data()
    csv = cli("export", "--format", "csv", "--subject", "orders.>")
    assert csv.stdout_bytes == api("/api/export.csv?subject=orders.>").get_data()
    assert cli("export", "--format", "xml").exit_code == 2


# --- a process of its own ------------------------------------------------------------------------

@pytest.mark.slow
def test_the_command_connects_to_nats_by_itself_and_acts(tmp_path, nats_server):
    """As the README says, in a fresh process: NATS from NATS_URL, nothing else started."""
    support.make_orders_stream(nats_server.url)
    database = support.migrated_sqlite(tmp_path / "cli.sqlite3")
    engine = create_db_engine(database)
    entry = support.dead_letter(engine, 1, "orders.created", b'{"order": 7}')
    engine.dispose()
    env = {**os.environ, "DATABASE_URL": database, "NATS_URL": nats_server.url, "SECRET_KEY": "cli-test",
           "PYTHONPATH": str(REPO)}
    flask = [sys.executable, "-m", "flask", "--app", "app", "entries"]

    def invoke(*args):
        return subprocess.run([*flask, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    # The command to a server that is not there waits out its connect timeout (5 s) before it
    # gives up: it runs beside the others (it changes nothing, and they change nothing it reads
    # before it gives up).
    down = subprocess.Popen([*flask, "republish", str(entry)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**env, "NATS_URL": "nats://127.0.0.1:1"},
                            preexec_fn=support.ends_with_this_process())
    try:
        listed = invoke("list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [e["id"] for e in json.loads(listed.stdout)["entries"]] == [entry]
        republished = invoke("republish", str(entry), "--json")
        assert republished.returncode == 0, republished.stderr
        answer = json.loads(republished.stdout)
        assert answer["entry"]["status"] == "republished" and answer["publish"]["stream"] == "ORDERS"
        assert [m.data for m in support.stream_messages(nats_server.url)] == [b'{"order": 7}']
        _, down_stderr = down.communicate(timeout=120)
    finally:
        if down.poll() is None:
            down.kill()
            down.communicate()
    # One line, as the README says: the bridge's own lines about the refused connection (and its
    # retry) were two more before it.
    assert down.returncode == 1
    assert down_stderr.splitlines() == ["Error: NATS is not reachable at nats://127.0.0.1:1; nothing was done."]


def test_the_cli_says_whether_no_dashboard_runs_or_its_bundled_nats_server_does_not_answer(tmp_path):
    """Without NATS_URL the admin commands reach the bundled nats-server of the dashboard running
    on the instance folder: the sentence tells a dashboard that is not running from a server that
    does not answer (one stopped or frozen under a running dashboard)."""
    from dlq_dashboard import create_app
    from dlq_dashboard.cli.output import CommandError, nats_connected

    from dataclasses import replace

    settings = replace(support.make_settings(tmp_path, connect_timeout=0.5), nats_urls=())
    app = create_app({"SETTINGS": settings, "TESTING": True})
    rt = runtime_of(app)
    try:
        with pytest.raises(CommandError) as none:
            with nats_connected(rt):
                pass
        assert str(none.value) == ("NATS is not reachable at the bundled nats-server: no dashboard runs on this "
                                   "instance folder (start it, or set NATS_URL); nothing was done.")
        (tmp_path / "instance").mkdir(exist_ok=True)
        (tmp_path / "instance" / "nats-server.url").write_text("nats://127.0.0.1:1\n")
        with pytest.raises(CommandError) as silent:
            with nats_connected(rt):
                pass
        assert str(silent.value) == ("NATS is not reachable at nats://127.0.0.1:1, the running dashboard's bundled "
                                     "nats-server, which does not answer; nothing was done.")
    finally:
        rt.stop()


def test_what_a_dead_letter_brings_is_printed_as_text_a_terminal_shows_not_obeys(app, cli):
    """An escape retitled and recoloured the terminal, a bell rang, U+202E showed "exe.gnp" as
    "png.exe": the commands printed a dead letter's error and payload as they came."""
    hostile = "bad \x1b]0;owned\x07 \x1b[31mred\x1b[0m \x08\r \u202egnp.exe"
    entry_id = support.dead_letter(runtime_of(app).engine, 9, "orders.created", hostile.encode(), Dlq_Reason="fatal",
                                   Dlq_Error=hostile)
    for args in (("show", str(entry_id)), ("list",), ("list", "--json")):
        result = cli(*args)
        assert result.exit_code == 0, result.output
        assert not set(result.output) & {"\x1b", "\x07", "\x08", "\r", "\u202e"}, (args, result.output)
    # The same text in a table as in the JSON, a colour's escape too (click.echo left colours out
    # when not writing to a terminal, so a table piped to a file read "bad  red").
    shown = cli("show", str(entry_id)).output
    assert "bad \\u001b]0;owned\\u0007 \\u001b[31mred\\u001b[0m \\u0008\\u000d \\u202egnp.exe" in shown
    assert "bad \\u001b]0;owned\\u0007 \\u001b[31mred\\u001b[0m " in cli("list").output  # (one line: the CR a blank)
    listed = json.loads(cli("list", "--json").output)  # JSON still, with the same text
    assert [e["error"] for e in listed["entries"] if e["id"] == entry_id] == [hostile]


def test_show_prints_the_entrys_notes_and_why_a_hidden_payload_is_hidden_as_the_api_says(make_app):
    app = make_app(mask=("/customer/email",))
    engine = runtime_of(app).engine
    repeated = support.dead_letter(engine, 1, payload=b'{"order_id":"dup-1","customer":{"email":"x@y"},"customer":null}')
    noted = support.dead_letter(engine, 2, payload=b'{"order_id": 2}', Dlq_Replay_Of="garbage\u202e",
                                Dlq_Failed_At="9999-12-31T23:59:60+14:00")
    runner, client = app.test_cli_runner(), app.test_client()
    api = support.bearer(create_token(engine, "test-viewer", "viewer"))
    for entry_id in (repeated, noted):
        notes = client.get(f"/api/entries/{entry_id}", headers=api).get_json()["notes"]
        assert notes, entry_id
        shown_ = runner.invoke(args=["entries", "show", str(entry_id), "--as", "viewer"])
        assert shown_.exit_code == 0, shown_.output
        lines = shown_.stdout.splitlines()
        # Each note a line, escaped as the command line writes text (controls.py shown).
        assert [line for line in lines if line.startswith("note:")] == [f"{'note:':<18}{shown(n)}" for n in notes]
        # --json is the API's, notes and all.
        as_json = runner.invoke(args=["entries", "show", str(entry_id), "--as", "viewer", "--json"])
        assert json.loads(as_json.stdout)["notes"] == notes
    lines = runner.invoke(args=["entries", "show", str(repeated), "--as", "viewer"]).stdout.splitlines()
    assert PAYLOAD_REPEATED in client.get(f"/api/entries/{repeated}", headers=api).get_json()["notes"]
    # The payload says why it is hidden, with the API's sentence, not a blank line.
    assert lines[lines.index("payload:") + 1] == f"(hidden) {PAYLOAD_REPEATED}"
    assert "x@y" not in "\n".join(lines)
    noted_lines = runner.invoke(args=["entries", "show", str(noted)]).stdout.splitlines()
    noted_notes = [line[18:] for line in noted_lines if line.startswith("note:")]
    assert ("Dlq-Replay-Of 'garbage\\u202e' is not <dlq stream>:<seq>, so it names no entry this one is a republish "
            "of; kept as given in the headers.") in noted_notes, noted_notes
    assert any(n.startswith("Dlq-Failed-At '9999-12-31T23:59:60+14:00' is a leap second") for n in noted_notes)
    assert "\u202e" not in "\n".join(noted_lines)
