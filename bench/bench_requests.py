"""CPU a request of the pages and the API, this checkout against another (a baseline) in one run.

    git worktree add --detach /tmp/baseline-pages main   # once: the code to compare with
    python bench/bench_requests.py --baseline /tmp/baseline-pages
    python bench/bench_requests.py --baseline /tmp/baseline-pages --rounds 9 --requests 200
    python bench/bench_requests.py                     # this checkout alone
    python bench/bench_requests.py --baseline /tmp/baseline-pages --database postgresql

Each checkout runs in a process of its own (``--worker ROOT``: its own ``dlq_dashboard`` and
``tests.support`` imported from ROOT), over a SQLite database of its own with the same 60
entries, a logged-in operator and an API token, as the test suite makes them (Flask's test
client, nothing started). For each round and route the two processes take turns (who goes
first alternates), each timing ``--requests`` requests after a warm-up with
``time.process_time``, so the machine's other work weighs on both alike and waiting is not
counted. Prints the median of the rounds' CPU milliseconds a request, and the ratio.

With ``--database postgresql`` each worker's database is a new one on a PostgreSQL server started
for the run (tests/postgres.py), and the wall milliseconds a request are printed as well: there a
request also waits for the server's answers, which the CPU of the worker does not count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENTRIES = 60  # more than a page: the list shows its 50 (DEFAULT_LIMIT) and "Show older entries"
SUBJECTS = ("orders.created", "orders.updated", "payments.captured", "shipping.label.created", "users.signup")
REASONS = (("schema_invalid", "payload failed schema validation"),
           ("max_deliveries", "timeout calling inventory after 30000 ms"),
           ("fatal", "order not found in database"),
           ("terminated", "validation failed: missing customer_id"))
ENTRY_ID = 30  # the entry page's entry

#: (label, what is timed). A path is a GET through the test client with the operator's session;
#: "token:" before it sends the API token instead; "identity" is the session's user looked up
#: alone (accounts.load_session_user), without a request.
ROUTES = (
    ("list, 50 rows (/)", "/"),
    ("list as htmx fragment", "hx:/"),
    ("list's summary fragment (/summary)", "hx:/summary"),
    ("entry page (/entries/30)", f"/entries/{ENTRY_ID}"),
    ("groups (/groups)", "/groups"),
    ("GET /api/entries", "/api/entries"),
    ("GET /api/entries, API token", "token:/api/entries"),
    ("GET /api/groups", "/api/groups"),
    ("GET /api/me (a request's fixed cost)", "/api/me"),
    ("login session's identity alone", "identity"),
)


# --- the worker: one checkout's app -----------------------------------------------------------

def build(root: Path, workdir: Path, database_url: str | None = None):
    """The app of the checkout at ``root`` over a fresh database of ENTRIES entries (a SQLite file
    in ``workdir``, or ``database_url`` already migrated); a client logged in as an operator, an
    API token and the session's key."""
    sys.path.insert(0, str(root))
    from dlq_dashboard import create_app
    from dlq_dashboard.accounts import create_token
    from dlq_dashboard.runtime import runtime_of
    from tests import support

    settings = support.make_settings(workdir, database_url=database_url or support.migrated_sqlite(
        workdir / "dlq.sqlite3"))
    app = create_app({"SETTINGS": settings, "TESTING": True})
    for seq in range(1, ENTRIES + 1):
        reason, error = REASONS[seq % len(REASONS)]
        payload = json.dumps({"order_id": f"ord-{seq:05d}", "customer": {"email": f"c{seq}@example.com"},
                              "items": [{"sku": "widget", "qty": seq % 5 + 1, "price": "12.50"}]}).encode()
        extra = {"Dlq_Schema_Errors": json.dumps([{"path": "/items/0/price", "message": "'12.50' is not of "
                                                                                        "type 'number'"}])
                 } if reason == "schema_invalid" else {}
        support.dead_letter(app, seq, SUBJECTS[seq % len(SUBJECTS)], payload, Dlq_Reason=reason,
                            Dlq_Error=f"{error} (#{seq})", Dlq_Consumer="order-service", Dlq_Deliveries="5",
                            Dlq_Failed_At="2026-11-01T10:00:00Z", Dlq_Original_Msg_Id=f"msg-{seq}", **extra)
    client = support.logged_in(app, "operator")
    with client.session_transaction() as session:
        key = session["_user_id"]
    token = create_token(runtime_of(app).engine, "bench", "operator")
    return app, client, token, key


def request_for(app, client, token: str, key: str, what: str):
    """A function that makes one request (or lookup) of ``what`` and checks its answer."""
    from dlq_dashboard.accounts import load_session_user
    from dlq_dashboard.runtime import runtime_of

    if what == "identity":
        engine = runtime_of(app).engine
        return lambda: load_session_user(engine, key)
    headers = {}
    if what.startswith("token:"):
        what, headers = what[len("token:"):], {"Authorization": f"Bearer {token}"}
    elif what.startswith("hx:"):
        what, headers = what[len("hx:"):], {"HX-Request": "true"}
    user = None if headers.get("Authorization") else client
    other = app.test_client() if user is None else None

    def one():
        response = (user or other).get(what, headers=headers)
        response.get_data()
        assert response.status_code == 200, (what, response.status_code)
    return one


def create_app_ms(app, times: int = 5) -> float:
    """The median CPU milliseconds of create_app over the app's database (already migrated)."""
    from dlq_dashboard import create_app
    from dlq_dashboard.runtime import runtime_of

    taken = []
    for _ in range(times):
        began = time.process_time()
        other = create_app({"SETTINGS": runtime_of(app).settings, "TESTING": True})
        taken.append((time.process_time() - began) * 1000)
        runtime_of(other).engine.dispose()
    return statistics.median(taken)


def worker(root: Path, database_url: str | None = None) -> None:
    """Answer the driver's lines: {"what", "requests", "warmup"} → {"ms": CPU ms a request,
    "wall_ms": wall ms a request}."""
    with tempfile.TemporaryDirectory(prefix="bench-requests-") as folder:
        began = time.process_time()
        app, client, token, key = build(root, Path(folder), database_url)
        built = time.process_time() - began
        print(json.dumps({"ready": True, "build_s": built, "create_app_ms": create_app_ms(app)}), flush=True)
        made = {}
        for line in sys.stdin:
            ask = json.loads(line)
            one = made.get(ask["what"]) or made.setdefault(ask["what"], request_for(app, client, token, key,
                                                                                    ask["what"]))
            for _ in range(ask["warmup"]):
                one()
            began, wall = time.process_time(), time.perf_counter()
            for _ in range(ask["requests"]):
                one()
            print(json.dumps({"ms": (time.process_time() - began) * 1000 / ask["requests"],
                              "wall_ms": (time.perf_counter() - wall) * 1000 / ask["requests"]}), flush=True)


# --- the driver -------------------------------------------------------------------------------

class Checkout:
    """A worker process over one checkout."""

    def __init__(self, name: str, root: Path, database_url: str | None = None):
        self.name = name
        extra = ["--database-url", database_url] if database_url else []
        self.process = subprocess.Popen([sys.executable, __file__, "--worker", str(root), *extra], cwd=root,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self._answer()

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the worker over {self.name} ended")
        return json.loads(line)

    def time(self, what: str, requests: int, warmup: int) -> dict:
        self.process.stdin.write(json.dumps({"what": what, "requests": requests, "warmup": warmup}) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another checkout (git worktree) to compare with")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=100, help="requests timed a route, a round and checkout")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--only", help="time only the requests whose label holds this text")
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite",
                        help="each worker's database: a SQLite file, or a new database on a PostgreSQL "
                             "server started here")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        worker(options.worker.resolve(), options.database_url)
        return 0
    routes = [(label, what) for label, what in ROUTES if not options.only or options.only in label]
    postgres = None
    if options.database == "postgresql":
        sys.path.insert(0, str(ROOT))
        from tests.postgres import PostgresServer
        postgres = PostgresServer().start()
    checkouts = []
    try:
        url = postgres.create_database(migrated=True) if postgres else None
        checkouts.append(Checkout("this checkout", ROOT, url))
        if options.baseline:
            url = postgres.create_database(migrated=True) if postgres else None
            checkouts.insert(0, Checkout("baseline", options.baseline.resolve(), url))
        samples = {(c.name, label): [] for c in checkouts for label, _ in routes}
        for round_ in range(options.rounds):
            for label, what in routes:
                for c in (checkouts if round_ % 2 == 0 else checkouts[::-1]):
                    samples[(c.name, label)].append(c.time(what, options.requests, options.warmup))
    finally:
        for c in checkouts:
            c.close()
        if postgres is not None:
            postgres.remove()
    names = [c.name for c in checkouts]
    measures = (("ms", "CPU ms"), ("wall_ms", "wall ms")) if postgres else (("ms", "CPU ms"),)
    for key, unit in measures:
        print(f"{unit} a request: median of {options.rounds} rounds of {options.requests} requests "
              f"(after {options.warmup}), {ENTRIES} entries, {'PostgreSQL' if postgres else 'SQLite'}, an "
              "operator; the fastest round's in brackets\n")
        print("| request | " + " | ".join(names) + (" | ratio (fastest) |" if len(names) == 2 else " |"))
        print("| --- | " + " | ".join("---:" for _ in names) + (" | ---: |" if len(names) == 2 else " |"))
        for label, _ in routes:
            medians = [statistics.median(s[key] for s in samples[(n, label)]) for n in names]
            fastest = [min(s[key] for s in samples[(n, label)]) for n in names]
            ratio = f" | {medians[1] / medians[0]:.2f}× ({fastest[1] / fastest[0]:.2f}×)" if len(names) == 2 else ""
            print(f"| {label} | " + " | ".join(f"{m:.2f} ({f:.2f})" for m, f in zip(medians, fastest)) + ratio + " |")
        print()
    print("create_app (ms of CPU, median of 5): "
          + ", ".join(f"{c.name} {c.ready['create_app_ms']:.1f}" for c in checkouts))
    print("App and database built in (s of CPU): "
          + ", ".join(f"{c.name} {c.ready['build_s']:.2f}" for c in checkouts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
