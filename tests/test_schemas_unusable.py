"""A schema file of DLQ_SCHEMAS that could not be loaded, covering a subject (or, its subjects not
readable, maybe covering it): every channel says that file is not usable and why, none says no
schema covers the subject, and none calls the payload valid."""

from __future__ import annotations

import re
from html import unescape

import pytest

from dlq_dashboard.entries.schemas import SchemaRegistry

from . import support

#: What every channel names: the file and why it is not usable.
TOLD = re.compile(r"schema file orders\.json, which may cover its subject, is not usable: not valid JSON")


def broken_orders(tmp_path) -> str:
    """orders.json covering orders.> made invalid JSON (a comma lost), beside a usable users.json
    and payments.json, a JSON Schema whose subjects are read but whose type is not valid."""
    folder = tmp_path / "schemas"
    folder.mkdir(exist_ok=True)
    (folder / "orders.json").write_text('{"x-subjects": ["orders.>"] "type": "object"}')
    (folder / "payments.json").write_text('{"x-subjects": ["payments.*"], "type": "no-such-type"}')
    (folder / "users.json").write_text('{"x-subjects": ["users.*"], "type": "object"}')
    return str(folder)


def text(response) -> str:
    return unescape(response.get_data(as_text=True))


def test_the_registry_names_the_unusable_file_that_covers_or_may_cover_a_subject(tmp_path):
    registry = SchemaRegistry.load(broken_orders(tmp_path))
    verdict = registry.validate("orders.created", b"{}")
    assert verdict.schema is None and not verdict.valid and TOLD.search(verdict.unusable)
    payments = registry.validate("payments.captured", b"{}").unusable
    assert "schema file payments.json, which covers its subject, is not usable: not a valid JSON Schema" in payments
    assert "orders.json" in payments  # its subjects could not be read: it may cover these too
    assert "payments.json" not in (registry.validate("orders.created", b"{}").unusable or "")
    users = registry.validate("users.created", b"{}")  # a usable file covers it: judged by that one
    assert (users.schema, users.valid, users.unusable) == ("users.json", True, None)
    assert registry.validate(None, b"{}").unusable is None
    assert SchemaRegistry.load(None).validate("orders.created", b"{}").unusable is None


@pytest.fixture
def settings(tmp_path, nats_server, database_url):
    return support.make_settings(tmp_path, nats_server.url, database_url=database_url,
                                 schemas_dir=broken_orders(tmp_path))


@pytest.mark.both_databases
def test_an_unusable_schema_is_told_as_such_on_every_channel_and_the_payload_is_never_valid(
        app, rt, nats_server, auth, tokens):
    support.make_orders_stream(nats_server.url)
    entry_id, other = support.dead_letter_orders(app, nats_server.url, [b'{"price": "1.50"}', b'{"price": 2}'])
    api = app.test_client()
    operator = support.bearer(tokens["operator"])

    verdict = api.get(f"/api/entries/{entry_id}", headers=operator).get_json()["current_schema"]
    assert (verdict["schema"], verdict["valid"], verdict["errors"]) == (None, None, [])
    assert TOLD.search(verdict["error"]) and verdict["error"].startswith("Not validated: ")

    client = auth.client("operator")
    page = text(client.get(f"/entries/{entry_id}"))
    assert TOLD.search(page) and "No schema in DLQ_SCHEMAS covers" not in page
    result = app.test_cli_runner().invoke(args=["entries", "show", str(entry_id)])
    assert result.exit_code == 0 and TOLD.search(result.output), result.output
    assert "no schema in DLQ_SCHEMAS covers" not in result.output

    token = support.csrf_token(client, f"/entries/{entry_id}/edit")
    check = text(client.post(f"/entries/{entry_id}/validate", data={"payload": '{"price": 1.5}', "csrf_token": token},
                             headers={"HX-Request": "true"}))
    assert "It cannot be checked: the schema file orders.json" in check and "No schema covers" not in check

    reasons = api.post("/api/repair/preview", json={"ids": [entry_id]}, headers=operator).get_json()["cannot_reasons"]
    assert len(reasons) == 1 and TOLD.search(reasons[0]["reason"]) and "No schema covers" not in reasons[0]["reason"]

    refused = api.post(f"/api/entries/{entry_id}/republish", json={"version": 1}, headers=operator)
    assert refused.status_code == 422 and TOLD.search(refused.get_json()["error"]), refused.get_json()

    form = {"csrf_token": support.csrf_token(client, "/"), "by": "filter", "action": "republish",
            "subject": "orders.created"}
    preview = text(client.post("/bulk/preview", data=form))
    assert "2: Republishing it needs the override: the payload cannot be judged, as the schema file orders.json" \
           in preview, preview

    def job(body):
        made = api.post("/api/bulk", json=body, headers=operator)
        assert made.status_code == 202, made.get_json()
        support.jobs_settled(rt.engine)
        return {i["entry_id"]: i["result"] for i in api.get(f"/api/jobs/{made.get_json()['job']}",
                                                            headers=operator).get_json()["items"]}

    repaired = job({"action": "repair", "ids": [entry_id]})
    assert TOLD.search(repaired[entry_id]) and "No schema covers" not in repaired[entry_id]
    republished = job({"action": "republish", "ids": [other]})
    assert TOLD.search(republished[other]) and "needs the override" in republished[other]
    assert support.stream_messages(nats_server.url) == []  # nothing went out unjudged
