"""Saved views: a person saves the filters of the list or the groups page under a name, sees
their own and the shared ones, and deletes their own; admins share."""

from __future__ import annotations

import html as html_module
import re

import pytest

from . import support


def save(client, name: str, page: str = "list", **filters):
    """Post the Save view form as the list or groups page renders it."""
    data = {"csrf_token": support.csrf_token(client, "/"), "name": name, "page": page, **filters}
    return client.post("/views", data=data)


def view_ids(client) -> dict[str, int]:
    """Name -> id of the views /views lists to this client."""
    html = client.get("/views").get_data(as_text=True)
    names = [html_module.unescape(n) for n in re.findall(r'<td class="view-name"><a href="[^"]*">([^<]*)</a></td>', html)]
    ids = re.findall(r'action="/views/(\d+)/delete"', html)
    return dict(zip(names, map(int, ids))) if len(ids) == len(names) else {n: -1 for n in names}


@pytest.mark.both_databases
def test_a_viewer_saves_the_list_filters_and_the_view_opens_them(offline_app, auth):
    viewer = auth.client("viewer")
    response = save(viewer, "open orders", status="open", subject="orders.*", q="timeout")
    assert response.status_code == 303
    assert response.location == "/?status=open&subject=orders.%2A&q=timeout"
    page = viewer.get("/").get_data(as_text=True)
    assert 'aria-label="Saved views"' in page and ">open orders</a>" in page
    views = viewer.get("/views").get_data(as_text=True)
    assert "open orders" in views
    # Its filters as one reads them, not as a URL encodes them (subject=orders.%2A).
    shown = re.search(r'<td class="view-filters">(.*?)</td>', views).group(1)
    assert shown == "<code>status=open</code> <code>subject=orders.*</code> <code>q=timeout</code>", shown


def test_saving_a_name_again_replaces_its_filters(offline_app, auth):
    viewer = auth.client("viewer")
    save(viewer, "mine", status="open")
    assert save(viewer, "mine", status="closed").location == "/?status=closed"
    assert list(view_ids(viewer)) == ["mine"]


def test_a_groups_view_keeps_any_status(offline_app, auth):
    viewer = auth.client("viewer")
    assert save(viewer, "every group", page="groups", status="any").location == "/groups?status="
    assert save(viewer, "open groups", page="groups", status="open").location == "/groups?status=open"
    assert "every group" in viewer.get("/groups").get_data(as_text=True)
    assert "every group" not in viewer.get("/").get_data(as_text=True)
    assert "<code>status=any</code>" in viewer.get("/views").get_data(as_text=True)


def test_each_person_sees_their_own_views_and_the_shared_ones(offline_app, auth):
    viewer, operator, admin = auth.client("viewer"), auth.client("operator"), auth.client("admin")
    save(viewer, "viewer's")
    save(operator, "operator's")
    assert list(view_ids(viewer)) == ["viewer's"]
    assert list(view_ids(admin)) == []
    # An admin sees only the shared ones of others too, and shares by id.
    view_id = _id_of(offline_app, "operator's")
    response = admin.post(f"/views/{view_id}/share", data={"csrf_token": support.csrf_token(admin, "/")})
    assert response.status_code == 303
    assert sorted(view_ids(viewer)) == ["operator's", "viewer's"]
    assert "operator&#39;s" in viewer.get("/").get_data(as_text=True)
    admin.post(f"/views/{view_id}/share", data={"csrf_token": support.csrf_token(admin, "/"), "shared": "false"})
    assert list(view_ids(viewer)) == ["viewer's"]


def test_only_an_admin_shares(offline_app, auth):
    operator = auth.client("operator")
    save(operator, "mine")
    response = operator.post(f"/views/{_id_of(offline_app, 'mine')}/share",
                             data={"csrf_token": support.csrf_token(operator, "/")})
    assert response.status_code == 403


def test_another_user_cannot_delete_my_view_and_an_admin_can(offline_app, auth):
    viewer, operator, admin = auth.client("viewer"), auth.client("operator"), auth.client("admin")
    save(viewer, "mine")
    view_id = _id_of(offline_app, "mine")
    # Unshared, it is unknown to others; shared, it is visible but still not theirs to delete.
    assert operator.post(f"/views/{view_id}/delete",
                         data={"csrf_token": support.csrf_token(operator, "/")}).status_code == 404
    admin.post(f"/views/{view_id}/share", data={"csrf_token": support.csrf_token(admin, "/")})
    assert operator.post(f"/views/{view_id}/delete",
                         data={"csrf_token": support.csrf_token(operator, "/")}).status_code == 403
    assert "mine" in view_ids(viewer)
    assert admin.post(f"/views/{view_id}/delete",
                      data={"csrf_token": support.csrf_token(admin, "/")}).status_code == 303
    assert view_ids(viewer) == {}


def test_the_owner_deletes_their_view(offline_app, auth):
    viewer = auth.client("viewer")
    save(viewer, "mine")
    response = viewer.post(f"/views/{_id_of(offline_app, 'mine')}/delete",
                           data={"csrf_token": support.csrf_token(viewer, "/")})
    assert response.status_code == 303 and view_ids(viewer) == {}


@pytest.mark.parametrize("name,filters,sentence", [
    ("x", {"status": "lost"}, "status 'lost' is not valid"),
    ("x", {"subject": "a..b"}, "is not a NATS subject"),
    ("x", {"since": "yesterday"}, "since 'yesterday' is not valid"),
    ("", {}, "1 to 100 printable characters"),
    ("n" * 101, {}, "1 to 100 printable characters"),
    # Left out, each saved a view of every entry (or one that is a 400 to whoever opens it).
    ("x", {"subjet": "payments.>"}, "'subjet' is not a parameter of this request: did you mean 'subject'?"),
    ("x", {"group": "99999"}, "group '99999' is not a failure group"),
    ("x", {"group": "abc"}, "group 'abc' is not a failure group"),
])
def test_a_bad_name_or_filter_is_a_400_with_a_sentence(offline_app, auth, name, filters, sentence):
    viewer = auth.client("viewer")
    response = save(viewer, name, **filters)
    assert response.status_code == 400 and sentence in html_module.unescape(response.get_data(as_text=True))
    assert view_ids(viewer) == {}


def test_an_unknown_page_is_a_400(offline_app, auth):
    assert save(auth.client("viewer"), "x", page="audit").status_code == 400


def test_saving_needs_the_csrf_token(offline_app, auth):
    viewer = auth.client("viewer")
    response = viewer.post("/views", data={"name": "x", "page": "list"})
    assert response.status_code in (400, 403)
    assert view_ids(viewer) == {}


def test_an_api_token_saves_views_of_its_own(offline_app, tokens):
    client = offline_app.test_client()
    response = client.post("/views", data={"name": "script", "page": "list", "status": "open"},
                           headers=support.bearer(tokens["viewer"]))
    assert response.status_code == 303
    from dlq_dashboard.entries.saved_views import views_for
    from dlq_dashboard.runtime import runtime_of
    [view] = views_for(runtime_of(offline_app).engine, "token:test-viewer")
    assert (view.name, view.query) == ("script", "status=open")


def _id_of(app, name: str) -> int:
    from sqlalchemy import select

    from dlq_dashboard.db.models import SavedView
    from dlq_dashboard.runtime import runtime_of

    with runtime_of(app).engine.connect() as conn:
        return conn.execute(select(SavedView.id).where(SavedView.name == name)).scalar_one()


@pytest.mark.both_databases
def test_the_views_each_person_sees_are_theirs_and_the_shared_ones_whoever_asked_before(offline_app):
    # views_for runs one statement built once, the owner and the page bound.
    from dlq_dashboard.entries.saved_views import save_view, share_view, views_for
    from dlq_dashboard.runtime import runtime_of
    from dlq_dashboard.times import utcnow

    engine = runtime_of(offline_app).engine
    save_view(engine, "ann", "mine", "list", "status=open", utcnow())
    save_view(engine, "ann", "grouped", "groups", "", utcnow())
    shared = save_view(engine, "bob", "team", "list", "subject=orders.%2A", utcnow())
    save_view(engine, "bob", "private", "list", "reason=fatal", utcnow())
    share_view(engine, shared.id, True)
    for _ in range(2):
        assert [(v.owner, v.name) for v in views_for(engine, "ann", "list")] == [("ann", "mine"), ("bob", "team")]
        assert [(v.owner, v.name) for v in views_for(engine, "bob", "list")] == [("bob", "private"), ("bob", "team")]
        assert [v.name for v in views_for(engine, "ann")] == ["grouped", "mine", "team"]
        assert [v.name for v in views_for(engine, "ann", "groups")] == ["grouped"]
        assert [v.name for v in views_for(engine, "carl", "groups")] == []


def test_a_name_refused_leads_back_to_the_page_it_was_saved_from(offline_app, auth):
    """A name of spaces ended on an error page whose only way on was the unfiltered list."""
    viewer = auth.client("viewer")
    token = support.csrf_token(viewer, "/?status=open&subject=orders.*")
    refused = viewer.post("/views", data={"csrf_token": token, "name": "   ", "page": "list", "status": "open",
                                          "subject": "orders.*"},
                          headers={"Referer": "http://localhost/?status=open&subject=orders.*"})
    assert refused.status_code == 400
    page = refused.get_data(as_text=True)
    assert '<a href="/?status=open&amp;subject=orders.*">Back to the page you were on</a>' in page
    # Never another site's address.
    elsewhere = viewer.post("/views", data={"csrf_token": token, "name": "   ", "page": "list"},
                            headers={"Referer": "https://elsewhere.example/phish"})
    assert "Back to the page you were on" not in elsewhere.get_data(as_text=True)


@pytest.mark.both_databases
def test_get_api_views_answers_what_the_views_page_shows_the_caller(offline_app, auth):
    from dlq_dashboard.accounts import create_token, read_scopes
    from dlq_dashboard.entries.saved_views import save_view, share_view
    from dlq_dashboard.runtime import runtime_of
    from dlq_dashboard.times import utcnow

    viewer, admin = auth.client("viewer"), auth.client("admin")
    save(viewer, "open orders", status="open", subject="orders.*", q="timeout")
    engine = runtime_of(offline_app).engine
    for name, query, shared in (("billing", "subject=billing.%3E", True), ("orders", "subject=orders.%3E", True),
                                ("private", "reason=fatal", False)):
        share_view(engine, save_view(engine, "ops", name, "groups", query, utcnow()).id, shared)

    body = viewer.get("/api/views").get_json()
    assert body == {"views": [
        {"id": _id_of(offline_app, "billing"), "name": "billing", "owner": "ops", "shared": True, "page": "groups",
         "filters": {"subject": "billing.>"}, "query": "subject=billing.%3E", "url": "/groups?subject=billing.%3E"},
        {"id": _id_of(offline_app, "orders"), "name": "orders", "owner": "ops", "shared": True, "page": "groups",
         "filters": {"subject": "orders.>"}, "query": "subject=orders.%3E", "url": "/groups?subject=orders.%3E"},
        {"id": _id_of(offline_app, "open orders"), "name": "open orders", "owner": "viewer-user",
         "shared": False, "page": "list", "filters": {"status": "open", "subject": "orders.*", "q": "timeout"},
         "query": "status=open&subject=orders.%2A&q=timeout", "url": "/?status=open&subject=orders.%2A&q=timeout"},
    ]}
    assert [v["name"] for v in body["views"]] == list(view_ids(viewer))
    assert [v["name"] for v in admin.get("/api/views").get_json()["views"]] == ["billing", "orders"]
    # A scoped caller: only the shared views of its scopes, as /views shows it.
    token = create_token(engine, "orders-reader", "viewer", read_scopes(["orders.>"]))
    scoped = offline_app.test_client().get("/api/views", headers=support.bearer(token))
    assert [v["name"] for v in scoped.get_json()["views"]] == ["orders"]
    assert offline_app.test_client().get("/api/views").status_code == 401
