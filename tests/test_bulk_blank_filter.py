"""A bulk selection whose filter values are all blank ("" or spaces: no filter, as the list's
empty inputs are) took every open entry: POST /api/bulk {"filter": {"subject": ""}} closed all of
them, ``jobs start close --subject ""`` said it would close every one, where a filter naming
nothing ({}, no option) is refused. It is refused the same way (a 400, exit 2), the sentence
naming the blank filters; nothing is made. A blank filter beside one with a value stays no filter."""

from __future__ import annotations

import pytest

from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = pytest.mark.both_databases

FIELDS = (("Customer", "/customer/id"),)
BLANK = [{"subject": ""}, {"subject": " "}, {"status": " "}, {"q": "   "}, {"field.Customer": ""},
         {"subject": "", "q": " ", "reason": None}]


@pytest.fixture
def offline_app(make_app, database_url):
    """The offline app with a key field (field.Customer)."""
    return make_app(database_url=database_url, list_fields=FIELDS)


def _store(app) -> list[int]:
    return [support.dead_letter(app, seq, subject=subject, payload=b'{"customer": {"id": "C-9"}}')
            for seq, subject in ((1, "orders.created"), (2, "orders.paid"))]


def _jobs(app) -> int:
    with runtime_of(app).engine.connect() as conn:
        return conn.exec_driver_sql("SELECT COUNT(*) FROM jobs").scalar_one()


@pytest.mark.parametrize("flt", BLANK)
def test_a_bulk_request_whose_filters_are_all_blank_is_refused_and_names_them(offline_app, tokens, flt):
    _store(offline_app)
    client, headers = offline_app.test_client(), support.bearer(tokens["operator"])
    for path, body in (("/api/bulk", {"action": "close", "note": "only subject X"}), ("/api/repair/preview", {})):
        refused = client.post(path, json={**body, "filter": flt}, headers=headers)
        assert refused.status_code == 400, refused.get_data(as_text=True)
        error = refused.get_json()["error"]
        assert error.startswith("filter names no filter (") and "so it would take every open entry" in error
        for name, value in flt.items():
            if value is not None:
                assert f"{name} {value!r}" in error
    assert _jobs(offline_app) == 0


def test_a_blank_filter_beside_one_with_a_value_is_no_filter(offline_app, tokens):
    created, _ = _store(offline_app)
    answer = offline_app.test_client().post(
        "/api/bulk", json={"action": "close", "filter": {"subject": "orders.created", "q": " ", "field.Customer": ""}},
        headers=support.bearer(tokens["operator"]))
    assert answer.status_code == 202, answer.get_data(as_text=True)
    # The items are chosen when the job is made: the job's page lists them, run or not.
    job = offline_app.test_client().get(f"/api/jobs/{answer.get_json()['job']}",
                                        headers=support.bearer(tokens["viewer"])).get_json()
    assert job["total"] == 1 and job["selection_text"] == "filter status=open subject=orders.created"
    assert [item["entry_id"] for item in job["items"]] == [created]


@pytest.mark.parametrize("query", [{"subject": " "}, {"q": "  ", "stream": " "}])
@pytest.mark.parametrize("action", ["close", "patch", "repair"])
def test_the_bulk_forms_refuse_a_filter_of_blank_values(offline_app, auth, query, action):
    _store(offline_app)
    client = auth.client("operator")
    preview = client.get("/bulk/preview", query_string={"by": "filter", "action": action, **query})
    page = preview.get_data(as_text=True)
    assert preview.status_code == 400, page
    assert "filter names no filter (" in page and "so it would take every open entry" in page
    assert "will be closed" not in page
    started = client.post("/bulk", data={"by": "filter", "action": action, "patch": "[]", **query,
                                         "csrf_token": support.csrf_token(client, "/")})
    assert started.status_code == 400, started.get_data(as_text=True)
    assert _jobs(offline_app) == 0


@pytest.mark.parametrize("options, said", [
    (["--subject", ""], "--subject '' is blank"),
    (["--subject", " "], "--subject ' ' is blank"),
    (["--field", "Customer="], "--field Customer= is blank"),
    (["--q", " ", "--status", ""], "--q ' ' and --status '' are blank"),
])
def test_jobs_start_with_only_blank_filters_is_refused_with_exit_2(offline_app, options, said):
    _store(offline_app)
    runner = offline_app.test_cli_runner()
    for extra in (["--dry-run"], []):
        ran = runner.invoke(args=["jobs", "start", "close", *options, *extra])
        assert ran.exit_code == 2, ran.output
        assert "Choose the entries by --id or by at least one filter: " + said in ran.output
        assert "which is no filter and would take every open entry" in ran.output
    assert _jobs(offline_app) == 0
    nothing = runner.invoke(args=["jobs", "start", "close", "--dry-run"])
    assert nothing.exit_code == 2 and "by at least one filter (--status open" in nothing.output
    kept = runner.invoke(args=["jobs", "start", "close", "--subject", "orders.created", "--q", "", "--dry-run"])
    assert kept.exit_code == 0 and "Would close 1 entr" in kept.output, kept.output
