"""What a viewer may see, generated over every channel: a database holding masked values in every
place one can hide (payload, headers, error, schema errors, a close note, a patch's values, job
results, a republish and its replay, a job's filters and search, the alerts' bodies, and the
audit record, note and group of an entry the retention purge removed), then every
GET route of the app's url_map, the exports, the alert bodies and the command line's reading
commands, as a viewer: no byte a viewer gets holds one of the values (in any case, JSON-, HTML-,
URL- or base64-encoded). A route or a command added later is walked too, or fails here."""

from __future__ import annotations

import base64
import html
import dataclasses
import gzip
import json
import re
from urllib.parse import unquote_plus, urlencode

import pytest
from datetime import timedelta

from sqlalchemy import select, update

from dlq_dashboard.accounts import create_token
from dlq_dashboard.actions.purge import purge_entries
from dlq_dashboard.alerts.outbox import AlertRule
from dlq_dashboard.db.models import Alert, Entry
from dlq_dashboard.entries.saved_views import save_view, share_view
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.masking import MASKED
from dlq_dashboard.times import utcnow
from dlq_dashboard.web.query_parameters import parameters_of, takes_key_fields

from . import support

EMAIL = "alice@example.com"        # payload /email
CARD = "CUST-SECRET-42"            # payload /card
HEADER = "zebrafrost"              # the X-Secret header
PATCHED = "bob@example.org"        # what a patch writes into /email
AGAIN = "again-secret@x.com"       # payload /customer/email of a payload that gives "customer" twice
SECRETS = (EMAIL, CARD, HEADER, PATCHED, AGAIN)
MASK = ("/email", "/card", "/customer/email", "X-Secret")

# Routes with no data of the entries (Flask's static files).
EXEMPT = {"static"}
# The command line: the commands that read entries (walked with --as viewer), and those that act
# (an operator's or an admin's tools, answering in what they changed); a command in neither fails.
READING = {("entries", "list"), ("entries", "show"), ("entries", "export"), ("groups", "list"), ("groups", "show"),
           ("jobs", "list"), ("jobs", "show")}
ACTING = {("entries", "republish"), ("entries", "close"), ("entries", "reopen"), ("purge",),
          *(("groups", name) for name in ("assign", "resolve", "ignore", "reopen", "note")),
          ("jobs", "start"), ("jobs", "cancel")}
ADMIN_GROUPS = {"users", "tokens"}  # accounts: names and roles, no entries


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    """The app fixture's settings with DLQ_MASK, a key field over the masked field and one over a
    field it leaves, a schema the masked card fails, and a webhook (so alerts are written)."""
    folder = support.orders_schema_folder(tmp_path, {
        "x-subjects": ["orders.*"], "type": "object",
        "properties": {"card": {"type": "string", "pattern": "^[0-9]+$"}}})
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url, mask=MASK,
                                 list_fields=(("Email", "/email"), ("Order", "/order_id")), schemas_dir=folder,
                                 webhook_urls=("http://127.0.0.1:9/hook",))


def _payload(order_id: int) -> bytes:
    return json.dumps({"order_id": order_id, "email": EMAIL, "card": CARD}).encode()


def _message(seq: int, *, schema: bool = True, **extra: str) -> StreamMessage:
    headers = support.dlq_headers("orders.created", **{
        "Dlq_Reason": "schema_invalid" if schema else "fatal", "X_Secret": HEADER,
        "Dlq_Error": f"no account for {EMAIL}, card {CARD}, rejected by {HEADER}",
        **({"Dlq_Schema_Errors": json.dumps([{"path": "/card", "message": f"'{CARD}' does not match '^[0-9]+$'"}])}
           if schema else {}),
        **extra})
    return StreamMessage(seq, "dlq.orders.created", headers, _payload(seq), utcnow())


@pytest.fixture
def world(app, nats_server):
    """Entries, a republish and its replay, a closed entry, three jobs and the alerts, all quoting
    the masked values; the ids of each kind."""
    rt = runtime_of(app)
    support.make_orders_stream(nats_server.url)
    rule = AlertRule.from_settings(rt.settings)
    # Entry 6 fails without schema errors: its group's text (and so its alert) is its error.
    # Entry 7's payload is gzip bytes no header declares: its masked values are inside them, shown
    # decompressed (to whoever may read them), and quoted by its error.
    zipped = dataclasses.replace(_message(7), data=gzip.compress(_payload(7)))
    # Entry 8's payload gives "customer" twice: a reader taking the last value finds no
    # /customer/email to mask, and the first is still in its bytes.
    repeated = dataclasses.replace(_message(8, schema=False, Dlq_Error=f"rejected by {HEADER} gateway"),
                                   data=b'{"customer": {"email": "%s"}, "order_id": "order-8", "customer": null}'
                                   % AGAIN.encode())
    # Entry 9's payload is not UTF-8: hidden whole, though a database reads its JSON.
    latin = dataclasses.replace(_message(9, schema=False, Dlq_Error=f"rejected by {HEADER} gateway"),
                                data=b'{"order_id": "order-9", "note": "caf\xe9"}')
    # Entry 10 is closed with a note and purged at the end: its audit record, its group's text and
    # notes stay, and no entry is left to mask them with. Nothing else selects it (no email).
    purged = dataclasses.replace(_message(10, schema=False, Dlq_Error=f"card {CARD} refused at {HEADER}"),
                                 data=json.dumps({"order_id": 10, "card": CARD}).encode())
    ingest_dlq_batch(rt.engine, "DLQ", "e1", [*(_message(seq) for seq in (1, 2, 3, 4)),
                                              _message(6, schema=False, Dlq_Error=f"rejected by {HEADER} gateway"),
                                              zipped, repeated, latin, purged],
                     alerts=rule)
    # Entry 10's alert was raised before DLQ_MASK was set (a rule without it): its body, stored with
    # the header's value in the group's key, is sent under the mask in force.
    ingest_dlq_batch(rt.engine, "DLQ", "e1", [_message(10, schema=False, Dlq_Error=f"refused at {HEADER} desk")],
                     alerts=dataclasses.replace(rule, mask=()))
    ids = _ids_by_seq(rt.engine)
    operator, auth = app.test_client(), support.bearer(create_token(rt.engine, "world-operator", "operator"))
    answer = operator.post(f"/api/entries/{ids[10]}/close", json={"version": 1, "note": f"{CARD} is {HEADER}'s"},
                           headers=auth)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    # A forced republish of entry 2 (the schema refuses the card), and the message it became
    # failing again: a replay whose error quotes the email.
    answer = operator.post(f"/api/entries/{ids[2]}/republish", json={"version": 1, "force": True},
                           headers=auth)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    ingest_dlq_batch(rt.engine, "DLQ", "e1", [_message(5, Dlq_Replay_Of="DLQ:2",
                                                       Dlq_Error=f"still no account for {EMAIL}")], alerts=rule)
    ids = _ids_by_seq(rt.engine)
    answer = operator.post(f"/api/entries/{ids[3]}/close", json={"version": 1, "note": f"called {EMAIL} about it"},
                           headers=auth)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    jobs = []
    for body in (
            # A patch by a key-field filter over the masked field: each item fails quoting the payload.
            {"action": "patch", "filter": {"field.Email": EMAIL, "status": "open"}, "only_valid": False,
             "patch": [{"op": "replace", "path": "/email", "value": PATCHED},
                       {"op": "replace", "path": "/shipping/city", "value": "x"}]},
            # A republish the schema refuses: the refusal quotes the card.
            {"action": "republish", "ids": [ids[1]]},
            # A close by a search for the email, its note quoting it (the job's and its audit record's).
            {"action": "close", "filter": {"q": EMAIL}, "note": f"tidied: {EMAIL} called"},
            # A repair by the schema of the entries by the masked field (its reasons name places):
            # the republished one (the others are closed by now, which a repair cannot change).
            {"action": "repair", "filter": {"field.Email": EMAIL, "status": "republished"}}):
        answer = operator.post("/api/bulk", json=body, headers=auth)
        assert answer.status_code == 202, answer.get_data(as_text=True)
        jobs.append(answer.get_json()["job"])
        support.jobs_settled(rt.engine)
    # Triage: a note and a state change's note on every group, each quoting masked values.
    groups = sorted(g["id"] for g in operator.get("/api/groups", headers=auth).get_json()["groups"])
    for group_id in groups:
        answer = operator.post(f"/api/groups/{group_id}/notes", json={"text": f"the customer {EMAIL} again"},
                               headers=auth)
        assert answer.status_code == 201, answer.get_data(as_text=True)
        answer = operator.post(f"/api/groups/{group_id}/state", headers=auth, json={
            "version": 1, "state": "investigating", "assignee": "ops", "note": f"card {CARD} via {HEADER}"})
        assert answer.status_code == 200, answer.get_data(as_text=True)
    # Shared views an admin saved by a search for the email and by the hidden key field's value:
    # their links and filters would name them on /views and each page's views bar.
    for name, query in (("by search", f"q={EMAIL}"), ("by key field", f"field.Email={EMAIL}")):
        share_view(rt.engine, save_view(rt.engine, "world-admin", name, "list", urlencode(dict([query.split("=")])),
                                        utcnow()).id, True)
    # Entry 10, resolved two days ago, goes in a purge of what was resolved more than a day ago.
    with rt.engine.begin() as conn:
        conn.execute(update(Entry).where(Entry.id == ids[10]).values(updated_at=utcnow() - timedelta(days=2)))
    assert purge_entries(rt, older_than=86400, actor="world").total == 1
    # A list row's actions (/entries/<id>/row/<action>): the confirmation of each.
    return {"entry_id": sorted(i for seq, i in ids.items() if seq != 10), "job_id": jobs, "group_id": groups,
            "action": ["republish", "close"], "purged_id": [ids[10]]}


def _ids_by_seq(engine) -> dict[int, int]:
    with engine.connect() as conn:
        return dict(conn.execute(select(Entry.dlq_seq, Entry.id).where(Entry.dlq_stream == "DLQ")).all())


# --- what counts as a leak --------------------------------------------------------------------------

_BASE64 = re.compile(rb"[A-Za-z0-9+/]{16,}={0,2}")


def leaks(body: bytes, headers=()) -> set[str]:
    """The secrets ``body`` (and the response's headers) hold, in any case and encoding."""
    texts = [body.decode("utf-8", "replace"), " ".join(f"{k}: {v}" for k, v in headers)]
    for run in _BASE64.findall(body):
        try:
            texts.append(base64.b64decode(run + b"=" * (-len(run) % 4)).decode("utf-8", "replace"))
        except ValueError:
            pass
    texts += [html.unescape(t) for t in texts] + [unquote_plus(t) for t in texts]
    found = set()
    for text in texts:
        low = text.lower()
        for secret in SECRETS:
            forms = {secret.lower(), json.dumps(secret)[1:-1].lower(), html.escape(secret).lower()}
            if any(f in low for f in forms):
                found.add(secret)
    return found


# --- the routes ------------------------------------------------------------------------------------

def get_routes(app):
    """Every GET rule of the app (but EXEMPT): a route added later is walked too."""
    return [rule for rule in app.url_map.iter_rules() if "GET" in rule.methods and rule.endpoint not in EXEMPT]


def urls(rule, world) -> list[str]:
    """The rule with each path parameter filled with every id of its kind made; a parameter of
    a kind not made fails (give the world one and its ids)."""
    paths = [rule.rule]
    for name in rule.arguments:
        if name not in world:
            pytest.fail(f"{rule.rule}: no {name} to fill in; make one in the world fixture and name it there")
        paths = [re.sub(rf"<(?:\w+:)?{name}>", str(value), p) for p in paths for value in world[name]]
    return paths


def variants(world) -> list[dict]:
    """The query strings each URL is read with: none, and the narrowings the pages' links use."""
    found = [{}, {"status": ""}, {"state": "failed"}, {"fold": "0"}]
    found += [{"job": job} for job in world["job_id"]]
    found += [{"entry": e} for e in world["entry_id"] + world["purged_id"]]
    return found


def test_operators_see_every_secret_where_it_was_hidden(app, world):
    """The world holds what the viewer's test looks for (else that test proves nothing)."""
    operator = support.logged_in(app, "operator")
    jobs = [operator.get(f"/api/jobs/{j}").get_data() for j in world["job_id"]]
    patch_job, republish_job, search_job = (leaks(b) for b in jobs[:3])
    assert {EMAIL, PATCHED} <= patch_job and CARD in republish_job and EMAIL in search_job
    replayed = world["entry_id"][1]
    assert f"still no account for {EMAIL}" in operator.get(f"/entries/{replayed}").get_data(as_text=True)
    assert EMAIL in leaks(operator.get(f"/api/audit?job={world['job_id'][2]}").get_data())
    assert HEADER in leaks(operator.get("/api/groups").get_data())
    for group_id in world["group_id"]:
        assert {EMAIL, CARD, HEADER} <= leaks(operator.get(f"/groups/{group_id}").get_data())
        assert {EMAIL, CARD} <= leaks(operator.get(f"/api/groups/{group_id}").get_data())


def test_no_viewer_visible_byte_of_any_get_route_holds_a_masked_value(app, world):
    viewer = support.logged_in(app, "viewer")
    found, answered = {}, {}
    for rule in get_routes(app):
        role = getattr(app.view_functions[rule.endpoint], "required_role", None)
        for path in urls(rule, world):
            for args in variants(world):
                url = f"{path}?{urlencode(args)}" if args else path
                for headers in ({}, {"HX-Request": "true"}):
                    response = viewer.get(url, headers=headers)
                    body = response.get_data()
                    answered.setdefault(rule.rule, set()).add(response.status_code)
                    if secrets := leaks(body, response.headers.items()):
                        seen = found.setdefault(rule.rule, {"secrets": set(), "first": url})
                        seen["secrets"] |= secrets
        if role in (None, "viewer"):
            # Walked, not skipped: the viewer's route answered with its data at least once.
            assert answered[rule.rule] & {200, 503}, f"{rule.rule} answered {answered[rule.rule]} to a viewer"
    assert not found, "masked values a viewer reads:\n" + "\n".join(
        f"{rule}: {sorted(seen['secrets'])} (first at {seen['first']})" for rule, seen in sorted(found.items()))


_TOKEN = re.compile(r"[\w-]{20,}\.[\w-]{4,}\.[\w-]{20,}")  # a session's CSRF token, signed with its second


def test_no_key_field_filter_tells_a_viewer_a_value_they_read_as_dots(app, world):
    """A key field a viewer reads "•••" (its payload hidden whole: a key given twice, bytes that are
    not UTF-8) tells them nothing through a filter: every GET route taking ``field.<label>``
    answers its value as it answers a value no entry has (the value itself taken out)."""
    viewer, operator = support.logged_in(app, "viewer"), support.logged_in(app, "operator")
    seen = {e["id"]: e["fields"] for e in viewer.get("/api/entries?status=&limit=500").get_json()["entries"]}
    told = {(label, value) for e in operator.get("/api/entries?status=&limit=500").get_json()["entries"]
            for label, value in e["fields"].items() if value is not None and seen[e["id"]][label] == MASKED}
    assert told >= {("Order", "order-8"), ("Order", "order-9")}, told  # the world holds what this test looks for
    rules = [rule for rule in get_routes(app)
             if takes_key_fields(parameters_of(rule.endpoint, rule.rule) or ())]
    assert {"/api/entries", "/api/export.csv", "/api/summary", "/api/groups", "/"} <= {r.rule for r in rules}
    found = []
    for rule in rules:
        for path in urls(rule, world):
            for label, value in sorted(told):
                def answer(wanted: str) -> tuple[int, str]:
                    response = viewer.get(f"{path}?{urlencode({f'field.{label}': wanted, 'status': ''})}")
                    return response.status_code, _TOKEN.sub("TOKEN", response.get_data(as_text=True)
                                                             .replace(wanted, "VALUE"))
                if answer(value) != answer("no-such-value"):
                    found.append(f"{path}?field.{label}={value}")
    assert not found, f"key-field filters that find what a viewer reads as dots: {found}"


def test_no_alert_body_holds_a_masked_value(app, world):
    """A chat channel is read as a viewer reads: every body as sent (each tried once by the app's
    sender, which stores it so), one raised before the mask too."""
    engine = runtime_of(app).engine

    def tried():
        with engine.connect() as conn:
            return all(conn.execute(select(Alert.attempts)).scalars())
    support.wait_for(tried, timeout=30, message="every alert to be tried")
    with engine.connect() as conn:
        bodies = list(conn.execute(select(Alert.body)).scalars())
    assert bodies, "the world raised no alert"
    assert not [b for b in bodies if leaks(b.encode() if isinstance(b, str) else b)]


def _commands(group, path=()):
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from _commands(command, path + (name,))
        else:
            yield path + (name,), command


def test_no_output_of_the_command_line_read_as_a_viewer_holds_a_masked_value(app, world):
    runner = app.test_cli_runner()
    found = {}
    for path, command in _commands(app.cli):
        if path[0] in ADMIN_GROUPS or path in ACTING:
            continue
        assert path in READING, f"{' '.join(path)}: a new command; walk it here as a viewer (READING) or " \
                                f"say it acts (ACTING)"
        assert "as_role" in {p.name for p in command.params}, f"{' '.join(path)} cannot read as a viewer"
        calls = {("entries", "list"): [[], ["--json"]],
                 ("entries", "show"): [[str(e), *flag] for e in world["entry_id"] for flag in ([], ["--json"])],
                 ("entries", "export"): [["--format", fmt] for fmt in ("json", "ndjson", "csv")],
                 ("groups", "list"): [[], ["--json"]],
                 ("groups", "show"): [[str(g), *flag] for g in world["group_id"] for flag in ([], ["--json"])],
                 ("jobs", "list"): [[], ["--json"]],
                 ("jobs", "show"): [[str(j), *flag] for j in world["job_id"] for flag in ([], ["--json"])]}[path]
        for args in calls:
            result = runner.invoke(args=[*path, *args, "--as", "viewer"])
            assert result.exit_code == 0, result.output
            if secrets := leaks(result.stdout_bytes + result.stderr_bytes):
                found[" ".join([*path, *args])] = sorted(secrets)
        # The same command as the admin it runs as by default shows them (the walk reads real data).
        assert leaks(runner.invoke(args=[*path, *calls[0]]).stdout_bytes)
    assert not found, f"masked values the command line shows a viewer: {found}"
