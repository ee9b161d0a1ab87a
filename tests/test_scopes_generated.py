"""Scopes, generated over every channel: entries inside a scope (``orders.>``) and outside it
(``billing.>``), their groups, jobs, audit records and saved views, then every GET rule of the
app's url_map (and every POST that names an entry, a job or a view, and the bulk routes) as a
scoped viewer, a scoped operator and a scoped token: an outside id answers as an id that does
not exist (the same status, the same body), no answer holds anything of an outside entry (its
subject, payload, error, note, a job over it, a view of it), no POST changes anything for an
outside entry, and the command line's --scope reads the same way. A route added later is walked
too (tests/test_visibility_generated.py's machinery)."""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import unquote_plus, urlencode

import pytest
from sqlalchemy import select

from dlq_dashboard.accounts import create_token, create_user
from dlq_dashboard.db.models import Alert, Entry, FailureGroup
from dlq_dashboard.entries.saved_views import save_view, share_view
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import parse_scopes
from dlq_dashboard.times import utcnow

from . import support
from .test_routes_roles import call, snapshot
from .test_visibility_generated import get_routes

pytestmark = pytest.mark.both_databases

INSIDE, OUTSIDE = "orders.created", "billing.zq7invoice"
#: Everything about the outside entries carries it: subject, payload, error, notes, a view's name.
MARK = "zq7"
UNKNOWN = 987654  # an id no entry, job or view has
SCOPES = parse_scopes(["orders.>"])


def _message(seq: int, subject: str, error: str, payload: bytes) -> StreamMessage:
    headers = support.dlq_headers(subject, Dlq_Reason="fatal", Dlq_Error=error)
    return StreamMessage(seq, f"dlq.{subject}", headers, payload, utcnow())


@pytest.fixture
def world(app):
    """Three entries inside and three outside (each side its own group), jobs over each side and
    over both, closes with notes, shared saved views of each side; scoped readers of each kind."""
    rt = runtime_of(app)
    bridge = rt.bridge
    for name, subjects in (("ORDERS", ["orders.>"]), ("BILLING", ["billing.>"])):
        bridge.call(lambda n=name, s=subjects: bridge.js.add_stream(name=n, subjects=s), timeout=5)
    ingest_dlq_batch(rt.engine, "DLQ", "e1", [
        *(_message(seq, INSIDE, "inside refused", b'{"side": "in"}') for seq in (1, 2, 3, 4, 5)),
        *(_message(seq, OUTSIDE, f"{MARK} refused", f'{{"side": "{MARK}-payload"}}'.encode())
          for seq in (11, 12, 13, 14)),
        # An inside entry's republish that failed again on an outside subject: its page, JSON and
        # list row named the outside entry ("failed again: entry N", its error) to inside readers.
        StreamMessage(15, f"dlq.{OUTSIDE}", {**support.dlq_headers(OUTSIDE, Dlq_Reason="fatal",
                                                                   Dlq_Error=f"{MARK} replay refused"),
                                             "Dlq-Replay-Of": "DLQ:1"}, b"{}", utcnow())])
    with rt.engine.connect() as conn:
        ids = dict(conn.execute(select(Entry.dlq_seq, Entry.id)).all())
        groups = dict(conn.execute(select(FailureGroup.subject, FailureGroup.id)).all())
    inside, outside = [ids[s] for s in (1, 2, 3, 4, 5)], [ids[s] for s in (11, 12, 13, 14)]
    admin, auth = app.test_client(), support.bearer(create_token(rt.engine, "world-admin", "admin"))
    for entry_id, note in ((inside[1], "inside note"), (outside[1], f"{MARK} note")):
        answer = admin.post(f"/api/entries/{entry_id}/close", json={"version": 1, "note": note}, headers=auth)
        assert answer.status_code == 200, answer.get_data(as_text=True)
    jobs = {}
    for side, body in (("inside", {"action": "close", "ids": [inside[2]], "note": "inside job"}),
                       ("outside", {"action": "close", "filter": {"subject": "billing.>"}, "note": f"{MARK} job"}),
                       ("both", {"action": "close", "ids": [inside[3], outside[3]], "note": "both job"})):
        answer = admin.post("/api/bulk", json=body, headers=auth)
        assert answer.status_code == 202, answer.get_data(as_text=True)
        jobs[side] = answer.get_json()["job"]
        support.jobs_settled(rt.engine)
    now = utcnow()
    # An alert of each side's group, failed (so "send again" would act on it).
    alerts = {}
    with rt.engine.begin() as conn:
        for side, subject in (("inside", INSIDE), ("outside", OUTSIDE)):
            alerts[side] = conn.execute(Alert.__table__.insert().values(
                event_id=f"{side}-event", url=f"https://hooks.example/{side}", event="group.new",
                group_id=groups[subject], body=json.dumps({"text": f"{side} {subject}"}), created_at=now, attempts=1,
                next_attempt_at=now, last_error="refused")).inserted_primary_key[0]
    views = {}
    for side, name, query in (("inside", "orders view", "subject=orders.%3E"),
                              ("outside", f"{MARK} billing view", "subject=billing.%3E")):
        views[side] = save_view(rt.engine, "world-admin", name, "list", query, now).id
        share_view(rt.engine, views[side], True)
    readers = {}
    for role in ("viewer", "operator"):
        create_user(rt.engine, f"scoped-{role}", support.PASSWORD, role, scopes=SCOPES)
        client = app.test_client()
        assert support.login(client, f"scoped-{role}", support.PASSWORD).status_code == 302
        readers[f"{role} session"] = {"client": client, "token": None, "role": role}
    readers["operator token"] = {"client": app.test_client(), "role": "operator",
                                 "token": create_token(rt.engine, "scoped-token", "operator", scopes=SCOPES)}
    return {"inside": inside, "outside": outside, "groups": {"inside": groups[INSIDE], "outside": groups[OUTSIDE]},
            "jobs": jobs, "views": views, "alerts": alerts, "readers": readers, "admin": auth}


# --- what counts as telling of an outside entry ------------------------------------------------------

_BASE64 = re.compile(rb"[A-Za-z0-9+/]{8,}={0,2}")
# Tokens that differ from one answer to the next whatever is asked (CSRF tokens, nonces).
_VOLATILE = re.compile(r"[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{10,}|nonce-[A-Za-z0-9+/=_-]+")


def tells(body: bytes) -> bool:
    """Whether ``body`` holds MARK: as text, URL-encoded, or in base64 (a payload_base64).

    A run of base64 counts only when it decodes to UTF-8 whole, as an encoded payload does, and
    the signed tokens are left out: random bytes hold a three-letter MARK now and then (a CSRF
    token's signature, new each second, decoded to "...zQ7..." in about 1 of 3,000 seconds)."""
    text = _VOLATILE.sub("TOKEN", body.decode("utf-8", "replace"))
    texts = [text, unquote_plus(text)]
    for run in _BASE64.findall(text.encode()):
        try:
            texts.append(base64.b64decode(run + b"=" * (-len(run) % 4)).decode("utf-8"))
        except ValueError:  # not base64, or not UTF-8 whole: not an encoded text
            pass
    return any(MARK in t.lower() for t in texts)


def test_the_mark_is_found_in_a_payloads_base64_and_not_in_a_signed_token():
    encoded = base64.b64encode(f'{{"side": "{MARK}-payload"}}'.encode()).decode()
    assert tells(f'{{"payload_base64": "{encoded}"}}'.encode())
    # A CSRF token whose signature happens to hold the mark's bytes: not something an entry told.
    signature = base64.urlsafe_b64encode(b"\x00" + MARK.encode() + bytes(16)).rstrip(b"=").decode()
    token = f"IjViZWQ5MGJhMmNlODg4Mzg5MzUxZjZhZjdlMGQyODljY2MwZWQ2ZTYi.a0tYnw.{signature}"
    assert MARK in base64.urlsafe_b64decode(signature + "==").decode("latin-1")
    assert not tells(f'<meta name="csrf-token" content="{token}">'.encode())


def outside_ids_in(body: bytes, world) -> list[str]:
    """An outside entry's, group's or job's id where a JSON answer lists one."""
    try:
        data = json.loads(body)
    except ValueError:
        return []
    found = []
    bad = {"entries": set(world["outside"]), "groups": {world["groups"]["outside"]},
           "jobs": {world["jobs"]["outside"], world["jobs"]["both"]}}

    def walk(value, key=None):
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, int) and (k == "entry_id" and v in bad["entries"] or k == "job_id" and v in bad["jobs"]):
                    found.append(f"{k}={v}")
                walk(v, k)
        elif isinstance(value, list):
            for item in value:
                if key in bad and isinstance(item, dict) and isinstance(item.get("id"), int) and item["id"] in bad[key]:
                    found.append(f"{key}[].id={item['id']}")
                walk(item, key)
    walk(data)
    return found



def same_answer(a, b, a_id: int, b_id: int) -> bool:
    """Whether two answers are the same but for the id asked for."""
    def norm(response):
        # The ids where an answer names them ("entry 7", "/entries/7", "entry_id": 7), not a "2" of
        # "htmx-2.0"; both ids in both answers, so a small id that also stands elsewhere in the
        # page (a group 1 beside "1 entry") is read alike in the two.
        text = _VOLATILE.sub("TOKEN", response.get_data().decode("utf-8", "replace"))
        for i in (a_id, b_id):
            text = re.sub(rf"(?<=[ /#=\"':]){i}(?!\w|\.\d)", "ID", text)
        return text
    return a.status_code == b.status_code and norm(a) == norm(b)


# --- the walk -----------------------------------------------------------------------------------------

PARAMS = {"entry_id": "outside", "job_id": "jobs", "view_id": "views", "group_id": "groups", "alert_id": "alerts",
          "action": None, "name": None}


def filled(rule, world, which: str) -> str | None:
    """The rule with its id parameter given an ``inside``, ``outside`` or the UNKNOWN id."""
    path = rule.rule
    for name in rule.arguments:
        if name not in PARAMS:
            pytest.fail(f"{rule.rule}: no {name} to fill in; give the world one (PARAMS)")
        if name == "action":
            value = "republish"  # a list row's action (web/row_actions.py): not an id
        elif name == "name":
            value = "scoped-viewer"  # an account (the admin's pages: an admin is never scoped)
        elif which == "unknown":
            value = UNKNOWN
        elif name in ("group_id", "alert_id"):
            value = world[PARAMS[name]][which]
        elif name == "entry_id":
            value = world[which][0]
        elif name == "job_id":
            value = world["jobs"]["both" if which == "outside" else "inside"]
        else:
            value = world["views"][which]
        path = re.sub(rf"<(?:\w+:)?{name}>", str(value), path)
    return path


def variants(world, rule) -> list[dict]:
    """The query strings every URL is read with: none, and every filter that could reach outside
    (a bulk preview's too: it selects by them, by=filter)."""
    found = [{}, {"status": ""}, {"subject": "billing.>"}, {"q": "refused"}, {"group": world["groups"]["outside"]},
             {"group": world["groups"]["inside"]}, {"entry": world["outside"][1]}, {"job": world["jobs"]["outside"]},
             {"fold": "0"}, {"state": "done"}]
    if rule.rule == "/bulk/preview":  # each filter as the selection of a close, then of a republish
        return [{"by": "filter", "action": "close", **args} for args in found] + \
            [{"by": "filter", "action": "republish", "status": ""}, {"ids": f"{world['outside'][0]}:1"}]
    return found


def _get(reader, url: str, htmx: bool = False):
    return call(None, reader["client"], "GET", url, token=reader["token"], htmx=htmx)


def test_an_admin_sees_everything_the_scoped_readers_must_not(app, world):
    """The world holds what the scoped readers' test looks for (else that test proves nothing)."""
    admin = app.test_client()
    for url in ("/api/entries", "/api/groups", "/api/jobs", "/api/audit", "/api/export.json", "/groups?status=", "/views",
                f"/entries/{world['outside'][0]}", f"/jobs/{world['jobs']['outside']}"):
        assert tells(admin.get(url, headers=world["admin"]).get_data()), url


@pytest.mark.parametrize("who", ["viewer session", "operator session", "operator token"])
def test_no_get_route_tells_a_scoped_reader_of_an_outside_entry(app, world, who):
    reader = world["readers"][who]
    problems, answered = [], {}
    for rule in get_routes(app):
        role = getattr(app.view_functions[rule.endpoint], "required_role", None)
        if role == "operator" and reader["role"] == "viewer" or role == "admin":
            continue
        for which in ("inside", "outside") if rule.arguments else ("",):
            path = filled(rule, world, which) if which else rule.rule
            for args in variants(world, rule):
                url = f"{path}?{urlencode(args)}" if args else path
                for htmx in (False, True):
                    response = _get(reader, url, htmx)
                    answered.setdefault(rule.rule, set()).add(response.status_code)
                    body = response.get_data()
                    if tells(body) or (bad := outside_ids_in(body, world)):
                        problems.append(f"{url}{' (htmx)' if htmx else ''}: {MARK if tells(body) else bad}")
                    if args.get("group") == world["groups"]["outside"]:  # an outside group is an unknown one
                        unknown = _get(reader, f"{path}?{urlencode({**args, 'group': UNKNOWN})}", htmx)
                        if response.status_code != unknown.status_code or (
                                unknown.status_code == 400 and b"is not a failure group" not in body):
                            problems.append(f"{url}: {response.status_code}, not as an unknown group "
                                            f"({unknown.status_code})")
                    if which == "outside" and "view_id" not in rule.arguments:
                        unknown = _get(reader, f"{filled(rule, world, 'unknown')}?{urlencode(args)}", htmx)
                        if not same_answer(response, unknown, int(re.findall(r"\d+", path)[0]), UNKNOWN):
                            problems.append(f"{url}: {response.status_code}, not as an unknown id "
                                            f"({unknown.status_code})")
        if role in (None, "viewer", "operator"):
            assert answered[rule.rule] & {200, 503}, f"{rule.rule} answered {answered[rule.rule]} to {who}"
    # An inside entry that a job over both sides closed: its page named that job ("job 3", a 404).
    both, closed = world["jobs"]["both"], world["inside"][3]
    for url in (f"/api/entries/{closed}", f"/entries/{closed}"):
        body = _get(reader, url).get_data()
        if outside_ids_in(body, world) or f"/jobs/{both}\"".encode() in body:
            problems.append(f"{url}: names job {both}")
    assert not problems, f"what {who} is told of entries outside its scopes:\n" + "\n".join(problems)


def _posts(app):
    """Every POST rule that names an entry, a job or a view, and the bulk routes."""
    for rule in app.url_map.iter_rules():
        if "POST" in rule.methods and (rule.arguments or rule.rule in ("/api/bulk", "/bulk", "/bulk/preview")):
            yield rule


def _bulk_bodies(world, entry_id: int):
    return [{"action": "close", "ids": [entry_id]}, {"action": "republish", "ids": [entry_id]},
            {"action": "close", "filter": {"subject": "billing.>"}}, {"action": "close", "filter": {"q": MARK}}]


def _post(reader, path: str, body: dict | None = None, htmx: bool = False):
    client, token = reader["client"], reader["token"]
    headers = {"HX-Request": "true"} if htmx else {}
    if token:
        headers.update(support.bearer(token))
    if path.startswith("/api/"):
        if not token:
            headers["X-CSRFToken"] = support.csrf_token(client, "/")
        return client.post(path, json={"version": 1, "note": "x", **(body or {})}, headers=headers)
    data = {"version": "1", "note": "x"}
    if body:
        data["action"] = body["action"]
        if "ids" in body:
            data["ids"] = [str(i) for i in body["ids"]]
        else:
            data.update({"by": "filter", **body["filter"]})
    if not token:
        data["csrf_token"] = support.csrf_token(client, "/")
    return client.post(path, data=data, headers=headers)


@pytest.mark.parametrize("who", ["operator session", "operator token"])
def test_no_post_acts_on_an_outside_entry_and_each_answers_as_for_an_unknown_one(app, world, who):
    reader = world["readers"][who]
    problems = []
    before = snapshot(app)
    for rule in _posts(app):
        if getattr(app.view_functions[rule.endpoint], "required_role", None) == "admin":
            continue  # the accounts' pages: no entry, group or job in them, and no scoped admin
        if rule.arguments:
            attempts = [(filled(rule, world, "outside"), filled(rule, world, "unknown"), None)]
        else:
            attempts = [(rule.rule, rule.rule, body) for body in _bulk_bodies(world, world["outside"][0])]
        for outside_path, unknown_path, body in attempts:
            for htmx in (False, True):
                response = _post(reader, outside_path, body, htmx)
                if tells(response.get_data()):
                    problems.append(f"POST {outside_path} {body or ''}: tells {MARK}")
                if rule.arguments:
                    unknown = _post(reader, unknown_path, body, htmx)
                    outside_id = int(re.findall(r"\d+", outside_path)[0])
                    if not same_answer(response, unknown, outside_id, UNKNOWN):
                        problems.append(f"POST {outside_path}: {response.status_code}, not as an unknown id "
                                        f"({unknown.status_code})")
                    elif response.status_code != 404 and rule.endpoint != "views.share":
                        problems.append(f"POST {outside_path}: {response.status_code}, not 404")
                elif response.status_code != 400:
                    problems.append(f"POST {outside_path} {body}: {response.status_code}, not 400 (nothing to do)")
    assert snapshot(app) == before, "a POST changed something for an outside entry"
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("who", ["operator session", "operator token"])
def test_a_scoped_operator_acts_on_an_inside_entry(app, world, who):
    reader = world["readers"][who]
    entry_id = world["inside"][0] if who == "operator session" else world["inside"][4]
    answer = _post(reader, f"/api/entries/{entry_id}/close")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert answer.get_json()["entry"]["status"] == "closed"
    # A bulk reopen by a filter that reaches both sides (closed entries) takes only the inside entries.
    answer = _post(reader, "/api/bulk", {"action": "reopen", "filter": {"status": "closed"}})
    assert answer.status_code == 202, answer.get_data(as_text=True)
    support.jobs_settled(runtime_of(app).engine)
    job = _get(reader, f"/api/jobs/{answer.get_json()['job']}").get_json()
    assert job["total"] >= 1 and not tells(json.dumps(job).encode())
    assert all(i["entry_id"] in world["inside"] for i in job["items"])


def test_the_scoped_readers_see_their_own_side(app, world):
    """Inside entries, groups, jobs and the shared view of their scope are there (the walk is real)."""
    reader = world["readers"]["viewer session"]
    listed = {e["id"] for e in _get(reader, "/api/entries?status=").get_json()["entries"]}
    assert listed == set(world["inside"])
    assert {g["id"] for g in _get(reader, "/api/groups?status=").get_json()["groups"]} == {world["groups"]["inside"]}
    assert {j["id"] for j in _get(reader, "/api/jobs").get_json()["jobs"]} == {world["jobs"]["inside"]}
    assert "orders view" in _get(reader, "/views").get_data(as_text=True)
    # Counts are of the inside entries only: five of the nine stored, by every way of counting.
    for url in ("/summary?status=", "/summary?status=open", "/summary?subject=billing.>"):
        assert "5 entries stored." in _get(reader, url, htmx=True).get_data(as_text=True), url
    assert sum(g["count"] for g in _get(reader, "/api/groups?status=").get_json()["groups"]) == 5
    assert _get(reader, "/api/entries?subject=billing.>&status=").get_json()["entries"] == []
    assert "4 new" in _get(reader, f"/entries/new?status=&after={world['inside'][0]}", htmx=True).get_data(as_text=True)
    assert "4 new" in _get(reader, f"/groups/new?status=any&after={world['inside'][0]}", htmx=True).get_data(as_text=True)
    newer = _get(reader, f"/entries/{world['inside'][4]}?status=").get_data(as_text=True)
    assert f"/entries/{world['inside'][3]}" in newer and f"/entries/{world['outside'][0]}" not in newer
    audit = _get(reader, "/api/audit?fold=0").get_json()["actions"]
    assert audit and {r["entry_id"] for r in audit if r["entry_id"]} <= set(world["inside"])


def test_the_command_line_reads_as_a_scoped_user_with_scope(app, world):
    runner = app.test_cli_runner()
    for args in (["entries", "list", "--json", "--status", "closed"], ["entries", "export", "--format", "ndjson"],
                 ["entries", "show", str(world["inside"][0]), "--json"]):
        scoped = runner.invoke(args=[*args, "--as", "viewer", "--scope", "orders.>"])
        assert scoped.exit_code == 0, scoped.output
        assert not tells(scoped.stdout_bytes)
        assert tells(runner.invoke(args=[a for a in args if a != str(world["inside"][0])] +
                                   ([str(world["outside"][0])] if "show" in args else [])).stdout_bytes)
    hidden = runner.invoke(args=["entries", "show", str(world["outside"][0]), "--as", "viewer", "--scope", "orders.>"])
    unknown = runner.invoke(args=["entries", "show", str(UNKNOWN), "--as", "viewer", "--scope", "orders.>"])
    assert hidden.exit_code == unknown.exit_code != 0
    assert hidden.output.replace(str(world["outside"][0]), "ID") == unknown.output.replace(str(UNKNOWN), "ID")
    refused = runner.invoke(args=["entries", "list", "--scope", "orders.>"])
    assert refused.exit_code == 2 and "an admin is never scoped" in refused.output
