"""The Grafana dashboard and the Prometheus rules in deploy/: promtool (Debian's prometheus
package) finds the rules valid and their unit tests pass, every alert has a test that fires and
one that does not, every panel reads the datasource variable, and every metric a panel or a rule
names is in a real scrape of /metrics (and in docs/api.md). The metrics those panels need:
arrivals as a counter, the mirror's stuck and behind state per stream, open groups and bulk jobs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from dlq_dashboard.accounts import create_token
from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.actions.close import close_entry
from dlq_dashboard.actions.purge import purge_entries
from dlq_dashboard.db.engine import write_transaction
from dlq_dashboard.db.models import Entry
from dlq_dashboard.nats.server import free_port
from dlq_dashboard.runtime import runtime_of
from dlq_dashboard.times import utcnow

from . import support
from .test_mirror_hardening import FULL_DISK, WriterFault, publish_dead_letters

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
RULES = DEPLOY / "prometheus" / "rules.yml"
RULE_TESTS = DEPLOY / "prometheus" / "tests.yml"
DASHBOARD = DEPLOY / "grafana" / "dlq-dashboard.json"
DATASOURCE = "${datasource}"
METRIC = re.compile(r"\bdlq_[a-z0-9_]+")
DAY = 86400


def promtool(*args: str) -> subprocess.CompletedProcess:
    """promtool ``args``, failing the test when it fails; skipped without promtool, except in CI."""
    tool = shutil.which("promtool")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing in CI: .ci/run installs Debian's prometheus package")
        pytest.skip("promtool is not installed (apt-get install prometheus); CI runs these checks")
    result = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"promtool {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
    return result


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(board: dict) -> list[dict]:
    """Every panel, those inside collapsed rows too; rows themselves are layout only."""
    found = []
    for panel in board["panels"]:
        found.extend(panels(panel) if panel.get("type") == "row" else [panel])
    return found


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def scrape(client) -> dict[tuple[str, frozenset], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.get_data(as_text=True)) for s in family.samples}


def value(samples, name: str, **labels) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def named_metrics() -> dict[str, str]:
    """metric name -> where it is used, for every dlq_ name in a panel's query or a rule's expr
    (recording rules' own names, dlq:…, are not scraped and do not match)."""
    used = {}
    for panel in panels(dashboard()):
        for target in panel.get("targets", []):
            used.update((name, f"panel {panel['title']!r}") for name in METRIC.findall(target["expr"]))
    for variable in dashboard()["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            used.update((name, f"variable {variable['name']!r}") for name in METRIC.findall(query["query"]))
    for rule in rules():
        where = f"rule {rule.get('alert') or rule.get('record')!r}"
        texts = [rule["expr"], *rule.get("annotations", {}).values()]
        used.update((name, where) for text in texts for name in METRIC.findall(text))
    return used


def exported(samples_text: str) -> set[str]:
    """The series names a scrape holds: a counter's samples are name_total, a histogram's
    name_bucket/_sum/_count, exactly as a query must name them."""
    return {sample.name for family in text_string_to_metric_families(samples_text) for sample in family.samples}


# --- promtool ----------------------------------------------------------------------------------

def test_promtool_finds_the_rules_valid():
    result = promtool("check", "rules", str(RULES))
    assert "SUCCESS" in result.stdout


def test_promtool_passes_the_unit_tests_of_the_rules():
    promtool("test", "rules", str(RULE_TESTS))


def test_every_alert_has_a_unit_test_that_fires_and_one_that_does_not():
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    fires, quiet = set(), set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alerts, "rules.yml has no alert"
    assert alerts - fires == set(), "alerts without a test that fires"
    assert alerts - quiet == set(), "alerts without a test that stays quiet"


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as -."""
    return {re.sub(r"[^a-z0-9 _-]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in page.read_text().splitlines() if line.startswith("#")}


def test_every_alert_tells_on_call_what_to_check_and_where_the_docs_say_more():
    """DLQDatabaseUnreachable and DLQFailuresSpiking had no description, and none said what to do."""
    anchors = heading_anchors(DEPLOY.parent / "docs" / "deploy.md")
    for rule in rules():
        if "alert" in rule:
            annotations = rule["annotations"]
            assert annotations.get("description"), rule["alert"]
            page, _, anchor = annotations.get("runbook", "").partition("#")
            assert page == "docs/deploy.md" and anchor == rule["alert"].lower(), rule["alert"]
            assert anchor in anchors, f"docs/deploy.md has no heading {rule['alert']}"


def test_the_rules_alert_when_the_dashboard_itself_is_not_scraped_under_the_documented_job():
    """A crashed or hung dashboard reports no dlq_ series, so every rule over them was silent."""
    exprs = {rule["alert"]: rule["expr"] for rule in rules() if "alert" in rule}
    assert exprs["DLQDashboardDown"].startswith('up{job="dlq-dashboard"} == 0 unless on (job, namespace) ')
    assert exprs["DLQDashboardReplicaDown"].startswith('up{job="dlq-dashboard"} == 0 and on (job, namespace) ')
    assert exprs["DLQDashboardAbsent"] == 'absent(dlq_mirror_leader{job="dlq-dashboard"})'
    assert "job_name: dlq-dashboard" in (DEPLOY.parent / "docs" / "deploy.md").read_text()
    for rule in rules():  # every replica's own labels (pod, node ...) are not kept by an aggregation
        assert "without (instance)" not in rule["expr"], rule.get("alert") or rule.get("record")


def test_every_threshold_the_docs_quote_for_an_alerting_rules_metric_is_the_rules_own():
    """docs/alerts.md and docs/api.md told to alert at `dlq_alert_oldest_pending_seconds > 900`
    while DLQAlertsFailing (and docs/deploy.md) fire above 600."""
    compared = re.compile(r"(dlq_[a-z0-9_]+)\)?\s*>\s*([0-9][0-9.e]*)")
    shipped: dict[str, set[float]] = {}
    for rule in rules():
        if "alert" in rule:
            for metric, threshold in compared.findall(rule["expr"]):
                shipped.setdefault(metric, set()).add(float(threshold))
    assert "dlq_alert_oldest_pending_seconds" in shipped
    root = DEPLOY.parent
    quoted = []
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for metric, threshold in compared.findall(page.read_text()):
            if metric in shipped:
                quoted.append((page.name, metric, float(threshold)))
    assert quoted, "the docs quote no threshold of a shipped rule"
    assert [q for q in quoted if q[2] not in shipped[q[1]]] == []


# --- the dashboard -----------------------------------------------------------------------------

def test_the_dashboard_is_json_with_a_prometheus_datasource_variable_every_panel_reads():
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    shown = panels(board)
    assert len(shown) >= 10
    for panel in shown:
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE}, panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": DATASOURCE}, panel["title"]
            assert METRIC.search(target["expr"]), f"panel {panel['title']!r} queries no dlq_ metric"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"]["uid"] == DATASOURCE, variable["name"]


def test_the_metric_names_are_read_from_queries_as_prometheus_names_them():
    assert METRIC.findall('60 * max(rate(dlq_entries_received_total{job=~"$job"}[5m])) + dlq:entries_open:by_reason') \
        == ["dlq_entries_received_total"]
    text = ("# TYPE dlq_x counter\ndlq_x_total 1.0\n# TYPE dlq_h histogram\n"
            'dlq_h_bucket{le="+Inf"} 1.0\ndlq_h_sum 1.0\ndlq_h_count 1.0\n')
    assert exported(text) == {"dlq_x_total", "dlq_h_bucket", "dlq_h_sum", "dlq_h_count"}


def test_every_metric_a_panel_or_a_rule_names_is_in_a_real_scrape_and_every_one_scraped_is_documented(make_app, nats_server, database_url):
    """The app with its mirror, an alert sender whose webhook refuses, a republish and a bulk job,
    so that every labelled series appears."""
    hook = f"http://127.0.0.1:{free_port(39500)}/hook"  # nothing listens: the alert stays pending
    app = make_app(online=True, webhook_urls=(hook,), webhook_secret="s", alert_poll=0.1, alert_first_retry=0.3)
    rt = runtime_of(app)
    support.make_orders_stream(nats_server.url)  # where the republish goes
    first, second, _ = support.dead_letter_orders(app, nats_server.url, [b'{"n": 1}', b'{"n": 2}', b'{"n": 3}'])
    token = create_token(rt.engine, "monitoring-operator", "operator")
    client = app.test_client()
    republished = client.post(f"/api/entries/{first}/republish", json={"version": 1},
                              headers=support.bearer(token))
    assert republished.status_code == 200, republished.get_data(as_text=True)
    job = client.post("/api/bulk", json={"action": "close", "ids": [f"{second}:1"], "note": "known"},
                      headers=support.bearer(token))
    assert job.status_code in (200, 201, 202), job.get_data(as_text=True)
    support.jobs_settled(rt.engine)
    support.wait_for(lambda: (value(scrape(client), "dlq_alert_failed_attempts_total") or 0) >= 1,
                     timeout=30, message="the alert to fail once")

    text = client.get("/metrics").get_data(as_text=True)
    names = exported(text)
    missing = {name: where for name, where in named_metrics().items() if name not in names}
    assert missing == {}, f"named but not exported: {missing}"
    reference = (DEPLOY.parent / "docs" / "api.md").read_text()
    undocumented = {name for name in names if name.startswith("dlq_") and f"`{name}`" not in reference}
    assert undocumented == set(), "exported but not in docs/api.md's table"
    samples = scrape(client)
    assert value(samples, "dlq_jobs", action="close", state="done") == 1
    assert value(samples, "dlq_republishes", state="published", duplicate="false") == 1
    assert value(samples, "dlq_mirror_stuck", stream="DLQ") == 0
    assert value(samples, "dlq_entries_received_total") == 3


def test_the_scrape_check_would_fail_on_a_name_the_app_does_not_export(offline_app):
    names = exported(offline_app.test_client().get("/metrics").get_data(as_text=True))
    assert "dlq_database_size_bytes" in names
    assert "dlq_database_size" not in names and "dlq_entries_purged" not in names  # only with their suffix


# --- the metrics the dashboard needs -------------------------------------------------------------

@pytest.mark.both_databases
def test_arrivals_are_a_counter_that_purges_do_not_lower(app):
    rt = runtime_of(app)
    client = app.test_client()
    ids = [support.dead_letter(app, seq, Dlq_Reason="fatal") for seq in range(1, 5)]
    assert value(scrape(client), "dlq_entries_received_total") == 4

    for entry_id in ids[:3]:
        close_entry(rt, entry_id, 1, actor="test")
    with write_transaction(rt.engine) as conn:  # closed forty days ago
        conn.execute(update(Entry).where(Entry.id.in_(ids[:3])).values(updated_at=utcnow() - timedelta(days=40)))
    assert value(scrape(client), "dlq_entries", status="closed", reason="fatal") == 3
    assert purge_entries(rt, older_than=30 * DAY, actor="test").total == 3
    support.dead_letter(app, 5, Dlq_Reason="fatal")
    samples = scrape(client)
    assert value(samples, "dlq_entries", status="open", reason="fatal") == 2
    assert value(samples, "dlq_entries_received_total") == 5


@pytest.mark.both_databases
def test_a_purge_committed_during_a_scrape_is_not_counted_twice(app, monkeypatch):
    """The entries received are those held plus those purged, read in two statements: on
    PostgreSQL a purge batch committed between them counted its entries twice, the counter went
    down at the next scrape, and the shipped DLQFailuresSpiking alert fired on nothing."""
    from dlq_dashboard.web import metrics

    rt = runtime_of(app)
    client = app.test_client()
    ids = [support.dead_letter(app, seq, Dlq_Reason="fatal") for seq in range(1, 5)]
    for entry_id in ids[:3]:
        close_entry(rt, entry_id, 1, actor="test")
    with write_transaction(rt.engine) as conn:
        conn.execute(update(Entry).where(Entry.id.in_(ids[:3])).values(updated_at=utcnow() - timedelta(days=40)))
    reads = metrics.purged_totals

    def purged_meanwhile(conn):  # the purge commits between the scrape's two reads
        if rt.engine.dialect.name == "postgresql":
            assert purge_entries(rt, older_than=30 * DAY, actor="test").total == 3
        return reads(conn)

    monkeypatch.setattr(metrics, "purged_totals", purged_meanwhile)
    assert value(scrape(client), "dlq_entries_received_total") == 4
    monkeypatch.setattr(metrics, "purged_totals", reads)
    assert value(scrape(client), "dlq_entries_received_total") == 4


@pytest.mark.both_databases
def test_open_groups_are_counted_by_bounded_reason_and_jobs_by_action_and_state(offline_app):
    rt = runtime_of(offline_app)
    ids = [support.dead_letter(offline_app, 1, Dlq_Reason="fatal", Dlq_Error="tax down"),
           support.dead_letter(offline_app, 2, Dlq_Reason="fatal", Dlq_Error="stock missing"),
           support.dead_letter(offline_app, 3, Dlq_Reason="my-own-words", Dlq_Error="x")]
    samples = scrape(offline_app.test_client())
    assert value(samples, "dlq_groups_open", reason="fatal") == 2
    assert value(samples, "dlq_groups_open", reason="other") == 1
    assert not any(dict(labels).get("reason") == "my-own-words" for _, labels in samples)

    jobs.create_job(rt, "close", actor="ann", ids=ids[:1], start=False)
    jobs.create_job(rt, "republish", actor="ann", ids=ids[1:], start=False)
    samples = scrape(offline_app.test_client())
    assert value(samples, "dlq_jobs", action="close", state="queued") == 1
    assert value(samples, "dlq_jobs", action="republish", state="queued") == 1


def test_the_mirror_reports_a_stuck_stream_and_how_long_it_is_behind_until_it_recovers(
        app, nats_server, monkeypatch):
    rt = runtime_of(app)
    client = app.test_client()
    samples = scrape(client)
    assert value(samples, "dlq_mirror_stuck", stream="DLQ") == 0
    assert value(samples, "dlq_mirror_behind_seconds", stream="DLQ") == 0

    fault = WriterFault(monkeypatch)
    fault.on.set()
    publish_dead_letters(nats_server.url, 3)
    support.wait_for(lambda: FULL_DISK in (rt.mirror.progress["DLQ"].error or ""), timeout=10, message="the mirror stuck")
    support.wait_for(lambda: (value(scrape(client), "dlq_mirror_behind_seconds", stream="DLQ") or 0) > 0,
                     timeout=10, message="the oldest message to be seen waiting")
    assert value(scrape(client), "dlq_mirror_stuck", stream="DLQ") == 1

    fault.on.clear()
    support.wait_for(lambda: support.entry_count(rt.engine) == 3, timeout=30, message="the retried write")
    support.wait_for(lambda: value(scrape(client), "dlq_mirror_stuck", stream="DLQ") == 0, timeout=10,
                     message="the mirror to recover")
    support.wait_for(lambda: value(scrape(client), "dlq_mirror_behind_seconds", stream="DLQ") == 0, timeout=10,
                     message="the mirror to catch up")
