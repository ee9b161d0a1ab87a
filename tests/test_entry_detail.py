"""One entry detail value (access/detail.py): the entry page, GET /api/entries/<id> and
`entries show --json` tell the same verdict, group and replays, each as the reader may see it."""

from __future__ import annotations

import html as htmllib
import json
import re
from datetime import timedelta

import jsonschema
import pytest
from sqlalchemy import insert

from dlq_dashboard.accounts import create_user
from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.db.models import Republish
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.scopes import parse_scopes
from dlq_dashboard.times import utcnow

from . import support

MASK = ("/customer/email",)
# The current schema refuses the original's e-mail, and its message quotes it.
SCHEMA = {"x-subjects": ["orders.*"], "type": "object", "required": ["customer_id"],
          "properties": {"customer": {"type": "object", "properties": {"email": {"pattern": "^[a-z]+$"}}}}}


@pytest.fixture
def masked_app(tmp_path, database_url, make_app):
    """The app (nothing started) with DLQ_MASK hiding /customer/email and an orders schema."""
    return make_app(mask=MASK, schemas_dir=support.orders_schema_folder(tmp_path, SCHEMA))


def original_and_replays(app) -> tuple[int, list[int]]:
    """An entry whose republish failed again twice; the replays quote a masked value of their own."""
    sent = b'{"customer": {"email": "alice@example.com"}}'
    original = support.dead_letter(app, 1, payload=sent,
                                   Dlq_Reason="fatal", Dlq_Error="no account for alice@example.com")
    replays = [support.dead_letter(app, seq, payload=b'{"customer": {"email": "bob@example.com"}}',
                                   Dlq_Reason="fatal", Dlq_Error="still no account for bob@example.com",
                                   Dlq_Replay_Of="DLQ:1", Dlq_Original_Msg_Id=f"dlq-dashboard:DLQ:1:e1:v{seq}")
               for seq in (2, 3)]
    # Both republishes of the original (its payload as it was), as their intents record them:
    # a replay is linked to an entry that was republished (entries/replays.py).
    with write_transaction(runtime_of(app).engine) as conn:
        conn.execute(insert(Republish), [{"entry_id": original, "version": seq, "msg_id": f"dlq-dashboard:DLQ:1:e1:v{seq}",
                                          "subject": "orders.created", "payload": sent, "state": "published",
                                          "actor": "operator", "created_at": utcnow()} for seq in (2, 3)])
    return original, replays


def text(fragment: str) -> str:
    return htmllib.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def page_facts(page: str) -> dict:
    """What the entry page says of the verdict, the group, the replays and the original."""
    why = page.split("<h3>Against the current schema</h3>")[1].split("</section>")[0]
    if m := re.search(r"Invalid against <code>([^<]+)</code>", why):
        verdict = (False, m.group(1), [text(s) for s in re.findall(r'<span class="message">(.*?)</span>', why)])
    elif m := re.search(r"Valid against <code>([^<]+)</code>", why):
        verdict = (True, m.group(1), [])
    else:
        verdict = (None, None, [])
    group = re.search(r'data-group="(\d+)">(.*?)</a>', page)
    timeline = page.split('id="timeline-title"')[1]
    replays = [int(i) for i in re.findall(r'<li class="moment moment-failed-again">.*?href="/entries/(\d+)"',
                                          timeline, re.S)]
    again = re.search(r'class="status status-\w+ failed-again" href="/entries/(\d+)"', page)
    original = re.search(r'This message is a republish of\s+<a href="/entries/(\d+)"', page)
    return {"verdict": verdict, "group": (int(group.group(1)), text(group.group(2))) if group else None,
            "replays": replays, "failed_again": int(again.group(1)) if again else None,
            "original": int(original.group(1)) if original else None}


def json_facts(body: dict) -> dict:
    """The same, from GET /api/entries/<id>."""
    verdict = body["current_schema"]
    return {"verdict": (verdict["valid"], verdict["schema"], [e["message"] for e in verdict["errors"]]),
            "group": (body["group"]["id"], body["group"]["label"]) if body["group"] else None,
            "replays": [r["id"] for r in body["replays"]], "failed_again": body["failed_again"],
            "original": body["original"]}


def the_document_holds(app, body: dict) -> None:
    """``body`` is an EntryDetail as the OpenAPI document describes it."""
    doc = app.test_client().get("/api/openapi.json").get_json()
    jsonschema.Draft202012Validator({**doc, "$ref": "#/components/schemas/EntryDetail"}).validate(body)


@pytest.mark.both_databases
def test_the_page_and_its_json_tell_the_same_verdict_group_and_replays(masked_app):
    original, replays = original_and_replays(masked_app)
    for role in ("viewer", "operator"):
        client = support.logged_in(masked_app, role)
        for entry_id in (original, *replays):
            page = client.get(f"/entries/{entry_id}").get_data(as_text=True)
            body = client.get(f"/api/entries/{entry_id}").get_json()
            assert page_facts(page) == json_facts(body), (role, entry_id)
            the_document_holds(masked_app, body)
        facts = json_facts(client.get(f"/api/entries/{original}").get_json())
        assert facts["replays"] == replays and facts["failed_again"] == replays[-1] and facts["original"] is None
        assert facts["verdict"][:2] == (False, "orders.json") and facts["group"] is not None
        assert json_facts(client.get(f"/api/entries/{replays[0]}").get_json())["original"] == original
    # The verdict's message quotes the payload: a viewer reads it masked on both, an operator whole.
    viewer = support.logged_in(masked_app, "viewer").get(f"/api/entries/{original}").get_json()
    operator = support.logged_in(masked_app, "operator").get(f"/api/entries/{original}").get_json()
    assert any("alice@example.com" in e["message"] for e in operator["current_schema"]["errors"])
    assert not any("alice" in e["message"] for e in viewer["current_schema"]["errors"])
    assert viewer["current_schema"]["error"] is None and viewer["current_schema"]["valid"] is False


def test_a_viewer_reads_a_replays_error_masked_on_the_timeline_and_in_the_json(masked_app):
    original, replays = original_and_replays(masked_app)
    viewer, operator = support.logged_in(masked_app, "viewer"), support.logged_in(masked_app, "operator")
    page = viewer.get(f"/entries/{original}").get_data(as_text=True)
    timeline = page.split('id="timeline-title"')[1]
    assert timeline.count("The republished message failed again") == 2
    assert "bob@example.com" not in page and "still no account for •••" in timeline
    body = viewer.get(f"/api/entries/{original}")
    assert "bob@example.com" not in body.get_data(as_text=True)
    assert [r["error"] for r in body.get_json()["replays"]] == ["still no account for •••"] * 2
    # The replay's own page masks it the same way; an operator reads it whole everywhere.
    assert "bob@example.com" not in viewer.get(f"/entries/{replays[0]}").get_data(as_text=True)
    assert "still no account for bob@example.com" in operator.get(f"/entries/{original}").get_data(as_text=True)
    assert [r["error"] for r in operator.get(f"/api/entries/{original}").get_json()["replays"]] == \
        ["still no account for bob@example.com"] * 2


def test_a_payload_the_reader_cannot_validate_says_why_in_the_json(masked_app):
    hidden = support.dead_letter(masked_app, 1, payload=b"not json at all")
    viewer, operator = support.logged_in(masked_app, "viewer"), support.logged_in(masked_app, "operator")
    verdict = viewer.get(f"/api/entries/{hidden}").get_json()["current_schema"]
    assert verdict == {"schema": None, "valid": None, "errors": [],
                       "error": "Not validated: the payload is hidden from viewers (DLQ_MASK).", "decompressed": None}
    assert "Not shown: the payload is hidden from viewers." in viewer.get(f"/entries/{hidden}").get_data(as_text=True)
    assert operator.get(f"/api/entries/{hidden}").get_json()["current_schema"]["valid"] is False


def test_show_json_is_the_apis_entry_with_its_verdict_group_and_replays(masked_app):
    original, replays = original_and_replays(masked_app)
    runner = masked_app.test_cli_runner()
    shown = runner.invoke(args=["entries", "show", str(original), "--json"])
    assert shown.exit_code == 0, shown.output
    # The command line reads on the server as an operator does: nothing masked.
    api = support.logged_in(masked_app, "operator").get(f"/api/entries/{original}").get_json()
    cli = json.loads(shown.stdout)
    assert set(cli) == set(api) >= {"current_schema", "group", "replays", "failed_again", "last_sent", "original"}
    assert cli == api and [r["id"] for r in cli["replays"]] == replays
    text_output = runner.invoke(args=["entries", "show", str(original)]).output
    assert f"group:            {api['group']['label']} (group {api['group']['id']})" in text_output
    assert f"failed again:     entry {replays[-1]}" in text_output
    verdict = next(line for line in text_output.splitlines() if line.startswith("current schema:"))
    assert verdict.startswith("current schema:   invalid against orders.json: ")
    assert "/customer/email: 'alice@example.com' does not match" in verdict


def test_the_value_is_built_below_the_web_from_the_store_the_schemas_and_a_reader(masked_app):
    from dlq_dashboard.access.detail import build_entry_detail
    from dlq_dashboard.access.reader import Reader
    from dlq_dashboard.errors import EntryNotFound
    from dlq_dashboard.masking import Mask

    rt = runtime_of(masked_app)
    original, replays = original_and_replays(masked_app)
    seen = build_entry_detail(rt.store, rt.schemas, original, Reader.of("viewer", Mask.parse(MASK)))
    whole = build_entry_detail(rt.store, rt.schemas, original, Reader.of("operator", Mask.parse(MASK)))
    assert [r.id for r in seen.replays] == replays and seen.failed_again.id == replays[-1]
    assert [r.error for r in seen.replays] == ["still no account for •••"] * 2
    assert [r.error for r in whole.replays] == ["still no account for bob@example.com"] * 2
    assert seen.entry.payload_text == '{"customer": {"email": "•••"}}'
    assert seen.pointers == [e["path"] for e in seen.current_schema.errors] and "/customer/email" in seen.pointers
    assert seen.group.id == whole.group.id and seen.last_sent.msg_id == "dlq-dashboard:DLQ:1:e1:v3" and seen.original is None
    assert build_entry_detail(rt.store, rt.schemas, replays[0], Reader("admin")).original.id == original
    with pytest.raises(EntryNotFound):
        build_entry_detail(rt.store, rt.schemas, 999999, Reader("admin"))


def test_a_republish_of_an_entry_outside_the_readers_scopes_says_so_without_telling_whether_it_exists(
        offline_app):
    """A billing reader's page of a billing replay of an orders entry said "(not in this
    dashboard's database)", which was untrue; it must not say the orders entry exists either."""
    orders = support.dead_letter(offline_app, 1, "orders.created")
    of_orders = support.dead_letter(offline_app, 2, "billing.paid", Dlq_Replay_Of="DLQ:1")
    of_nothing = support.dead_letter(offline_app, 3, "billing.paid", Dlq_Replay_Of="DLQ:99")
    with write_transaction(runtime_of(offline_app).engine) as conn:  # the orders entry was republished (before)
        conn.execute(insert(Republish).values(entry_id=orders, version=1, msg_id="sent-1", subject="orders.created",
                                              payload=b"{}", state="published", actor="operator",
                                              created_at=utcnow() - timedelta(minutes=1)))
    create_user(runtime_of(offline_app).engine, "billing-reader", support.PASSWORD, "viewer",
                scopes=parse_scopes(["billing.>"]))
    scoped = offline_app.test_client()
    assert support.login(scoped, "billing-reader", support.PASSWORD).status_code == 302

    def sentence(client, entry_id: int) -> str:
        page = client.get(f"/entries/{entry_id}").get_data(as_text=True)
        return " ".join(text(re.search(r"This message is a republish of.*?</p>", page, re.S).group(0)).split())

    assert sentence(scoped, of_orders) == ("This message is a republish of DLQ:1, which is not among the "
                                           "entries you may read: its republish failed again.")
    # One held and one not held read alike but for the reference: neither is told.
    assert sentence(scoped, of_nothing) == sentence(scoped, of_orders).replace("DLQ:1", "DLQ:99")
    assert scoped.get(f"/api/entries/{of_orders}").get_json()["original"] is None
    # A reader who sees everything is linked to the one held and told the other is not held.
    unscoped = support.logged_in(offline_app, "viewer")
    assert sentence(unscoped, of_orders) == (f"This message is a republish of entry {orders} (DLQ:1): "
                                             "its republish failed again.")
    assert sentence(unscoped, of_nothing) == ("This message is a republish of DLQ:99 (no entry this "
                                              "dashboard's database republished): its republish failed again.")
