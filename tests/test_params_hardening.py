"""One rule for odd parameters, everywhere: a value that is not one of the allowed ones, and a
single-valued parameter given twice, are a 400 with a sentence on the list page, the API, the
export and the command line alike (exit code 2), generated over the list's filters."""

from __future__ import annotations

import json
from html import unescape

import pytest
from werkzeug.datastructures import MultiDict

from dlq_dashboard.accounts import create_token
from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.entries.filters import FILTERS, encode_cursor
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases

#: Two good values for each of the list's parameters ("{group}" is a real group's id).
GOOD = {"status": ("open", "closed"), "subject": ("orders.created", "orders.*"), "stream": ("DLQ", "ORDERS"),
        "consumer": ("billing", "shipping"), "msg_id": ("ORD-1", "ORD-2"), "reason": ("fatal", "max_deliveries"), "group": ("{group}", "{group}"),
        "job": ("{job}", "{job}:pending"), "q": ("order", "customer"), "since": ("1h", "2026-11-29T10:00:00Z"), "until": ("2030-01-01T00:00:00Z", "7d"),
        "limit": ("1", "2"), "cursor": (encode_cursor(10), encode_cursor(20)), "source": ("default", "default")}
#: A value that is not one of the allowed ones, and what the sentence says of it.
BAD = {"status": ("bogus", "status 'bogus' is not valid: use one of open, republished, closed"),
       "group": ("abc", "group 'abc' is not a failure group"),
       "job": ("12:lost", "job '12:lost' is not valid: use a job's id from /jobs"),
       "subject": ("orders..x", "subject 'orders..x' is not a NATS subject"),
       "since": ("yesterday", "since 'yesterday' is not valid"),
       "until": ("soon", "until 'soon' is not valid"),
       "limit": ("lots", "limit 'lots' is not valid"),
       "cursor": ("zzz", "cursor 'zzz' is not valid"),
       "source": ("billing", "source 'billing' is not valid: use one of default")}
#: The places that take the list's filters; each answers with its own status and text.
CHANNELS = ("page", "api", "export", "cli-list", "cli-export")


def test_every_filter_of_the_list_is_in_the_generated_cases():
    assert {f.name for f in FILTERS if not f.family} | {"limit", "cursor"} == set(GOOD)


@pytest.fixture
def site(offline_app, auth, tokens):
    engine = runtime_of(offline_app).engine
    entry_id = support.dead_letter(engine, 1, Dlq_Reason="fatal", Dlq_Error="boom")
    group = runtime_of(offline_app).store.group_of(entry_id)[0]
    job = jobs.create_job(runtime_of(offline_app), "close", actor="alice", ids=[entry_id], start=False)
    return {"app": offline_app, "viewer": auth.client("viewer"), "token": tokens["viewer"], "group": group, "job": job}


def ask(site, channel: str, pairs: list[tuple[str, str]]) -> tuple[int, str]:
    """(status or exit code, the text a person reads) of the list's parameters through ``channel``."""
    pairs = [(k, v.format(group=site["group"], job=site["job"])) for k, v in pairs]
    if channel.startswith("cli"):
        command = ["entries", "list" if channel == "cli-list" else "export"]
        for name, value in pairs:
            command += [f"--{name.replace('_', '-')}", value]
        result = site["app"].test_cli_runner().invoke(args=command)
        return result.exit_code, result.output
    query = "&".join(f"{k}={v}" for k, v in pairs)
    if channel == "page":
        response = site["viewer"].get(f"/?{query}")
        return response.status_code, unescape(response.get_data(as_text=True))
    path = "/api/entries" if channel == "api" else "/api/export.json"
    response = site["app"].test_client().get(f"{path}?{query}", headers=support.bearer(site["token"]))
    body = response.get_data(as_text=True)
    return response.status_code, json.loads(body).get("error", "") if response.status_code == 400 else body


REFUSED = {"page": 400, "api": 400, "export": 400, "cli-list": 2, "cli-export": 2}
ANSWERED = {"page": 200, "api": 200, "export": 200, "cli-list": 0, "cli-export": 0}


@pytest.mark.parametrize("channel", CHANNELS)
def test_a_filter_given_twice_is_refused_with_a_sentence_everywhere(site, channel):
    for name, (first, second) in GOOD.items():
        if name == "cursor" and channel == "cli-export":
            continue  # the export has no --cursor option
        once = ask(site, channel, [(name, first)])
        assert once[0] == ANSWERED[channel], (name, channel, once)
        status, text = ask(site, channel, [(name, first), (name, second)])
        assert status == REFUSED[channel], (name, channel, status, text[:300])
        assert f"{name} is given 2 times (" in text and "give it once" in text, (name, channel, text[:300])


@pytest.mark.parametrize("channel", CHANNELS)
def test_a_value_that_is_not_allowed_is_refused_with_a_sentence_everywhere(site, channel):
    for name, (value, sentence) in BAD.items():
        if name == "cursor" and channel == "cli-export":
            continue
        status, text = ask(site, channel, [(name, value)])
        assert status == REFUSED[channel], (name, channel, status, text[:300])
        assert sentence in text, (name, channel, text[:300])


def test_a_group_that_does_not_exist_is_refused_and_one_that_does_lists_its_entries(site):
    client, group = site["viewer"], site["group"]
    assert client.get(f"/?group={group}").status_code == 200
    assert client.get("/groups?group=99999999").status_code == 400
    missing = client.get("/?group=99999999")
    assert missing.status_code == 400 and "group '99999999' is not a failure group" in unescape(
        missing.get_data(as_text=True))


def test_the_jobs_pages_and_the_other_pages_hold_to_the_rule(site):
    app, client = site["app"], site["viewer"]
    rt = runtime_of(app)
    entry_id = support.dead_letter(rt.engine, 2)
    job_id = jobs.create_job(rt, "close", actor="alice", ids=[entry_id], start=False)
    for path in (f"/jobs/{job_id}?state=bogus", f"/api/jobs/{job_id}?state=bogus", "/jobs?state=bogus",
                 "/api/jobs?state=bogus", "/audit?fold=maybe", "/api/audit?fold=maybe",
                 f"/entries/{entry_id}?status=bogus", "/summary?status=bogus", "/entries/new?after=1&status=bogus",
                 "/groups?status=bogus"):
        response = client.get(path)
        assert response.status_code == 400, (path, response.status_code)
        assert "is not valid: use one of" in unescape(response.get_data(as_text=True)), path
    for path in (f"/jobs/{job_id}?state=done&state=failed", "/jobs?state=running&state=finished",
                 f"/entries/{entry_id}?status=open&status=closed", "/audit?actor=a&actor=b", "/views?x=1&x=2"):
        response = client.get(path)
        assert response.status_code == 400 and "is given 2 times" in unescape(response.get_data(as_text=True)), path
    assert client.get(f"/jobs/{job_id}?state=pending").status_code == 200


def test_a_form_field_given_twice_is_refused_and_a_list_of_ids_is_not(site):
    app = site["app"]
    rt = runtime_of(app)
    entry_id = support.dead_letter(rt.engine, 3)
    operator = support.logged_in(app, "operator")
    token = support.csrf_token(operator, "/")
    twice = operator.post(f"/entries/{entry_id}/close", data=MultiDict([("version", "1"), ("version", "2"),
                                                                       ("note", "a"), ("csrf_token", token)]))
    assert twice.status_code == 400
    assert "version is given 2 times (&#39;1&#39;, &#39;2&#39;): give it once" in twice.get_data(as_text=True)
    assert rt.store.get_entry(entry_id).status == "open"
    ids = operator.post("/bulk/preview", data=MultiDict([("action", "close"), ("ids", str(entry_id)), ("ids", "1"),
                                                         ("csrf_token", token)]))
    assert ids.status_code == 200 and "<strong>2</strong> entries will be closed" in ids.get_data(as_text=True)


@pytest.mark.parametrize("path, query, meant", [
    ("/api/entries", "subjet=payments.>", "subject"),
    ("/api/entries", "staus=closed", "status"),
    ("/api/summary", "reasn=fatal", "reason"),
    ("/api/groups", "sourc=billing", "source"),
    ("/api/export.csv", "subjects=payments.>", "subject"),
])
def test_a_misspelt_parameter_of_the_lists_json_is_a_400_that_names_the_one_meant(site, path, query, meant):
    """Left out, "subjet=payments.>" answered every entry as if filtered: a script closing the ids
    it got would close all of them."""
    response = site["app"].test_client().get(f"{path}?{query}", headers=support.bearer(site["token"]))
    assert response.status_code == 400
    name = query.split("=")[0]
    assert response.get_json()["error"].startswith(
        f"{name!r} is not a parameter of this request: did you mean {meant!r}?")


@pytest.mark.parametrize("query, meant", [("Field.Customer=C-9", "field.Customer"),
                                          ("fields.Customer=C-9", "field.Customer"),
                                          ("customer=C-9", "field.Customer"), ("Customer=C-9", "field.Customer"),
                                          ("field.Customer=C-9&Field.Nope=x", "field.Nope")])
def test_a_key_field_filter_written_otherwise_is_a_400_that_names_the_one_meant(make_app, query, meant):
    """Left out, "?Field.Customer=C-9" answered every entry (3,088 of them) as if filtered."""
    app = make_app(list_fields=(("Customer", "/customer"),))
    support.dead_letter(app, 1, payload=b'{"customer": "C-9"}', Dlq_Reason="fatal")
    token = create_token(runtime_of(app).engine, "test-viewer", "viewer")
    for path in ("/api/entries", "/api/summary", "/api/groups", "/api/export.ndjson"):
        response = app.test_client().get(f"{path}?{query}", headers=support.bearer(token))
        assert response.status_code == 400, (path, response.get_data(as_text=True)[:200])
        assert f"did you mean {meant!r}?" in response.get_json()["error"]
    assert app.test_client().get("/api/summary?field.Customer=C-9", headers=support.bearer(token)).status_code == 200


@pytest.mark.parametrize("path, query, meant", [("/audit", "actr=admin", "actor"), ("/api/audit", "acton=close", "action"),
                                                ("/jobs", "stat=running", "state"), ("/api/jobs", "limt=5", "limit"),
                                                ("/entries/{entry}", "staus=open", "status")])
def test_a_misspelt_parameter_of_the_audit_the_jobs_or_an_entry_page_is_a_400_that_names_the_one_meant(
        site, path, query, meant):
    """Left out, "/audit?actr=admin" showed every record as if filtered, and an entry page's
    "?staus=open" led Previous and Next through every entry."""
    entry = support.dead_letter(runtime_of(site["app"]).engine, 9, Dlq_Reason="fatal")
    response = site["viewer"].get(f"{path.format(entry=entry)}?{query}")
    assert response.status_code == 400
    assert f"{query.split('=')[0]!r} is not a parameter of this request: did you mean {meant!r}?" in unescape(
        response.get_data(as_text=True))


@pytest.mark.parametrize("path", ["/api/entries?_=1733390000&format=json", "/api/groups?team=payments&state=open",
                                  "/api/export.ndjson?page=2", "/api/summary?v=2"])
def test_a_parameter_that_is_no_misspelling_is_left_out_as_before(site, path):
    # A cache-buster or a client's own parameter; the groups' team is theirs, not a misspelt stream.
    response = site["app"].test_client().get(path, headers=support.bearer(site["token"]))
    assert response.status_code == 200, response.get_data(as_text=True)[:300]


@pytest.mark.parametrize("path, query, meant", [("/", "subjet=payments.>", "subject"), ("/", "staus=closed", "status"),
                                                ("/groups", "reasn=fatal", "reason"), ("/groups", "assigne=ann", "assignee"),
                                                ("/groups", "windw=1h", "window")])
def test_a_misspelt_parameter_of_a_page_says_the_one_meant_where_its_list_would_be(site, path, query, meant):
    """A hand-edited address ("?subjet=payments.>") showed every entry as if filtered, the form above
    the list reading as no filter at all; now the page says so, as it does a filter's bad value."""
    support.dead_letter(runtime_of(site["app"]).engine, 4, Dlq_Reason="fatal", Dlq_Error="order 7 not found")
    table = '<table class="entries">' if path == "/" else '<table class="groups'
    assert table in site["viewer"].get(path).get_data(as_text=True)
    response = site["viewer"].get(f"{path}?{query}")
    assert response.status_code == 400
    page = unescape(response.get_data(as_text=True))
    assert f"{query.split('=')[0]!r} is not a parameter of this request: did you mean {meant!r}?" in page
    assert table not in page


@pytest.mark.parametrize("path", ["/?_=1733390000", "/groups?window=1h&state=open&team=payments", "/?utm_source=mail"])
def test_a_pages_parameter_that_is_no_misspelling_is_left_out_as_before(site, path):
    assert site["viewer"].get(path).status_code == 200


def test_an_unknown_api_path_or_method_says_where_the_routes_are_or_which_methods_it_takes(site):
    # Werkzeug's "The requested URL was not found on the server. If you entered the URL manually
    # please check your spelling" was the answer to /api/export.xml and to /api/jobs/abc.
    api, auth = site["app"].test_client(), support.bearer(site["token"])
    for path in ("/api/export.xml", "/api/jobs/abc"):
        answer = api.get(path, headers=auth)
        assert answer.status_code == 404
        assert answer.get_json()["error"] == f"No route of the API answers GET {path}: /api/openapi.json lists them."
    assert api.get("/api/jobs/0", headers=auth).get_json()["error"] == "There is no job 0."  # a route's own 404
    answer = api.delete("/api/audit", headers=auth)
    assert answer.status_code == 405 and answer.get_json()["error"] == "/api/audit does not take DELETE: use GET."
    # /api itself and the health check answer as the API does, not with a page.
    assert api.get("/api", headers=auth).get_json()["error"].startswith("No route of the API answers GET /api:")
    answer = api.post("/healthz", headers=auth)
    assert answer.status_code == 405 and answer.get_json()["error"] == "/healthz does not take POST: use GET."


def test_a_write_without_a_token_to_no_route_or_no_method_is_the_404_or_405_not_a_csrf_refusal(site):
    # Without a token the CSRF check ran before the routing error: 400 "Refused: The CSRF token is
    # missing", though such a request writes nothing there is to forge.
    anonymous = site["app"].test_client()
    answer = anonymous.post("/api/nonexistent")
    assert answer.status_code == 404
    assert answer.get_json()["error"] == "No route of the API answers POST /api/nonexistent: /api/openapi.json lists them."
    assert anonymous.post("/api/jobs/99999999999999999999/cancel").status_code == 404
    answer = anonymous.delete("/api/entries/1")
    assert answer.status_code == 405 and answer.get_json()["error"] == "/api/entries/1 does not take DELETE: use GET."
    for client, signed_in in ((site["viewer"], True), (anonymous, False)):  # a page's address, a browser's form
        answer = client.post("/users", data={"name": "x"})
        html = answer.get_data(as_text=True)
        assert answer.status_code == 404 and "There is no page at /users." in html
        assert ("Logout" in html) == signed_in
        # The dashboard's own page, saying which methods it takes (it was the server's bare "405 Method
        # Not Allowed"), for a page's address asked with a method it does not take.
        for method, path, allowed in (("DELETE", "/groups", "GET"), ("PUT", "/views", "GET or POST"),
                                      ("DELETE", "/login", "GET or POST")):
            answer = client.open(path, method=method)
            html = answer.get_data(as_text=True)
            assert answer.status_code == 405 and "<title>Method not allowed" in html, html[:300]
            assert f"{path} does not take {method}: use {allowed}." in html
            assert ("Logout" in html) == signed_in
    # A write to a route still needs the CSRF token (or a login first).
    assert site["viewer"].post("/views", data={"name": "x"}).status_code == 400


def test_an_address_that_names_no_page_is_the_dashboards_own_not_found_page(site):
    # It was the server's bare "Not Found" page, without the dashboard's look or a way back.
    for client, signed_in in ((site["viewer"], True), (site["app"].test_client(), False)):
        answer = client.get("/users")
        html = answer.get_data(as_text=True)
        assert answer.status_code == 404 and "There is no page at /users." in html
        assert "Back to the dead letters" in html and "/static/app.css" in html
        assert ("Logout" in html) == signed_in


def test_a_body_too_large_says_how_large_and_what_is_taken_and_changes_nothing(offline_app, tokens):
    # It was Werkzeug's "The data value transmitted exceeds the capacity limit." (a bare page for
    # a browser's form).
    app = offline_app
    entry_id = support.dead_letter(runtime_of(app).engine, 5)
    body = b'{"version": 1, "payload_base64": "' + b"A" * (17 * 2 ** 20) + b'"}'
    answer = app.test_client().post(f"/api/entries/{entry_id}/republish", data=body,
                                    headers={**support.bearer(tokens["operator"]), "Content-Type": "application/json"})
    assert answer.status_code == 413
    assert answer.get_json()["error"] == ("The request's body is 17.0 MB; the dashboard takes at most 16 MB "
                                          "(an edited payload, a bulk selection). Nothing was done.")
    operator = support.logged_in(app, "operator")
    page = operator.post(f"/entries/{entry_id}/edit", data={"csrf_token": support.csrf_token(operator, "/"),
                                                            "version": "1", "payload": "x" * (17 * 2 ** 20)})
    html = unescape(page.get_data(as_text=True))
    assert page.status_code == 413 and "the dashboard takes at most 16 MB" in html and "Back to the dead letters" in html
    assert runtime_of(app).store.get_entry(entry_id).version == 1
