"""One rule for a query, generated over every GET route of app.url_map: a parameter that reads as
a misspelling of one the route takes is a 400 naming the one meant, on the JSON routes and the
pages alike; one that reads as none of them (a cache-buster, a client's own) is left out, as on
the list. "/api/alerts?stat=failed" and "/api/jobs?staus=failed" answered everything, as if
filtered. Each route's parameters are those web/query_parameters.py reads (the OpenAPI
document's for a JSON route), so a route added without them fails here."""

from __future__ import annotations

import re
from html import unescape

from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.web import params
from dlq_dashboard.web.query_parameters import parameters_of

from . import support


def misspelt(name: str) -> str:
    """``name`` with its middle letter doubled ("limit" -> "limmit"), as a hand types it."""
    middle = len(name) // 2
    return name[:middle] + name[middle] + name[middle:]


def said(response) -> str:
    """What a person reads of an answer: a JSON error's sentence, or a page's text."""
    if response.is_json:
        return str(response.get_json().get("error", ""))
    return unescape(response.get_data(as_text=True))


def routes(app, values: dict[str, object]):
    """(endpoint, path, the parameters it takes) for every GET route, each ``<argument>`` of its
    path written as ``values`` has it."""
    for rule in app.url_map.iter_rules():
        if "GET" not in rule.methods or rule.endpoint == "static":
            continue
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", lambda m: str(values[m.group(1)]), rule.rule)
        yield rule.endpoint, path, parameters_of(rule.endpoint, rule.rule)


def test_every_get_route_refuses_a_misspelt_parameter_and_names_the_one_meant(offline_app):
    app = offline_app
    rt = runtime_of(app)
    entry_id = support.dead_letter(rt.engine, 1, Dlq_Reason="fatal", Dlq_Error="boom")
    values = {"entry_id": entry_id, "group_id": rt.store.group_of(entry_id)[0], "action": "close",
              "job_id": jobs.create_job(rt, "close", actor="alice", ids=[entry_id], start=False)}
    client = support.logged_in(app, "admin")
    wrong, asked = [], 0
    for endpoint, path, known in routes(app, values):
        if known is None:
            wrong.append(f"{path} ({endpoint}) declares no query parameters (web/query_parameters.py PAGES)")
            continue
        plain = client.get(path).status_code
        answer = client.get(f"{path}?zz_unknown=1")
        if answer.status_code != plain:
            wrong.append(f"{path}?zz_unknown=1: {answer.status_code}, {plain} without it (it is left out)")
        cases = [(misspelt(name), name) for name in known if len(name) >= 3 and not name.startswith("field.")]
        # Another name of a parameter the route takes: a job's or an alert's state asked for as a status.
        if "state" in known and "status" not in known:
            cases.append(("staus", "state"))
        if "status" in known and "state" not in known:
            cases.append(("state", "status"))
        for given, meant in cases:
            asked += 1
            answer = client.get(f"{path}?{given}=1")
            sentence = f"{given!r} is not a parameter of this request: did you mean {meant!r}?"
            if answer.status_code != 400 or sentence not in said(answer):
                wrong.append(f"{path}?{given}=1: {answer.status_code}, not a 400 saying {sentence!r}")
    assert not wrong, "\n".join(wrong)
    assert asked > 100  # every route's parameters, the list's filters on a dozen of them


def test_htmx_and_a_forms_own_fields_are_left_out(offline_app):
    # htmx sends its own in headers (HX-Request, HX-Target); a form a page sends by GET carries
    # its CSRF field, and a client may add a cache-buster.
    client = support.logged_in(offline_app, "admin")
    for path in ("/jobs?state=running&csrf_token=x&_=1733390000", "/api/alerts?state=failed&_=1",
                 "/alerts?state=failed&csrf_token=x", "/api/jobs?limit=5&format=json"):
        answer = client.get(path, headers={"HX-Request": "true", "HX-Target": "jobs"})
        assert answer.status_code == 200, (path, said(answer)[:300])


def test_the_bulk_preview_by_get_refuses_a_misspelt_filter(offline_app):
    """GET /bulk/preview?stauts=open (an edited address) previewed, and Start took, every entry the
    other filters match, as if "stauts" were not there: it is a 400 naming "status", as on the list."""
    rt = runtime_of(offline_app)
    support.dead_letter(rt.engine, 1, Dlq_Reason="fatal")
    client = support.logged_in(offline_app, "operator")
    form = "by=filter&action=close&subject=orders.created"
    for given, meant in (("stauts", "status"), ("subjet", "subject"), ("only_vaild", "only_valid")):
        answer = client.get(f"/bulk/preview?{form}&{given}=open")
        assert answer.status_code == 400, said(answer)[:300]
        assert f"{given!r} is not a parameter of this request: did you mean {meant!r}?" in said(answer)
    # Its own fields, the list's filters and one that reads as none are taken as before.
    answer = client.get(f"/bulk/preview?{form}&status=open&only_valid=on&upto=99&_=1733390000")
    assert answer.status_code == 200 and "<strong>1</strong> entry" in said(answer), said(answer)[:300]


def test_the_summary_and_the_audit_declare_every_parameter_they_read(offline_app, tokens):
    """/api/summary reads the list's limit and cursor (a bad one is a 400, as on /api/entries) and
    /api/audit its items, but the OpenAPI document listed none of them, and the rule takes a
    route's parameters from it: "limmit" and "cursr" on the summary were left out without a word."""
    assert {"limit", "cursor"} <= set(parameters_of("api.list_summary", "/api/summary"))
    assert sorted(parameters_of("audit.api_audit", "/api/audit")) == sorted(params.AUDIT_PARAMETERS)
    client, viewer = offline_app.test_client(), support.bearer(tokens["viewer"])
    for path, given, meant in (("/api/summary", "limmit", "limit"), ("/api/summary", "cursr", "cursor"),
                               ("/api/audit", "itemss", "items")):
        answer = client.get(f"{path}?{given}=1", headers=viewer)
        assert answer.status_code == 400, (path, given, said(answer))
        assert f"{given!r} is not a parameter of this request: did you mean {meant!r}?" in said(answer)
    for path in ("/api/summary?limit=0", "/api/summary?cursor=zz", "/api/audit?job=1&items=maybe"):
        assert client.get(path, headers=viewer).status_code == 400, path  # read, so declared
    assert client.get("/api/summary?limit=1&cursor=ZTM", headers=viewer).status_code == 200
