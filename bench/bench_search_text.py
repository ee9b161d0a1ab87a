"""What PostgreSQL's search vector costs the server a row, part by part: the text
(``dlq_search_text``, migration 0003: the payload decoded in a PL/pgSQL exception block, then
every run of characters other than letters, digits and '_' replaced by a space, as SQLite's
unicode61 tokenizer cuts words), the vector made of it, and, as baselines, the same columns
concatenated and a vector of them without the regular expression.

    python bench/bench_search_text.py [--rows 20000] [--rounds 3]

The rows are bench_mirror.py's dead letters written by the mirror's write path. Each expression
is summed over every row in one query; CPU is the server's (the postmaster and its children,
from /proc), so another process on the machine does not count.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_search_pass import server_cpu, write  # noqa: E402
from dlq_dashboard.db.engine import create_db_engine, dispose_quietly  # noqa: E402
from dlq_dashboard.db.migrate import migrate  # noqa: E402

ARGS = "original_subject, error, payload, payload_available"
RAW = "coalesce(original_subject, '') || ' ' || coalesce(error, '') || ' ' || convert_from(payload, 'UTF8')"
# dlq_search_text as one SQL expression, without PL/pgSQL and its exception block (a payload that
# is not UTF-8 would fail it): what the function's call and the block cost.
INLINE = ("regexp_replace(coalesce(original_subject, '') || ' ' || coalesce(error, '') || ' ' || "
          "coalesce(left(convert_from(substring(payload FROM 1 FOR 262144), 'UTF8'), 65536), ''), "
          "'[^[:alnum:]_]+', ' ', 'g')")
EXPRESSIONS = {
    "columns concatenated (baseline)": f"length({RAW})",
    "dlq_search_text": f"length(dlq_search_text({ARGS}))",
    "the same as one SQL expression": f"length({INLINE})",
    "vector of the columns, no regular expression": f"length(to_tsvector('dlq_search'::regconfig, {RAW}))",
    "vector of dlq_search_text (what the pass indexes)":
        f"length(to_tsvector('dlq_search'::regconfig, dlq_search_text({ARGS})))",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from tests.postgres import PostgresServer

    postgres = PostgresServer().start()
    try:
        engine = create_db_engine(postgres.create_database())
        migrate(engine)
        write(engine, args.rows, 2000)
        print("| expression | " + " | ".join(f"round {r + 1}" for r in range(args.rounds)) + " |")
        print("| --- |" + " ---: |" * args.rounds)
        results: dict[str, list[float]] = {name: [] for name in EXPRESSIONS}
        with engine.connect() as conn:
            for _ in range(args.rounds):
                for name, expression in EXPRESSIONS.items():  # taking turns, so drift hits all alike
                    before = server_cpu(postgres.proc.pid)
                    conn.exec_driver_sql(f"SELECT sum({expression}) FROM entries").scalar()
                    results[name].append((server_cpu(postgres.proc.pid) - before) / args.rows * 1e6)
        for name, cpu in results.items():
            print(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cpu) + " |")
        print("(server CPU µs a row)")
        dispose_quietly(engine)
    finally:
        postgres.remove()


if __name__ == "__main__":
    main()
