"""The list's filters are declared once (entries/filters.py FILTERS): generated over that table,
every filter reads and writes itself, adds SQL, and is in the API document, the command line's
options, the bulk forms' allow-list and a job's selection in words. A filter declared without
one of them fails here."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import and_, create_engine, select

from dlq_dashboard.actions.bulk.listing import describe_selection
from dlq_dashboard.cli.entries import entries
from dlq_dashboard.db.models import Entry
from dlq_dashboard.entries.fields import KeyField
from dlq_dashboard.entries.filters import FILTERS, EntryFilter, filter_of
from dlq_dashboard.web.openapi import openapi_document
from dlq_dashboard.web.openapi_requests import FILTER_VALUE, SCHEMAS
from dlq_dashboard.web.params import form_filter

KEY_FIELDS = (KeyField("Customer", "/customer/id"),)
#: A good value for each declared filter, by the parameter that gives it.
SAMPLES = {"source": ("source", "billing"), "status": ("status", "open"), "subject": ("subject", "orders.*"), "stream": ("stream", "ORDERS"),
           "consumer": ("consumer", "billing"), "msg_id": ("msg_id", "ORD-1A20148F"), "reason": ("reason", "fatal"), "q": ("q", "timeout"),
           "since": ("since", "1h"), "until": ("until", "2030-01-01T00:00:00.000000Z"), "group": ("group", "5"),
           "job": ("job", "12:failed"), "field.<label>": ("field.Customer", "C-42")}
#: The operations that take the list's filters.
FILTERED = ("listEntries", "listGroups", "exportJson", "exportNdjson", "exportCsv")
DECLARED = [pytest.param(declared, id=declared.name) for declared in FILTERS]


def test_every_declared_filter_has_a_sample_here():
    assert list(SAMPLES) == [declared.name for declared in FILTERS]


@pytest.mark.parametrize("declared", DECLARED)
def test_a_filter_reads_its_parameter_writes_it_back_and_adds_sql(declared):
    param, value = SAMPLES[declared.name]
    assert filter_of(param) is declared
    flt = EntryFilter.from_args({param: value}, key_fields=KEY_FIELDS)
    assert flt.to_args() == {param: value} and flt.filtered
    conditions = flt.conditions(create_engine("sqlite://"))
    assert conditions and str(select(Entry.id).where(and_(*conditions)))
    assert EntryFilter.from_args({param: ""}, key_fields=KEY_FIELDS) == EntryFilter()  # empty is no filter
    spaces = EntryFilter.from_args({param: "  "}, key_fields=KEY_FIELDS)
    if declared.family:  # a key field's value is matched as given: spaces are a value
        assert spaces.to_args() == {param: "  "} and declared.blank("") and not declared.blank("  ")
    else:  # the others' values are trimmed: spaces are no filter
        assert spaces == EntryFilter() and declared.blank("  ")


@pytest.mark.parametrize("declared", DECLARED)
def test_a_filter_is_a_parameter_of_every_filtered_operation_of_the_api_document(offline_app, declared):
    served = offline_app.test_client().get("/api/openapi.json").get_json()
    assert served == openapi_document(offline_app)
    operations = {op["operationId"]: op for path in served["paths"].values() for op in path.values()}
    for operation_id in FILTERED:
        parameters = {p["name"]: p for p in operations[operation_id]["parameters"]}
        if declared.family:  # no parameter of that name: the operation names the family (tests/test_openapi.py)
            assert declared.name not in parameters and operations[operation_id]["x-key-field-filters"] == declared.name
            continue
        assert parameters[declared.name]["in"] == "query", operation_id
        assert parameters[declared.name]["description"] == declared.description, operation_id
    # A bulk job's filter object names each filter, the key fields' family by its pattern.
    names = SCHEMAS["Filter"]["patternProperties"] if declared.family else SCHEMAS["Filter"]["properties"]
    assert names[r"^field\." if declared.family else declared.name] == FILTER_VALUE


@pytest.mark.parametrize("declared", DECLARED)
def test_a_filter_is_an_option_of_entries_list_and_export(declared):
    flag, metavar, text = declared.option
    for command in ("list", "export"):
        options = {opt: p for p in entries.commands[command].params for opt in p.opts}
        assert flag in options, (command, flag)
        assert options[flag].multiple and options[flag].metavar == metavar and options[flag].help == text


@pytest.mark.parametrize("declared", DECLARED)
def test_a_filter_is_kept_from_a_bulk_form_and_named_in_a_jobs_selection(declared):
    param, value = SAMPLES[declared.name]
    assert form_filter({param: value, "by": "filter", "csrf_token": "t", "limit": "5", "ids": "1"}) == {param: value}
    text = describe_selection({"filter": {param: value}}, {5: "order <id> not found"})
    assert text != "every open entry"
    assert param.split(".")[0] in text, text
    assert all(part in text for part in value.split(":")) or "order <id> not found" in text, text


def test_a_jobs_selection_names_its_group_first_and_keeps_the_order_of_the_rest():
    selection = {"filter": {"status": "open", "group": "5", "field.Customer": "C-42", "subject": "orders.*"}}
    assert describe_selection(selection, {5: "order <id> not found"}) == (
        "group order <id> not found, status=open field.Customer=C-42 subject=orders.*")
    assert describe_selection({"filter": {"group": "7"}}) == "group 7"
    assert describe_selection({"filter": {"status": "open", "job": "12:failed"}}) == "the failed items of job 12, status=open"
    assert describe_selection({"filter": {"reason": "fatal", "status": "open"}}) == "filter reason=fatal status=open"
    assert describe_selection({"filter": {}}) == "every open entry"
    assert describe_selection({"ids": 1}) == "1 selected entry"
    # 200,000 ids of which 240 named an entry read "200,000 selected entries", as if all were taken.
    assert describe_selection({"ids": 200_000, "missing": 199_760}) == "200,000 selected entries, 199,760 of them not found"


@pytest.mark.both_databases
def test_an_entry_is_found_by_its_original_msg_id_where_a_search_cannot_read_its_payload(offline_app, auth, tokens):
    # A ticket's order id, the message's Nats-Msg-Id: a search reads payload, error and subject,
    # so a gzip payload's dead letter was found by nothing a person could type.
    from dlq_dashboard.runtime import runtime_of

    from . import support

    engine = runtime_of(offline_app).engine
    wanted = support.dead_letter(engine, 1, payload=b"\x1f\x8b\x08\x00garbled", Dlq_Original_Msg_Id="ORD-A74E8D70",
                                 Dlq_Reason="schema_invalid", Dlq_Error="payload is not valid JSON")
    support.dead_letter(engine, 2, payload=b'{"note": "ORD-A74E8D70 was resent"}', Dlq_Original_Msg_Id="ORD-0001")
    support.dead_letter(engine, 3, Dlq_Original_Msg_Id="ORD-A74E8D70-2")
    api = offline_app.test_client()
    answer = api.get("/api/entries?msg_id=ORD-A74E8D70&status=", headers=support.bearer(tokens["viewer"])).get_json()
    assert [e["id"] for e in answer["entries"]] == [wanted]
    page = auth.client("viewer").get("/?msg_id=ORD-A74E8D70").get_data(as_text=True)
    assert f'href="/entries/{wanted}' in page and "More filters (1 set)" in page
    assert 'name="msg_id" value="ORD-A74E8D70"' in page
    # The entry's page links every dead letter of its msgId.
    entry_page = auth.client("viewer").get(f"/entries/{wanted}").get_data(as_text=True)
    assert '<a href="/?msg_id=ORD-A74E8D70" title="Every dead letter of this msgId">ORD-A74E8D70</a>' in entry_page
    result = offline_app.test_cli_runner().invoke(args=["entries", "list", "--msg-id", "ORD-A74E8D70", "--json"])
    assert result.exit_code == 0, result.output
    assert [e["id"] for e in json.loads(result.output)["entries"]] == [wanted]
    # A misspelling names it.
    assert "did you mean 'msg_id'" in api.get("/api/entries?msgid=ORD-1", headers=support.bearer(tokens["viewer"])
                                                 ).get_json()["error"]


@pytest.mark.both_databases
def test_a_search_of_a_msg_id_points_to_the_msg_id_filter_within_the_readers_scopes(make_app):
    # Support paste a ticket's order id into the search: it finds the payloads that mention it,
    # not the gzip dead letter whose msgId it is; the list says where that one is.
    from dlq_dashboard.accounts import create_user
    from dlq_dashboard.runtime import runtime_of
    from dlq_dashboard.scopes import parse_scopes

    from . import support

    app = make_app()
    engine = runtime_of(app).engine
    support.dead_letter(engine, 1, payload=b"\x1f\x8b\x08\x00garbled", Dlq_Original_Msg_Id="ORD-A74E8D70",
                        Dlq_Reason="schema_invalid")
    support.dead_letter(engine, 2, subject="billing.paid", Dlq_Original_Msg_Id="BILL-77")
    hint = '<a href="/?msg_id=ORD-A74E8D70">list the dead letters of that msgId</a>'
    viewer = support.logged_in(app, "viewer")
    page = viewer.get("/?q=ORD-A74E8D70").get_data(as_text=True)
    assert "A dead letter's original msgId is <code>ORD-A74E8D70</code>" in page and hint in page
    # The results alone, as htmx asks for them while one types: the hint comes with them.
    fragment = viewer.get("/?q=ORD-A74E8D70", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert hint in fragment and "<html" not in fragment
    assert "list the dead letters of that msgId" not in viewer.get("/?q=ORD-A74E8D7").get_data(as_text=True)
    assert "list the dead letters of that msgId" not in viewer.get("/?q=ORD-A74E8D70 shipped").get_data(as_text=True)
    # A reader scoped to orders is not told of billing's msgIds.
    create_user(engine, "ann", support.PASSWORD, "viewer", parse_scopes(["orders.>"]))
    scoped = app.test_client()
    assert support.login(scoped, "ann", support.PASSWORD).status_code == 302
    assert "list the dead letters of that msgId" not in scoped.get("/?q=BILL-77").get_data(as_text=True)
    assert "list the dead letters of that msgId" in viewer.get("/?q=BILL-77").get_data(as_text=True)


@pytest.mark.both_databases
def test_a_subject_holding_a_wildcard_character_inside_a_token_is_found_by_its_own_subject(offline_app, tokens):
    """NATS takes '*' and '>' as wildcards as whole tokens only: probe.<b> is a subject it stores
    and the dashboard republishes to; its filter was a 400 "is not a NATS subject"."""
    from . import support

    subjects = ["probe.<b>", "probe.a*b", "probe.c"]
    ids = {s: support.dead_letter(offline_app, seq, subject=s) for seq, s in enumerate(subjects, start=1)}
    client, viewer = offline_app.test_client(), support.bearer(tokens["viewer"])
    for subject in subjects[:2]:
        answer = client.get("/api/entries", query_string={"subject": subject}, headers=viewer)
        assert answer.status_code == 200, answer.get_data(as_text=True)
        assert [e["id"] for e in answer.get_json()["entries"]] == [ids[subject]]
    wildcard = client.get("/api/entries", query_string={"subject": "probe.*"}, headers=viewer).get_json()
    assert sorted(e["id"] for e in wildcard["entries"]) == sorted(ids.values())
    refused = client.get("/api/entries", query_string={"subject": "probe.>.x"}, headers=viewer)
    assert refused.status_code == 400 and "is not a NATS subject" in refused.get_json()["error"]


def test_the_subject_filter_finds_what_a_scope_of_the_same_pattern_covers(offline_app, tokens):
    """One rule for a subject pattern: the list's filter finds exactly the entries a reader scoped
    to that pattern reads (scopes.subject_matches, entries/scoping.py). The filter had a rule of its
    own, in which '*' was never an empty token: "probe." was read by a reader scoped to probe.*
    and not found by the filter probe.*."""
    from dlq_dashboard.accounts.tokens import create_token
    from dlq_dashboard.scopes import Scope

    from . import support

    subjects = ["probe.", "probe.a", "probe.a.b", "probe"]
    for seq, subject in enumerate(subjects, start=1):
        support.dead_letter(offline_app, seq, subject=subject)
    client = offline_app.test_client()
    engine = support.runtime_of(offline_app).engine
    for name, pattern in (("one", "probe.*"), ("rest", "probe.>")):
        scoped = support.bearer(create_token(engine, f"scoped-{name}", "viewer", scopes=(Scope(pattern),)))
        read = client.get("/api/entries", headers=scoped).get_json()["entries"]
        found = client.get("/api/entries", query_string={"subject": pattern},
                           headers=support.bearer(tokens["viewer"])).get_json()["entries"]
        assert sorted(e["original_subject"] for e in found) == sorted(e["original_subject"] for e in read)
    assert {e["original_subject"] for e in found} == {"probe.", "probe.a", "probe.a.b"}
