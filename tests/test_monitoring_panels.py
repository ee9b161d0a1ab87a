"""The Grafana dashboard's queries, evaluated by promtool over real scrapes of /metrics: a fresh
install's panels read 0 rather than "No data", and a deployment of two replicas that service
discovery labels apart (pod, node, besides instance) reads as one replica does."""

from __future__ import annotations

import yaml
from prometheus_client.parser import text_string_to_metric_families

from dlq_dashboard.actions.bulk import jobs
from dlq_dashboard.runtime import runtime_of

from . import support
from .test_monitoring import dashboard, panels, promtool

EVAL = "20m"
# The mirror's gauges, from the replica holding the lease (the offline app runs no mirror).
MIRROR = [("dlq_mirror_lag_messages", {"stream": "DLQ"}, 4), ("dlq_mirror_stuck", {"stream": "DLQ"}, 0),
          ("dlq_mirror_behind_seconds", {"stream": "DLQ"}, 30), ("dlq_mirror_ingested_total", {"stream": "DLQ"}, 10)]


def samples(app) -> list[tuple[str, dict, float]]:
    text = app.test_client().get("/metrics").get_data(as_text=True)
    return [(s.name, dict(s.labels), s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name.startswith("dlq_")]


def replica(scraped, labels: dict, *, leader: bool) -> list[dict]:
    """promtool input series of one replica: what the app scraped (the database's figures, the
    same in every replica), the mirror's gauges on the lease holder, and a standby's own zeros."""
    series = [(name, sample_labels, value) for name, sample_labels, value in scraped
              if name not in ("dlq_mirror_leader", "dlq_nats_connected")]
    series += [("dlq_mirror_leader", {}, 1 if leader else 0), ("dlq_nats_connected", {}, 1)]
    series += [(name, extra, value if leader else 0) for name, extra, value in MIRROR
               if leader or name == "dlq_mirror_ingested_total"]
    found = []
    for name, sample_labels, value in series:
        # Counters grow; a standby's own count of messages mirrored stays 0.
        growing = name.endswith("_total") and (leader or name != "dlq_mirror_ingested_total")
        values = f"{value:g}+1x40" if growing else f"{value:g}x40"
        all_labels = {**sample_labels, **labels}
        text = ",".join(f'{key}="{val}"' for key, val in sorted(all_labels.items()))
        found.append({"series": f"{name}{{{text}}}", "values": values})
    return found


def queries() -> list[tuple[str, str]]:
    """(panel title, query) of every panel but the per-replica one, which shows each replica."""
    return [(panel["title"], target["expr"]) for panel in panels(dashboard()) for target in panel["targets"]
            if "{{instance}}" not in target.get("legendFormat", "")]


def for_job(query: str, job: str) -> str:
    return query.replace("$job", job).replace("$__rate_interval", "5m")


def evaluate(tmp_path, input_series: list[dict], checks: list[dict]) -> None:
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": [
        {"interval": "1m", "input_series": input_series, "promql_expr_test": checks}]}))
    promtool("test", "rules", str(path))


def test_a_fresh_install_shows_0_in_every_panel_not_no_data(offline_app, tmp_path):
    """dlq_entries, dlq_groups_open, the outbox and the purges have no series before the first
    entry: the panels said "No data" where the answer is 0."""
    fresh = replica(samples(offline_app), {"job": "fresh", "instance": "a:8080"}, leader=True)
    checks = [{"expr": f"count({for_job(query, 'fresh')}) > bool 0", "eval_time": EVAL,
               "exp_samples": [{"labels": "{}", "value": 1}]} for _, query in queries()]
    evaluate(tmp_path, fresh, checks)


def test_two_replicas_labelled_apart_read_as_one(offline_app, tmp_path):
    """Kubernetes gives each replica its pod and node: max without (instance) kept both, and
    "Open entries" showed 6550 for 3275."""
    rt = runtime_of(offline_app)
    ids = [support.dead_letter(offline_app, seq, Dlq_Reason=reason, Dlq_Error=f"error {seq}")
           for seq, reason in enumerate(["fatal", "fatal", "max_deliveries", "my-own-words"], start=1)]
    jobs.create_job(rt, "close", actor="ann", ids=ids[:1], start=False)
    scraped = samples(offline_app)
    one = replica(scraped, {"job": "one", "namespace": "prod", "instance": "10.0.0.1:8080", "pod": "dlq-a"},
                  leader=True)
    two = [*replica(scraped, {"job": "two", "namespace": "prod", "instance": "10.0.0.1:8080", "pod": "dlq-a",
                              "node": "n1"}, leader=True),
           *replica(scraped, {"job": "two", "namespace": "prod", "instance": "10.0.0.2:8080", "pod": "dlq-b",
                              "node": "n2"}, leader=False)]
    checks = []
    for _, query in queries():
        as_two, as_one = for_job(query, "two"), for_job(query, "one")
        checks += [{"expr": f"count({as_two}) - count({as_one})", "eval_time": EVAL,
                    "exp_samples": [{"labels": "{}", "value": 0}]},
                   {"expr": f"sum({as_two}) - sum({as_one})", "eval_time": EVAL,
                    "exp_samples": [{"labels": "{}", "value": 0}]}]
    evaluate(tmp_path, one + two, checks)
