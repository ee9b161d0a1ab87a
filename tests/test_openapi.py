"""The OpenAPI document: valid, complete, true to the real responses, and fuzzed with schemathesis.

Also the API's paging conventions: a bounded limit and cursors that stay put while entries arrive.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from openapi_spec_validator import validate as validate_spec
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from dlq_dashboard.entries.filters import MAX_LIMIT, encode_cursor
from dlq_dashboard.ingest.writes import StreamMessage, ingest_dlq_batch
from dlq_dashboard.web.openapi import openapi_document, route_key
from dlq_dashboard.db.liveness import DatabaseState
from dlq_dashboard.numbers import VERSION_MAX
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.web.params import filter_values
from dlq_dashboard.web.query_parameters import parameters_of, takes_key_fields
from dlq_dashboard.times import utcnow

from . import support
from .test_database_outage import from_memory

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
MISSING = 999_999


def json_routes(app) -> set[tuple[str, str]]:
    """(method, normalised path) of every JSON or text route a script may call."""
    routes = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/") or rule.rule in ("/healthz", "/readyz", "/metrics"):
            routes |= {(m.lower(), route_key(rule.rule)) for m in rule.methods - {"HEAD", "OPTIONS"}}
    return routes


def documented(doc) -> set[tuple[str, str]]:
    return {(method, route_key(path)) for path, item in doc["paths"].items() for method in item}


def test_the_document_is_valid_openapi_3_1(offline_app):
    doc = offline_app.test_client().get("/api/openapi.json").get_json()

    validate_spec(doc)
    assert doc["openapi"] == "3.1.0"


def test_every_json_route_is_documented_and_nothing_else(offline_app):
    doc = openapi_document(offline_app)

    assert documented(doc) == json_routes(offline_app)
    for needed in ("/api/entries", "/api/entries/{entry_id}", "/api/export.json", "/api/export.ndjson",
                   "/api/export.csv", "/healthz", "/readyz", "/metrics", "/api/openapi.json"):
        assert needed in doc["paths"]


def test_each_operation_states_the_login_its_route_requires(offline_app):
    doc = openapi_document(offline_app)
    adapter = offline_app.url_map.bind("localhost")

    for path, item in doc["paths"].items():
        for method, operation in item.items():
            url = path.replace("{entry_id}", "1").replace("{job_id}", "1").replace("{group_id}", "1")
            endpoint, _ = adapter.match(url, method=method.upper())
            role = offline_app.view_functions[endpoint].required_role
            if role is None:
                assert operation["security"] == [], (method, path)
            else:
                assert "security" not in operation and {"401", "403"} <= set(operation["responses"]), (method, path)
                # Every write needs an operator; of the reads, only the alert outbox does (/alerts),
                # and the list of users and tokens an admin (/admin/users).
                reads_for_operators, reads_for_admins = {"/api/alerts"}, {"/api/admin/users"}
                if path in reads_for_admins:
                    assert role == "admin" and method == "get", (method, path)
                    continue
                assert role in ("viewer", "operator") and (role == "operator") == (
                    method == "post" or path in reads_for_operators), (method, path)


def test_every_operation_lists_the_503_of_a_database_outage_and_every_body_the_413_of_its_size(offline_app):
    # The outage walk (tests/test_database_outage.py) gets a 503 from every route but those that
    # answer from memory; the document listed it for republish, bulk, /healthz and /readyz only,
    # and a body's 413 for none.
    doc = openapi_document(offline_app)
    adapter = offline_app.url_map.bind("localhost")

    for path, item in doc["paths"].items():
        for method, operation in item.items():
            endpoint, _ = adapter.match(path.replace("{entry_id}", "1").replace("{job_id}", "1")
                                        .replace("{group_id}", "1"), method=method.upper())
            assert ("503" in operation["responses"]) == (
                not from_memory(offline_app, endpoint) or path in ("/healthz", "/readyz")), (method, path)
            assert ("413" in operation["responses"]) == ("requestBody" in operation), (method, path)
    assert "Retry-After" in doc["components"]["responses"]["E503"]["headers"]


def _properties(schema, doc):
    """Every (name, schema) of the properties ``schema`` names, however deep, through $refs."""
    for branch in _branches(schema, doc):
        for name, sub in branch.get("properties", {}).items():
            yield name, sub
            yield from _properties(sub, doc)
        for key in ("items", "additionalProperties"):
            if isinstance(branch.get(key), dict):
                yield from _properties(branch[key], doc)


def test_request_bodies_say_what_the_server_reads_of_them(offline_app):
    # The document had no limits on most versions (GroupStateRequest's up to 2^63 - 1, the server
    # takes 0 to 2^31 - 1), let any field name through, and was stricter than the server about a
    # bulk selection's ids and filter.
    doc = openapi_document(offline_app)
    bodies = {op["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
              for item in doc["paths"].values() for op in item.values() if "requestBody" in op}
    assert bodies == {"RepublishRequest", "CloseRequest", "ReopenRequest", "BulkRequest", "RepairSelection",
                      "GroupStateRequest", "GroupNoteRequest"}

    def valid(name: str, body) -> bool:
        return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}",
                                                "components": doc["components"]}).is_valid(body)

    versions = [sub for name in bodies for key, sub in _properties({"$ref": f"#/components/schemas/{name}"}, doc)
                if key == "version"]
    assert len(versions) == 6 and all(v["$ref"] == "#/components/schemas/Version" for v in versions)
    assert (doc["components"]["schemas"]["Version"]["minimum"], doc["components"]["schemas"]["Version"]["maximum"]) \
        == (0, VERSION_MAX)
    assert valid("ReopenRequest", {"version": VERSION_MAX}) and not valid("ReopenRequest", {"version": VERSION_MAX + 1})
    assert not valid("GroupStateRequest", {"version": 2**31, "state": "open"})
    for name, body in (("RepublishRequest", {"version": 1}), ("CloseRequest", {"version": 1}),
                       ("ReopenRequest", {"version": 1}), ("BulkRequest", {"action": "close", "ids": [1]}),
                       ("RepairSelection", {"ids": [1]}), ("GroupStateRequest", {"version": 1, "state": "open"}),
                       ("GroupNoteRequest", {"text": "x"})):
        assert valid(name, body) and valid(name, {**body, "upto": 3} if name != "RepairSelection" else body), name
        assert not valid(name, {**body, "paylod_base64": "eA=="}), name  # no request takes it: a 400
    assert valid("BulkRequest", {"action": "close", "ids": [" 12 ", "12:3", {"id": "12", "version": 3}], "filter": None})
    assert valid("BulkRequest", {"action": "close", "ids": None,
                                 "filter": {"group": 1, "status": None, "field.Customer": "C-1", "q": True}})
    assert valid("RepairSelection", {"filter": {"subject": "orders.*"}, "upto": "9120"})
    for wrong in ({"subjet": "orders.*"}, {"subject": ["orders.*"]}, {"group": {"id": 1}}):
        assert not valid("BulkRequest", {"action": "close", "filter": wrong}), wrong
    assert not valid("BulkRequest", {"action": "close", "ids": ["twelve"]})
    # A number or a boolean is a filter's value as JSON writes it, as a key field's value is compared.
    assert filter_values({"group": 1, "status": None, "field.paid": True, "q": "x"}) == {
        "group": "1", "field.paid": "true", "q": "x"}


def test_no_query_parameter_is_named_as_no_client_may_send_it(offline_app):
    # field.<label> was listed as a parameter of that name: a generated client sent it, the server
    # refused it. The key fields' filters are said in words and named by x-key-field-filters.
    doc = openapi_document(offline_app)
    families = set()
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", ()):
                assert "<" not in parameter["name"] and not parameter["name"].startswith("field."), (path, parameter)
            if "x-key-field-filters" in operation:
                assert operation["x-key-field-filters"] == "field.<label>" and "field.Customer=" in operation[
                    "description"]
                families.add(path)
    assert families == {"/api/entries", "/api/groups", "/api/summary", "/api/export.json", "/api/export.ndjson",
                        "/api/export.csv"}
    assert takes_key_fields(parameters_of("api.list_entries", "/api/entries"))


def test_free_text_parameters_say_the_form_the_server_reads(offline_app):
    # cursor, since, until, the audit's fold and items and a group's until were type string alone.
    doc = openapi_document(offline_app)
    parameters = {(path, p["name"]): p["schema"] for path, item in doc["paths"].items()
                  for operation in item.values() for p in operation.get("parameters", ())}

    def valid(schema, value) -> bool:
        return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker()).is_valid(value)

    for path in ("/api/entries", "/api/groups", "/api/summary", "/api/export.csv"):
        for name in ("since", "until"):
            schema = parameters[(path, name)]
            assert all(valid(schema, good) for good in ("15m", "7d", " 1H ", "2030-01-01T00:00:00Z")), (path, name)
            assert not any(valid(schema, bad) for bad in ("yesterday", "1w", "h")), (path, name)
    for path in ("/api/entries", "/api/jobs", "/api/audit"):
        assert valid(parameters[(path, "cursor")], encode_cursor(12)) and not valid(parameters[(path, "cursor")], "a b")
    for name in ("fold", "items"):
        schema = parameters[("/api/audit", name)]
        assert all(valid(schema, good) for good in ("1", "Yes", " off ", "TRUE", "")) and not valid(schema, "maybe")
    until = {"$ref": "#/components/schemas/GroupStateRequest/properties/until", "components": doc["components"]}
    assert valid(until, "2h") and valid(until, "2030-01-01T00:00:00+02:00") and not valid(until, "soon")


# --- the document against real responses ----------------------------------------------------

@pytest.fixture(name="settings")
def settings_with_a_key_field(tmp_path, nats_server, database_url):
    """conftest's settings, with a key field: the list and the exports carry each entry's fields."""
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url,
                                 list_fields=(("order", "/order"),))


@pytest.fixture
def api(app, nats_server, tokens):
    """The running dashboard with entries in every state, a finished job and audit records."""
    client = app.test_client()
    support.make_orders_stream(nats_server.url)
    ids = support.dead_letter_orders(app, nats_server.url, [json.dumps({"order": i}).encode() for i in range(8)]
                             + [bytes(range(256))])
    assert client.post(f"/api/entries/{ids[0]}/republish", json={"version": 1},
                       headers=support.bearer(tokens["operator"])).status_code == 200
    assert client.post(f"/api/entries/{ids[1]}/close", json={"version": 1, "note": "known"},
                       headers=support.bearer(tokens["operator"])).status_code == 200
    response = client.post("/api/bulk", json={"action": "close", "ids": [ids[2]]}, headers=support.bearer(tokens["operator"]))
    assert response.status_code == 202
    job = response.get_json()["job"]
    support.wait_for(lambda: client.get(f"/api/jobs/{job}", headers=support.bearer(tokens["viewer"])).get_json()["finished_at"],
             message="the bulk job to finish")
    no_subject = support.dead_letter(app, MISSING, subject=None, Dlq_Reason="fatal")
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", app)
    return SimpleNamespace(app=app, client=client, schema=schema, ids=ids, job=job, no_subject=no_subject,
                           tokens=tokens, nats=nats_server)


def check_call(api, method: str, path: str, status: int, *, role: str | None = "viewer", path_parameters=None,
               query=None, body=None) -> object:
    """Call one operation as documented and hold the answer to the document."""
    operation = api.schema[path][method.upper()]
    kwargs = {"path_parameters": path_parameters or {}, "query": query or {}}
    if body is not None:
        kwargs.update(body=body, media_type="application/json")
    case = operation.Case(**kwargs)
    response = case.call(headers=support.bearer(api.tokens[role]) if role else {})
    assert response.status_code == status, (method, path, response.text[:300])
    # A 503 while NATS is down is a documented answer, not a server error.
    case.validate_response(response, checks=CHECKS if status < 500 else CHECKS[1:])
    doc = api.schema.raw_schema
    answer = operation.definition.raw["responses"][str(status)]
    answer = resolve(doc, answer["$ref"]) if "$ref" in answer else answer
    if "application/json" in answer.get("content", {}):
        assert undeclared(response.json(), answer["content"]["application/json"]["schema"], doc) == [], (method, path)
    return response


def resolve(doc, ref: str) -> dict:
    """The part of ``doc`` a local $ref names."""
    found = doc
    for part in ref.removeprefix("#/").split("/"):
        found = found[part]
    return found


def _branches(schema: dict, doc):
    if "$ref" in schema:  # what it names and what is said beside it both hold
        yield from _branches(resolve(doc, schema["$ref"]), doc)
        schema = {k: v for k, v in schema.items() if k != "$ref"}
    yield schema
    for key in ("allOf", "anyOf", "oneOf"):
        for part in schema.get(key, ()):
            yield from _branches(part, doc)


def undeclared(value, schema: dict, doc, at: str = "$") -> list[str]:
    """Where an answer carries a key its schema does not name (a schema that names its object's keys
    lets any other through): a field the document leaves out is a field no client knows of."""
    branches = list(_branches(schema, doc))
    found = []
    if isinstance(value, dict):
        named: dict[str, list] = {}
        for branch in branches:
            for key, sub in branch.get("properties", {}).items():
                named.setdefault(key, []).append(sub)
        rest = [b["additionalProperties"] for b in branches if isinstance(b.get("additionalProperties"), dict)]
        free = not named or any(b.get("additionalProperties") is True or "patternProperties" in b for b in branches)
        for key, item in value.items():
            if key in named or rest:
                found += undeclared(item, {"anyOf": named.get(key) or rest}, doc, f"{at}.{key}")
            elif not free:
                found.append(f"{at}.{key}")
    elif isinstance(value, list):
        items = [b["items"] for b in branches if isinstance(b.get("items"), dict)]
        for index, item in enumerate(value):
            found += undeclared(item, {"anyOf": items}, doc, f"{at}[{index}]") if items else []
    return found


def test_real_responses_match_the_document(api):
    ids, job, doc = api.ids, api.job, api.schema.raw_schema
    entry = {"entry_id": ids[0]}
    called = set()

    def call(method, path, status, **kw):
        called.add((method, path))
        return check_call(api, method, path, status, **kw)

    call("get", "/api/entries", 200)
    call("get", "/api/entries", 200, query={"status": "open", "subject": "orders.*", "q": "order", "limit": 2})
    assert f"from 1 to {MAX_LIMIT}" in call("get", "/api/entries", 400, query={"limit": MAX_LIMIT + 1}).json()["error"]
    call("get", "/api/entries", 401, role=None)
    groups = call("get", "/api/groups", 200).json()["groups"]
    assert sum(g["count"] for g in groups) == len(ids) + 1
    call("get", "/api/groups", 200, query={"status": "open", "subject": "orders.*", "limit": 5})
    call("get", "/api/groups", 400, query={"since": "yesterday"})
    call("get", "/api/groups", 401, role=None)
    summary = call("get", "/api/summary", 200).json()
    assert summary["exact"] is True and summary["total"] == len(ids) + 1
    call("get", "/api/summary", 200, query={"q": "order", "status": "open"})
    call("get", "/api/summary", 400, query={"since": "yesterday"})
    call("get", "/api/summary", 401, role=None)
    call("get", "/api/groups", 200, query={"state": "open,investigating", "assignee": "me", "team": "orders"})
    call("get", "/api/groups", 400, query={"state": "asleep"})
    group = {"group_id": groups[0]["id"]}
    state = "/api/groups/{group_id}/state"
    changed = call("post", state, 200, role="operator", path_parameters=group,
                   body={"version": groups[0]["version"], "state": "investigating", "assignee": "alice"}).json()
    assert changed["group"]["state"] == "investigating"
    call("post", state, 409, role="operator", path_parameters=group,
         body={"version": groups[0]["version"], "state": "resolved"})
    call("post", state, 400, role="operator", path_parameters=group,
         body={"version": changed["group"]["version"], "state": "ignored", "until": "soon"})
    call("post", state, 403, path_parameters=group, body={"version": 1, "state": "open"})
    call("post", state, 404, role="operator", path_parameters={"group_id": MISSING}, body={"version": 1, "state": "open"})
    call("post", "/api/groups/{group_id}/notes", 201, role="operator", path_parameters=group, body={"text": "seen"})
    call("post", "/api/groups/{group_id}/notes", 400, role="operator", path_parameters=group, body={"text": " "})
    call("post", "/api/groups/{group_id}/notes", 404, role="operator", path_parameters={"group_id": MISSING},
         body={"text": "x"})
    detail = call("get", "/api/groups/{group_id}", 200, path_parameters=group).json()
    assert [a["kind"] for a in detail["activity"]][:2] == ["note", "state"]
    call("get", "/api/groups/{group_id}", 404, path_parameters={"group_id": MISSING})
    call("get", "/api/entries/{entry_id}", 200, path_parameters=entry)
    call("get", "/api/entries/{entry_id}", 404, path_parameters={"entry_id": MISSING + 1})
    call("get", "/api/entries/{entry_id}/targets", 200, path_parameters=entry)
    call("get", "/api/entries/{entry_id}/targets", 404, path_parameters={"entry_id": MISSING + 1})

    republish = "/api/entries/{entry_id}/republish"
    published = call("post", republish, 200, role="operator", path_parameters={"entry_id": ids[3]},
                     body={"version": 1}).json()
    assert published["publish"]["stream"] == "ORDERS" and published["entry"]["status"] == "republished"
    assert "entry" in call("post", republish, 409, role="operator", path_parameters={"entry_id": ids[3]},
                           body={"version": 1}).json()
    call("post", republish, 400, role="operator", path_parameters={"entry_id": ids[4]},
         body={"version": 1, "payload_base64": "not base64!"})
    call("post", republish, 403, path_parameters={"entry_id": ids[4]}, body={"version": 1})
    call("post", republish, 404, role="operator", path_parameters={"entry_id": MISSING + 1}, body={"version": 1})
    call("post", republish, 422, role="operator", path_parameters={"entry_id": api.no_subject}, body={"version": 1})

    call("post", "/api/entries/{entry_id}/close", 200, role="operator", path_parameters={"entry_id": ids[5]},
         body={"version": 1, "note": "handled by hand"})
    call("post", "/api/entries/{entry_id}/close", 409, role="operator", path_parameters={"entry_id": ids[5]},
         body={"version": 1})
    call("post", "/api/entries/{entry_id}/reopen", 200, role="operator", path_parameters={"entry_id": ids[5]},
         body={"version": 2})
    call("post", "/api/entries/{entry_id}/reopen", 400, role="operator", path_parameters={"entry_id": ids[5]},
         body={})

    call("post", "/api/bulk", 202, role="operator", body={"action": "close", "note": "again",
                                                            "filter": {"subject": "orders.*", "status": "republished"}})
    call("post", "/api/bulk", 400, role="operator", body={"action": "explode", "ids": [ids[6]]})
    repair = call("post", "/api/repair/preview", 200, role="operator", body={"ids": [ids[6], ids[8]]}).json()
    assert (repair["count"], repair["cannot"], repair["pass"]) == (2, 2, 0)  # no schema covers them
    call("post", "/api/repair/preview", 400, role="operator", body={})
    call("post", "/api/repair/preview", 403, body={"ids": [ids[6]]})
    # ids as digits (blanks around them too), a group's filter sent back as /api/groups gives it.
    started = call("post", "/api/bulk", 202, role="operator", body={"action": "republish", "ids": [f" {ids[6]} "]})
    assert "waits_for" in call("get", "/api/jobs/{job_id}", 200, path_parameters={"job_id": started.json()["job"]}).json()
    call("post", "/api/bulk", 202, role="operator", body={"action": "reopen", "ids": None,
                                                          "filter": {**groups[0]["filter"], "status": "closed"}})
    call("get", "/api/jobs/{job_id}", 200, path_parameters={"job_id": job})
    call("get", "/api/jobs/{job_id}", 404, path_parameters={"job_id": MISSING})
    call("post", "/api/jobs/{job_id}/cancel", 200, role="operator", path_parameters={"job_id": job})
    call("post", "/api/jobs/{job_id}/cancel", 404, role="operator", path_parameters={"job_id": MISSING})
    call("get", "/api/jobs", 200, query={"limit": 2})
    call("get", "/api/jobs", 400, query={"state": "asleep"})
    call("get", "/api/audit", 200, query={"limit": 3})
    call("get", "/api/audit", 200, query={"fold": "1"})
    call("get", "/api/audit", 400, query={"limit": 0})
    call("get", "/api/alerts", 200, role="operator", query={"state": "failed", "limit": 5})
    call("get", "/api/alerts", 400, role="operator", query={"state": "lost"})
    call("get", "/api/alerts", 403)

    entry_schema = {"$ref": "#/components/schemas/ListedEntry", "components": doc["components"]}
    for fmt in ("json", "ndjson", "csv"):
        body = call("get", f"/api/export.{fmt}", 200, query={"subject": "orders.>"}).content
        if fmt == "ndjson":
            for line in body.splitlines():
                jsonschema.validate(json.loads(line), entry_schema)
                assert "fields" in json.loads(line) and undeclared(json.loads(line), entry_schema, doc) == []
        call("get", f"/api/export.{fmt}", 400, query={"status": "lost"})
    sources = call("get", "/api/sources", 200).json()["sources"]
    assert [s["name"] for s in sources] == ["default"] and sources[0]["status"] == "ok"
    call("get", "/api/sources", 401, role=None)
    assert call("get", "/api/me", 200).json() == {"name": "token:test-viewer", "role": "viewer", "via": "token",
                                                   "grants": [{"role": "viewer", "scopes": None}]}
    call("get", "/api/me", 401, role=None)
    from dlq_dashboard.entries.saved_views import save_view
    save_view(runtime_of(api.app).engine, "token:test-viewer", "open orders", "list", "status=open&subject=orders.%2A",
              utcnow())
    [view] = call("get", "/api/views", 200).json()["views"]
    assert view["filters"] == {"status": "open", "subject": "orders.*"} and view["url"] == view["query"].join(("/?", ""))
    call("get", "/api/views", 401, role=None)
    users = call("get", "/api/admin/users", 200, role="admin").json()
    assert {t["name"] for t in users["tokens"]} == {"test-viewer", "test-operator", "test-admin"}
    call("get", "/api/admin/users", 403)
    call("get", "/api/admin/users", 401, role=None)
    call("get", "/healthz", 200, role=None)
    call("get", "/readyz", 200, role=None)
    call("get", "/metrics", 200, role=None)
    call("get", "/api/openapi.json", 200, role=None)

    call("post", republish, 413, role="operator", path_parameters={"entry_id": ids[7]},
         body={"version": 1, "payload_base64": "A" * (17 * 2 ** 20)})
    rt = runtime_of(api.app)  # the database away, as the probe says it (Retry-After)
    probe, rt.database = rt.database, SimpleNamespace(state=DatabaseState(False, utcnow(), "gone"))
    try:
        for method, path, kw in (("post", "/api/entries/{entry_id}/close", {"body": {"version": 1}, "path_parameters": entry}),
                                 ("post", "/api/entries/{entry_id}/reopen", {"body": {"version": 1}, "path_parameters": entry}),
                                 ("post", state, {"body": {"version": 1, "state": "open"}, "path_parameters": group}),
                                 ("post", "/api/groups/{group_id}/notes", {"body": {"text": "x"}, "path_parameters": group}),
                                 ("get", "/api/entries", {})):
            answer = call(method, path, 503, role="operator", **kw)
            assert answer.headers.get("retry-after") == ["2"], (method, path)
    finally:
        rt.database = probe
    api.nats.stop()
    support.wait_for(lambda: not runtime_of(api.app).bridge.state.connected, message="the bridge to see NATS go")
    call("post", republish, 503, role="operator", path_parameters={"entry_id": ids[7]}, body={"version": 1})
    call("get", "/healthz", 503, role=None)

    assert called == {(m, p) for p, item in doc["paths"].items() for m in item}, "an operation went untried"


# --- schemathesis over the document ----------------------------------------------------------

def snapshot(engine) -> dict:
    """Every table's rows, but for what changes by itself (support.CHANGES_BY_ITSELF)."""
    return support.table_rows(engine)


def fuzz(api, operation, examples: int, mode: GenerationMode = GenerationMode.POSITIVE, **fixed) -> None:
    """Cases generated from the document: positive ones must be answered as it says, negative ones
    (a long run only) without a server error. The same cases every run, but in a long run."""
    engine = runtime_of(api.app).engine
    headers = support.bearer(api.tokens["operator"])
    checks = CHECKS if mode == GenerationMode.POSITIVE else [not_a_server_error]

    @settings(max_examples=examples * support.FUZZ_SCALE, deadline=None, database=None,
              derandomize=not support.LONG_RUN, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(mode, **fixed))
    def call_case(case):
        if case.method == "GET":
            support.jobs_settled(engine)
        before = snapshot(engine) if case.method == "GET" else None
        response = case.call(headers=headers)
        case.validate_response(response, checks=checks)
        if before is not None:
            assert snapshot(engine) == before, f"GET {case.formatted_path} changed the database"

    call_case()


def test_schemathesis_finds_no_5xx_no_answer_off_the_document_and_no_get_that_changes_anything(api):
    operations = [result.ok() for result in api.schema.get_all_operations()]
    # GETs first, while no job runs that could change the database under them.
    for operation in sorted(operations, key=lambda op: op.method != "get"):
        fuzz(api, operation, 40 if operation.method == "get" else 15)
        if "entry_id" in operation.path:
            fuzz(api, operation, 6, path_parameters={"entry_id": api.ids[-1]})
        if "job_id" in operation.path:
            fuzz(api, operation, 4, path_parameters={"job_id": api.job})
        if "group_id" in operation.path:
            fuzz(api, operation, 6, path_parameters={"group_id": 1})
        if support.LONG_RUN and (operation.query or operation.path_parameters or operation.body):
            fuzz(api, operation, 10, GenerationMode.NEGATIVE)  # what the document rules out: a 4xx


# --- paging conventions ----------------------------------------------------------------------

def _ingest(app, first: int, count: int, word: str = "widget") -> None:
    ingest_dlq_batch(runtime_of(app).engine, "DLQ", "e1", [
        StreamMessage(seq=first + i, subject="dlq.orders.created", data=f'{{"item": "{word}"}}'.encode(),
                      headers={"Dlq-Original-Subject": "orders.created"}, stored_at=None) for i in range(count)])


@pytest.mark.parametrize("limit", [str(MAX_LIMIT + 1), "100000", "0", "-1", "many"])
def test_a_page_limit_outside_its_bound_is_a_400_that_names_the_bound(offline_app, tokens, limit):
    response = offline_app.test_client().get(f"/api/entries?limit={limit}", headers=support.bearer(tokens["viewer"]))

    assert response.status_code == 400
    assert response.get_json()["error"] == f"limit {limit!r} is not valid: use a whole number from 1 to {MAX_LIMIT}"


@pytest.mark.parametrize("query", ["", "&q=widget", "&status=open&subject=orders.*"])
def test_a_cursor_stays_put_while_new_entries_arrive(offline_app, tokens, query):
    client = offline_app.test_client()
    _ingest(offline_app, 1, 10)

    def page(cursor=None):
        url = f"/api/entries?limit=4{query}" + (f"&cursor={cursor}" if cursor else "")
        body = client.get(url, headers=support.bearer(tokens["viewer"])).get_json()
        return [e["id"] for e in body["entries"]], body["next_cursor"]

    first, cursor = page()
    assert first == [10, 9, 8, 7]
    _ingest(offline_app, 11, 5)
    second, cursor2 = page(cursor)
    assert second == [6, 5, 4, 3]
    assert page(cursor) == (second, cursor2)  # the same cursor, the same page, however often
    assert page(cursor2) == ([2, 1], None)
    assert page()[0] == [15, 14, 13, 12]  # the new entries lead a fresh first page


def test_a_cursor_not_made_by_the_api_is_a_400(offline_app, tokens):
    response = offline_app.test_client().get("/api/entries?cursor=abc", headers=support.bearer(tokens["viewer"]))

    assert response.status_code == 400
    assert "next_cursor" in response.get_json()["error"]
