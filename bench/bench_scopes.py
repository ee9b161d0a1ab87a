"""/groups and /summary for a scoped reader beside an unscoped one, over one big database.

    python bench/bench_scopes.py                      # 1,000,000 entries, built under bench/out/
    python bench/bench_scopes.py --entries 200000 --runs 15 --keep

Builds the database as bench_pages.py does (the same rows, subjects and failure groups; reused with
``--keep`` when bench_pages.py or this script built one of that size), then times each request as
the median of several runs through the Flask test client, for a viewer without scopes and a
viewer scoped to a few patterns, the two taking turns request by request, so whatever else the
machine does weighs on both alike. A scoped reader's groups and summary are counted from the kept
counts of the groups whose subject a scope covers (entries/tallies.py), never from the entries:
the target is 2x or less. Writes the table into docs/PERFORMANCE.md under "## Scoped readers".
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_pages import build_database, write_report  # noqa: E402

#: What the scoped reader may read: three of the twenty subjects of bench_pages.py and a family.
PATTERNS = ("orders.*", "payments.>", "shipping.label.created")
REQUESTS = [
    ("groups (open entries, the default)", "/groups", {}),
    ("groups, every status", "/groups?status=", {}),
    ("groups, status=open&subject=orders.*", "/groups?status=open&subject=orders.*", {}),
    ("summary fragment: counts + chart", "/summary", {}),
    ("summary fragment, status=open", "/summary?status=open", {}),
    ("first list page (for information)", "/", {}),
]
TARGETED = 5


def open_client(database_url: str, workdir: Path, name: str, scopes):
    """The app over the database (nothing started) and a client signed in as a viewer named
    ``name`` with ``scopes`` (None: unscoped)."""
    from dlq_dashboard import create_app
    from dlq_dashboard.accounts import create_user
    from dlq_dashboard.config import Settings
    from dlq_dashboard.runtime import runtime_of

    settings = Settings(database_url=database_url, nats_urls=("nats://127.0.0.1:1",),
                        instance_path=str(workdir / "instance"), secret_key="bench")
    app = create_app({"SETTINGS": settings, "TESTING": True})
    try:
        create_user(runtime_of(app).engine, name, "bench-password", "viewer", scopes=scopes)
    except ValueError:
        pass
    client = app.test_client()
    html = client.get("/login").get_data(as_text=True)
    token = html.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    client.post("/login", data={"username": name, "password": "bench-password", "csrf_token": token})
    return app, client


def main() -> int:
    from dlq_dashboard.runtime import runtime_of
    from dlq_dashboard.scopes import parse_scopes

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=25, help="timed runs per request (the median is kept)")
    parser.add_argument("--keep", action="store_true", help="reuse a database of that size in bench/out/")
    parser.add_argument("--no-report", action="store_true", help="print only; leave docs/PERFORMANCE.md alone")
    options = parser.parse_args()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"pages-{options.entries}.sqlite3"
    built = None
    if not (options.keep and path.exists()):
        print(f"building {options.entries:,} entries ...", flush=True)
        built = build_database(path, options.entries)
        print(f"  {built:.1f} s", flush=True)
    readers = {"unscoped": None, "scoped": parse_scopes(PATTERNS)}
    samples: dict[str, dict[str, list[float]]] = {who: {} for who in readers}
    with tempfile.TemporaryDirectory() as workdir:
        clients, apps = {}, []
        for who, scopes in readers.items():
            app, clients[who] = open_client(f"sqlite:///{path}", Path(workdir) / who, f"bench-{who}", scopes)
            apps.append(app)
        for label, url, headers in REQUESTS:
            for round_ in range(options.runs + 2):
                for who, client in clients.items():
                    began = time.perf_counter()
                    response = client.get(url, headers=headers)
                    response.get_data()
                    elapsed = (time.perf_counter() - began) * 1000
                    assert response.status_code == 200, (who, url, response.status_code)
                    if round_ >= 2:
                        samples[who].setdefault(label, []).append(elapsed)
        for app in apps:
            runtime_of(app).stop()
    medians = {who: {label: statistics.median(v) for label, v in by.items()} for who, by in samples.items()}
    rows = []
    for i, (label, _, _) in enumerate(REQUESTS):
        a, b = medians["unscoped"][label], medians["scoped"][label]
        rows.append(f"| {label} | {a:.1f} | {b:.1f} | {b / a:.2f}× | {'yes' if i < TARGETED else '—'} |")
    import sqlite3

    section = "\n".join([
        "## Scoped readers", "",
        f"/groups and /summary at {options.entries:,} entries for a viewer without scopes and a viewer scoped to "
        f"{', '.join(f'`{p}`' for p in PATTERNS)} (five of the twenty subjects), in the same run, the two taking "
        f"turns request by request; median of {options.runs} runs after two warm-ups, server-side (Flask's test "
        "client). The target (2× or less) applies to the first five rows.", "",
        "```", f"python bench/bench_scopes.py --entries {options.entries} --runs {options.runs}", "```", "",
        "| request | unscoped (ms) | scoped (ms) | ratio | targeted |", "| --- | ---: | ---: | ---: | :---: |",
        *rows, "",
        "A scoped reader's groups and counts come from the kept counts of the groups whose subject a scope "
        "covers (a group is of one subject: entries/tallies.py, the condition of entries/scoping.py on "
        "failure_groups.subject), and the chart from those groups' arrivals, never from the entries.", "",
        f"Measured {time.strftime('%Y-%m-%d')}. Machine: {platform.machine()}, {__import__('os').cpu_count()} CPUs "
        f"shared with other work while it ran (the numbers are of a loaded machine), Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
        + (f"the database built in {built:.0f} s." if built is not None else "the database reused (--keep)."), ""])
    print(section)
    if not options.no_report:
        write_report(ROOT / "docs" / "PERFORMANCE.md", section, "## Scoped readers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
