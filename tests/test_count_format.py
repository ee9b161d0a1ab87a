"""Every count on the pages is written one way, with its thousands separated ("1,234"): the
templates print counts through the one ``number`` filter (web/templating.py), and the pages
that count many entries (the list's counts, a bulk preview, the jobs and a job) say "1,234"."""

from __future__ import annotations

import re
from pathlib import Path

from dlq_dashboard.actions.bulk.jobs import create_job
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.web.templating import number

from . import support
from .demo_entries import store_demo_entries

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
# Names templates give counts; an expression ending in one prints a count.
COUNT_NAMES = {"count", "total", "done", "failed", "skipped", "pending", "cancelled", "counted", "missing",
               "left_out_invalid", "unjudged", "pass", "fail", "unpatchable", "refused", "lifted", "with_override", "peak",
               "bound", "stored", "n", "new_count", "length"}
# Not counts: line numbers of the editor's gutter, a bulk patch's reason for skipping an example.
NOT_COUNTS = {("edit.html", "n"), ("bulk_patch.html", "skipped")}
EXPRESSION = re.compile(r"\{\{-?\s*(.+?)\s*-?\}\}", re.S)


def test_the_number_filter_separates_thousands():
    assert [number(n) for n in (0, 999, 1234, 15166, 1234567, None)] == ["0", "999", "1,234", "15,166", "1,234,567", "—"]


def test_every_count_a_template_prints_goes_through_the_number_filter():
    bare = []
    for path in sorted(TEMPLATES.glob("*.html")):
        text = path.read_text(encoding="utf-8")
        for match in EXPRESSION.finditer(text):
            expression = match.group(1)
            if "|" in expression or "(" in expression or " if " in expression:
                continue  # filtered (|number, |relative, ...), a call, or words chosen by a condition
            last = re.split(r"[.\[\]'\" ]+", expression.strip(" ]'\""))[-1]
            if last in COUNT_NAMES and (path.name, last) not in NOT_COUNTS:
                line = text.count("\n", 0, match.start()) + 1
                bare.append(f"{path.name}:{line}: {{{{ {expression} }}}}")
    assert not bare, "counts printed without |number:\n" + "\n".join(bare)


def test_the_pages_that_count_many_entries_write_1_234(app):
    rt = runtime_of(app)
    store_demo_entries(rt.engine, 1234)
    viewer, operator = support.logged_in(app, "viewer"), support.logged_in(app, "operator")
    summary = viewer.get("/summary?status=open").get_data(as_text=True)
    assert "<strong>1,234</strong>" in summary and "1,234 entries stored" in summary

    token = support.csrf_token(operator, "/")
    preview = operator.post("/bulk/preview", data={"by": "filter", "status": "open", "action": "close",
                                                   "csrf_token": token}).get_data(as_text=True)
    assert "<strong>1,234</strong> entries will be closed" in preview
    assert "<li>1,234 open</li>" in preview

    job_id = create_job(rt, "close", actor="ann", filter_args={"status": "open"})
    support.jobs_settled(rt.engine, timeout=120)
    job = operator.get(f"/jobs/{job_id}").get_data(as_text=True)
    assert "1,234 done, 0 failed, 0 skipped" in job and "0 to go, of 1,234." in job
    jobs = operator.get("/jobs").get_data(as_text=True)
    assert "1,234 done, 0 failed of 1,234" in jobs
    assert "1,234 done" in jobs
    shown = re.sub(r"<[^>]*>", " ", job + jobs + preview + summary)  # the text, not the forms' values
    bare = re.search(r"(?<![\d,.:-])1234(?![\d,])", shown)
    assert not bare, shown[bare.start() - 200:bare.end() + 50]
