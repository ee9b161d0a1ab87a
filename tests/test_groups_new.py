"""/groups tells of dead letters that arrived after it was shown, as the list does: a poll every
5 s (/groups/new) under the page's filters, with a link that shows the groups again under the
same filters, trend window and triage filters. An operator who kept the groups open through an
incident saw the counts of the moment they opened it."""

from __future__ import annotations

import re
from html import unescape

import pytest

from dlq_dashboard import accounts
from dlq_dashboard.runtime import runtime_of

from . import support

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture
def client(offline_app):
    return support.logged_in(offline_app, "viewer")


def poll_of(html: str) -> str:
    found = re.search(r'hx-get="(/groups/new\?[^"]+)"', html)
    assert found, html[:2000]
    return unescape(found.group(1))


def test_the_groups_page_counts_the_dead_letters_that_arrive_after_it_under_its_filters(offline_app, client):
    top = support.dead_letter(offline_app, 1, "orders.created", Dlq_Reason="fatal", Dlq_Error="boom")
    support.dead_letter(offline_app, 2, "payments.captured", Dlq_Reason="fatal", Dlq_Error="boom")
    html = client.get("/groups?subject=orders.*&window=1h&state=open").get_data(as_text=True)
    poll = poll_of(html)
    assert f"after={top}" in poll and "window=1h" in poll and "state=open" in poll
    assert 'hx-trigger="every 5s"' in html
    assert "new — show" not in client.get(poll).get_data(as_text=True)

    support.dead_letter(offline_app, 3, "payments.captured", Dlq_Reason="fatal", Dlq_Error="boom")  # not shown here
    assert "new — show" not in client.get(poll).get_data(as_text=True)
    support.dead_letter(offline_app, 4, "orders.created", Dlq_Reason="fatal", Dlq_Error="boom")
    support.dead_letter(offline_app, 5, "orders.created", Dlq_Reason="max_deliveries", Dlq_Error="timeout")
    answer = client.get(poll)
    assert answer.status_code == 200
    fragment = answer.get_data(as_text=True)
    assert "2 new — show" in fragment
    show = unescape(re.search(r'href="([^"]+)"', fragment).group(1))
    assert show.startswith("/groups?") and "after=" not in show
    for kept in ("subject=orders.*", "window=1h", "state=open"):
        assert kept in show, show
    shown = client.get(show, headers={"HX-Request": "true"}).get_data(as_text=True)
    assert "timeout" in shown  # the new group is there
    assert f"after={top}" not in poll_of(shown)  # and the next poll counts from the newest


def test_a_group_page_of_any_status_polls_for_any_status(offline_app, client):
    top = support.dead_letter(offline_app, 1, "orders.created", Dlq_Error="boom")
    poll = poll_of(client.get("/groups?status=").get_data(as_text=True))
    assert f"after={top}" in poll and "status=any" in poll


def test_an_empty_groups_page_counts_from_nothing(offline_app, client):
    poll = poll_of(client.get("/groups").get_data(as_text=True))
    assert "after=0" in poll
    support.dead_letter(offline_app, 1, "orders.created", Dlq_Error="boom")
    assert "1 new — show" in client.get(poll).get_data(as_text=True)


@pytest.mark.parametrize("query, words", [
    ("after=x", "after"), ("after=1&subjet=orders", "subject"), ("after=1&state=lost", "lost"),
    ("after=1&window=2h", "window"),
])
def test_a_bad_poll_is_a_400_that_names_the_parameter(client, query, words):
    answer = client.get(f"/groups/new?{query}")
    assert answer.status_code == 400 and words in answer.get_data(as_text=True)


def test_a_scoped_reader_is_told_only_of_the_dead_letters_its_scopes_reach(offline_app):
    accounts.create_user(runtime_of(offline_app).engine, "orders-viewer", support.PASSWORD, "viewer",
                         accounts.read_scopes(["orders.>"]))
    client = offline_app.test_client()
    assert support.login(client, "orders-viewer", support.PASSWORD).status_code == 302
    support.dead_letter(offline_app, 1, "orders.created", Dlq_Error="boom")
    poll = poll_of(client.get("/groups").get_data(as_text=True))
    support.dead_letter(offline_app, 2, "payments.captured", Dlq_Error="boom")
    assert "new — show" not in client.get(poll).get_data(as_text=True)
    support.dead_letter(offline_app, 3, "orders.created", Dlq_Error="boom")
    assert "1 new — show" in client.get(poll).get_data(as_text=True)
