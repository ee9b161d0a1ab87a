"""Small things people read: a job's progress bar as wide as its page, and a name in a Who
column kept whole ("demo", never "dem / o"), at 1440 and 390 px; an entry says where it was
stored in words."""

from __future__ import annotations

import pytest

from dlq_dashboard.actions.bulk.jobs import create_job
from dlq_dashboard.runtime import runtime_of

from . import support


@pytest.mark.parametrize("width", [1440, 390])
def test_a_jobs_bar_fills_its_page_and_a_short_name_is_never_broken(app, live_server, page, width):
    rt = runtime_of(app)
    entry_id = support.dead_letter(app, 1, Dlq_Reason="fatal", Dlq_Error="x " * 200)
    job_id = create_job(rt, "close", actor="demo", ids=[entry_id], note="n " * 300)
    support.jobs_settled(rt.engine)
    support.sign_in(page, live_server, app, "viewer")
    page.set_viewport_size({"width": width, "height": 900})

    page.goto(f"{live_server}/jobs/{job_id}")
    bar = page.locator("#job-progress progress").bounding_box()
    main = page.locator("main").evaluate("e => e.clientWidth - parseFloat(getComputedStyle(e).paddingLeft) "
                                         "- parseFloat(getComputedStyle(e).paddingRight)")
    assert bar["width"] >= main - 2, f"the bar is {bar['width']} px of {main}"

    for path in ("/audit", "/jobs"):
        page.goto(live_server + path)
        cell = page.locator("td.who", has_text="demo").first
        lines = cell.evaluate("e => { const r = document.createRange(); r.selectNodeContents(e); return r.getClientRects().length; }")
        assert lines == 1, f"{path} at {width} px: 'demo' takes {lines} lines"


def test_an_entry_says_where_it_was_stored_in_words(app):
    entry_id = support.dead_letter(app, 6, Dlq_Reason="fatal")
    page = support.logged_in(app, "viewer").get(f"/entries/{entry_id}").get_data(as_text=True)
    assert "message 6 of stream DLQ:" in page and "the service's dead-letter copy" in page
    assert "(dlq" not in page
