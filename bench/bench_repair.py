"""What repair by the schema costs for one large payload: an order of ``--items`` items, each
with a price and a quantity written as text (two repairs an item), as the entry page's Repair
by schema and a bulk repair's preview repair it (entries/repair.py repair_payload).

    python bench/bench_repair.py --items 1000 8000                          # this checkout
    python bench/bench_repair.py --items 1000 8000 --trees . /tmp/base      # and another, taking turns

Each checkout runs in a process of its own, taking turns for ``--rounds``; prints each run's
seconds and the repairs it made.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trees import add_tree_options, enter_tree  # noqa: E402

SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {
    "type": "object", "properties": {"price": {"type": "number"}, "qty": {"type": "integer"}}}}}}


def one_run(items: int) -> dict:
    """In a checkout's own process: one repair of the order, timed."""
    from dlq_dashboard.entries.repair import repair_payload, schema_validator

    order = {"order_id": "ORD-1", "items": [{"sku": f"SKU-{i}", "price": "12.50", "qty": "2"} for i in range(items)]}
    payload = json.dumps(order, indent=2).encode()
    validator = schema_validator(SCHEMA)
    started = time.perf_counter()
    repaired = repair_payload(validator, payload)
    return {"seconds": round(time.perf_counter() - started, 3), "bytes": len(payload),
            "repairs": len(repaired.changes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[1000, 8000])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600, help="seconds a run may take before it is stopped")
    add_tree_options(parser)
    args = parser.parse_args()
    if enter_tree(args):
        print(json.dumps(one_run(args.items[0])))
        return
    for round_ in range(1, args.rounds + 1):
        for items in args.items:
            for tree in args.trees:
                command = [sys.executable, __file__, "--items", str(items), "--one-tree", str(Path(tree).resolve())]
                try:
                    out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=args.timeout)
                    result = json.loads(out.stdout.strip().splitlines()[-1])
                except subprocess.TimeoutExpired:
                    result = {"seconds": f"over {args.timeout:g}"}
                print(f"round {round_}  items {items:>6}  {tree:<20} {result}", flush=True)


if __name__ == "__main__":
    main()
