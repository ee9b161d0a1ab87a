"""The visibility layer on its own: who is asking (Reader), and that each read returns what the
reader may see without changing what it was given (tests/test_visibility_generated.py walks
every channel over a real database)."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone

from dlq_dashboard.access import visible
from dlq_dashboard.access.reader import Reader
from dlq_dashboard.access.unread import GONE, TOO_MANY
from dlq_dashboard.entries.fields import key_fields
from dlq_dashboard.entries.groups import Group
from dlq_dashboard.entries.view import EntryView
from dlq_dashboard.masking import MASKED, Mask

MASK = Mask.parse(["/email", "X-Card"])
EMAIL = "alice@example.com"
VIEWER = Reader.of("viewer", MASK)
FIELDS = key_fields((("Email", "/email"),))


def _entry(entry_id: int = 7, **changes) -> EntryView:
    values = dict(id=entry_id, status="open", version=1, dlq_stream="DLQ", dlq_seq=entry_id,
                  original_subject="orders.created", original_stream=None, original_seq=None, consumer=None,
                  original_msg_id=None, reason="fatal", error=f"no account for {EMAIL}", schema_errors=None,
                  deliveries=1, failed_at=None, received_at=datetime(2026, 12, 1, tzinfo=timezone.utc),
                  headers={"X-Card": ["4111"]}, payload=json.dumps({"email": EMAIL}).encode(),
                  payload_available=True, replay_of=None, sources="dlq", notes=[], closed_by=None,
                  closed_at=None, close_note=None)
    return EntryView(**{**values, **changes})


class FakeStore:
    """The lookups the layer makes of the store for jobs, the audit and groups (none purged)."""

    def __init__(self, *entries: EntryView, groups: dict | None = None, jobs: dict | None = None):
        self.entries = {e.id: e for e in entries}
        self.groups = groups or {}
        self.jobs = jobs or {}

    def job_entry_ids(self, job_ids, per_job):
        return {j: self.jobs[j][:per_job] for j in job_ids if j in self.jobs}

    def entries_by_id(self, ids):
        return {i: self.entries[i] for i in ids if i in self.entries}

    def newest_of_groups(self, ids):
        return {i: self.groups[i] for i in ids if i in self.groups}

    def job_sizes(self, ids):
        return {j: (len(self.jobs[j]), False) for j in ids if j in self.jobs}

    def group_sizes(self, ids):
        return {g: (1, False) for g in ids if g in self.groups}


def test_only_a_viewer_reads_through_the_mask():
    assert Reader.of("viewer", MASK).mask is MASK
    assert Reader.of("operator", MASK).mask is None and Reader.of("admin", MASK).mask is None
    assert Reader.of(None, MASK).mask is MASK  # nobody signed in reads as the least
    assert Reader.of("viewer", Mask()).mask is None  # nothing masked
    assert Reader.of("operator", None).may("viewer") and not VIEWER.may("operator")


def test_a_viewer_reads_an_entry_and_a_replay_masked_and_the_entry_as_stored_is_unchanged():
    stored = _entry()
    before = copy.deepcopy(stored)
    seen = visible.entry(VIEWER, stored)
    assert EMAIL not in seen.error and seen.headers["X-Card"] == [MASKED]
    assert stored == before
    # A replay's error quoting a value hidden in the entry it replays, though not in its own payload.
    replay = _entry(8, payload=b'{"order_id": 1}', headers={}, error=f"still no account for {EMAIL}")
    assert visible.replays(VIEWER, [replay], seen)[0].error == f"still no account for {MASKED}"
    assert visible.replays(Reader.of("operator", MASK), [replay], stored) == [replay]


def test_a_jobs_search_and_a_hidden_key_field_read_dots_to_a_viewer_in_its_json_and_its_words():
    job = {"id": 1, "note": "n", "patch": None, "selection_text": f"filter q={EMAIL}",
           "selection": {"filter": {"q": EMAIL, "field.Email": EMAIL, "status": "open"}}}
    before = copy.deepcopy(job)
    shown = visible.jobs(VIEWER, FakeStore(), [job], FIELDS)[0]
    assert shown["selection"]["filter"] == {"q": MASKED, "field.Email": MASKED, "status": "open"}
    assert shown["selection_text"] == f"filter q={MASKED} field.Email={MASKED} status=open"
    assert job == before
    assert visible.jobs(Reader.of("operator", MASK), FakeStore(), [job], FIELDS)[0]["selection"]["filter"]["q"] == EMAIL


def test_a_jobs_note_is_masked_with_the_values_its_entries_hide_in_the_job_and_its_audit_record():
    """The note a bulk job was started with is each entry's close note too (masked there with the
    entry's values): the job's page, its JSON, the jobs' list and its own audit record mask it so."""
    job = {"id": 3, "note": f"asked by {EMAIL} about card 4111", "patch": None, "selection_text": "1 selected entry",
           "selection": {"ids": 1}}
    store = FakeStore(_entry(), jobs={3: [7]})
    assert visible.jobs(VIEWER, store, [job], FIELDS)[0]["note"] == f"asked by {MASKED} about card {MASKED}"
    assert visible.job(VIEWER, store, {**job, "items": []}, FIELDS)["note"] == f"asked by {MASKED} about card {MASKED}"
    record = {"id": 2, "entry_id": None, "job_id": 3, "action": "bulk_close", "note": job["note"], "error": None,
              "detail": {"ids": 1}}
    assert visible.audit(VIEWER, store, {"actions": [record], "next_cursor": None}, FIELDS)["actions"][0]["note"] == \
        f"asked by {MASKED} about card {MASKED}"
    assert visible.jobs(Reader.of("operator", MASK), store, [job], FIELDS)[0]["note"] == job["note"]


def test_a_job_items_result_is_masked_with_its_entrys_values_and_the_patchs():
    patch = [{"op": "replace", "path": "/email", "value": "bob@example.org"}]
    status = {"id": 1, "note": None, "patch": patch, "selection_text": "1 selected entry",
              "selection": {"ids": 1, "patch": patch},
              "items": [{"entry_id": 7, "state": "failed",
                         "result": f"not found in {{'email': 'bob@example.org', 'was': '{EMAIL}', 'card': '4111'}}"},
                        {"entry_id": 9, "state": "failed", "result": "bob@example.org is gone"}]}
    before = copy.deepcopy(status)
    shown = visible.job(VIEWER, FakeStore(_entry()), status, FIELDS)
    assert shown["items"][0]["result"] == f"not found in {{'email': '{MASKED}', 'was': '{MASKED}', 'card': '{MASKED}'}}"
    assert shown["items"][1]["result"] == GONE  # entry 9 purged: nothing tells what the text quotes
    assert shown["patch"][0]["value"] == MASKED and status == before


def test_an_audit_records_note_error_and_detail_are_masked_with_its_entrys_values():
    page = {"actions": [
        {"id": 1, "entry_id": 7, "job_id": None, "action": "close", "note": f"called {EMAIL}", "error": None,
         "detail": {}},
        {"id": 2, "entry_id": None, "job_id": 3, "action": "bulk_close", "note": "tidied", "error": None,
         "detail": {"filter": {"q": EMAIL}, "total": 1}}], "next_cursor": None}
    before = copy.deepcopy(page)
    shown = visible.audit(VIEWER, FakeStore(_entry()), page, FIELDS)
    assert shown["actions"][0]["note"] == f"called {MASKED}"
    assert shown["actions"][1]["detail"] == {"filter": {"q": MASKED}, "total": 1}
    assert page == before


def test_a_groups_text_is_masked_with_its_newest_entrys_values_in_a_copy():
    group = Group(1, "orders.created", "fatal", f"no account for {EMAIL}", 1, None, None)
    shown = visible.groups(VIEWER, FakeStore(groups={1: _entry()}), [group])
    assert shown[0].key == f"no account for {MASKED}" and group.key == f"no account for {EMAIL}"


def test_a_note_about_more_entries_than_are_looked_at_is_hidden_from_a_viewer_with_why():
    """A job's note is masked with the values of its first 200 entries: one of 201 may quote the
    201st's, so a viewer reads why it is hidden instead; an operator reads it."""
    job = {"id": 3, "note": f"asked by {EMAIL}", "patch": None, "selection_text": "201 selected entries",
           "selection": {"ids": 201}}
    store = FakeStore(_entry(), jobs={3: [7] * 201})
    assert visible.jobs(VIEWER, store, [job], FIELDS)[0]["note"] == TOO_MANY
    assert visible.jobs(Reader.of("operator", MASK), store, [job], FIELDS)[0]["note"] == job["note"]
