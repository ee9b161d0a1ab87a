"""POST /api/bulk with a filter that names no filter (``{}``, or only nulls) took every open entry
without a word, where the pages offer "everything matching these filters" only while one is set:
it is a 400 that says how to mean every open entry, and nothing is started."""

from __future__ import annotations

import pytest

from dlq_dashboard.runtime import runtime_of

from . import support


@pytest.mark.parametrize("flt", [{}, {"subject": None}])
def test_an_empty_filter_is_refused_and_status_open_takes_every_open_entry(offline_app, tokens, flt):
    engine = runtime_of(offline_app).engine
    for seq in (1, 2):
        support.dead_letter(offline_app, seq)
    client = offline_app.test_client()
    refused = client.post("/api/bulk", json={"action": "close", "filter": flt}, headers=support.bearer(tokens["operator"]))
    assert refused.status_code == 400
    assert refused.get_json()["error"].startswith("filter names no filter, so it would take every open entry")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM jobs").scalar_one() == 0
    started = client.post("/api/bulk", json={"action": "close", "filter": {"status": "open"}},
                          headers=support.bearer(tokens["operator"]))
    assert started.status_code == 202
    preview = client.post("/api/repair/preview", json={"filter": {}}, headers=support.bearer(tokens["operator"]))
    assert preview.status_code == 400
