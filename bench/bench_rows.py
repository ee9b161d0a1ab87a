"""The list's rows, A against B in one run: the payload read whole or only as far as the snippet
needs, and the cost of key fields (DLQ_LIST_FIELDS) as columns and as a filter.

    python bench/bench_rows.py                # after bench_pages.py --entries 100000 --keep
    python bench/bench_rows.py --runs 15

Uses bench/out/pages-100000.sqlite3 (built by bench_pages.py) and builds a small database of
entries with 256 KB payloads. Each pair of variants takes turns request by request, so whatever
else the machine is doing weighs on both alike; prints the median milliseconds of each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_pages import open_client  # noqa: E402

FIELDS = (("customer", "/customer"), ("sku", "/items/0/sku"))


def client_for(database_url: str, workdir: Path, list_fields=()):
    """An app over the database (nothing started) and a client logged in as an operator."""
    return open_client(database_url, workdir, role="operator", list_fields=list_fields)


def timed(client, url: str) -> float:
    began = time.perf_counter()
    response = client.get(url)
    response.get_data()
    assert response.status_code == 200, (url, response.status_code)
    return (time.perf_counter() - began) * 1000


def compare(label: str, a, b, runs: int) -> None:
    """Median ms of two (setup, client, url) variants, taking turns."""
    samples = ([], [])
    for round_ in range(runs + 2):
        for i, (setup, client, url) in enumerate((a, b)):
            setup()
            elapsed = timed(client, url)
            if round_ >= 2:
                samples[i].append(elapsed)
    ma, mb = statistics.median(samples[0]), statistics.median(samples[1])
    print(f"| {label} | {ma:.1f} | {mb:.1f} | {mb / ma:.2f}× |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    options = parser.parse_args()
    from dlq_dashboard.access import visible
    from tests import support

    large = ROOT / "bench" / "out" / "pages-100000.sqlite3"
    if not large.exists():
        print(f"{large} is missing: run bench/bench_pages.py --entries 100000 --keep first")
        return 1
    whole = lambda: setattr(visible, "ROW_PAYLOAD_BYTES", None)  # noqa: E731 - the read before snippets
    prefix = lambda: setattr(visible, "ROW_PAYLOAD_BYTES", 512)  # noqa: E731
    with tempfile.TemporaryDirectory() as workdir:
        work = Path(workdir)
        big_url = f"sqlite:///{work}/big.sqlite3"
        big_app, big = client_for(big_url, work / "big")
        body = json.dumps({"customer": "ada", "items": [{"sku": "A-1"}], "blob": "x" * 256 * 1024}).encode()
        for seq in range(1, 61):
            support.dead_letter(big_app, seq, payload=body, Dlq_Reason="fatal")
        _, plain = client_for(f"sqlite:///{large}", work / "plain")
        _, keyed = client_for(f"sqlite:///{large}", work / "keyed", FIELDS)
        print("| request | A (ms) | B (ms) | B / A |\n| --- | ---: | ---: | ---: |")
        compare("list of 256 KB payloads: A payloads read whole, B 512 bytes each", (whole, big, "/"),
                (prefix, big, "/"), options.runs)
        compare("list at 100,000 entries: A payloads read whole, B 512 bytes each", (whole, plain, "/"),
                (prefix, plain, "/"), options.runs)
        compare("list at 100,000 entries: A no key fields, B two key-field columns", (prefix, plain, "/"),
                (prefix, keyed, "/"), options.runs)
        compare("A status=open, B field.customer=alice (a common value)", (prefix, keyed, "/?status=open"),
                (prefix, keyed, "/?field.customer=alice"), options.runs)
        compare("A status=open, B field.sku=none (no match: every row read)", (prefix, keyed, "/?status=open"),
                (prefix, keyed, "/?field.sku=none"), max(3, options.runs // 3))
    visible.ROW_PAYLOAD_BYTES = 512
    return 0


if __name__ == "__main__":
    sys.exit(main())
