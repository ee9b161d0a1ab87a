"""What starting the mirror's writer process costs, from a main module that imports what
``app.py`` imports (the dashboard's whole command line and web stack).

    python bench/bench_child_start.py [--starts 5] [--trees . ../baseline]

Each start is a WriterProcess answering one empty write (so it is up and serving); the writer's
CPU seconds and resident memory are read from /proc before it is closed. With ``--trees`` the
same runs for each checkout named, one after the other, each in a process of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent))  # after PYTHONPATH: --trees points each run at its checkout

from dlq_dashboard.cli.main import create_app, main, parse_args  # noqa: E402,F401  (what app.py imports)
TICKS = os.sysconf("SC_CLK_TCK")


def starts(count: int) -> dict:
    from dlq_dashboard.db.engine import create_db_engine
    from dlq_dashboard.db.migrate import migrate
    from dlq_dashboard.ingest.writer import WriterProcess

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.sqlite3"
        engine = create_db_engine(url)
        migrate(engine)
        engine.dispose()
        first = WriterProcess(url)
        first.call("ingest_dlq_rows", "DLQ", "e1", [])  # the forkserver is started once a process
        first.close()
        cpu, rss = [], []
        for _ in range(count):
            writer = WriterProcess(url)
            writer.call("ingest_dlq_rows", "DLQ", "e1", [])
            pid = writer._proc.pid
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu.append((int(fields[11]) + int(fields[12])) / TICKS)
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            rss.append(int(next(line for line in status if line.startswith("VmRSS")).split()[1]) / 1024)
            writer.close()
    return {"cpu": cpu, "rss": rss}


def main_() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--trees", nargs="+", default=None, help="checkouts to measure, one after the other")
    options = parser.parse_args()
    if options.trees is None:
        print(json.dumps(starts(options.starts)))
        return
    print("| tree | writer's CPU at its start (s), each start | its resident memory (MB) |")
    print("| --- | --- | --- |")
    for tree in options.trees:
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
        out = subprocess.run([sys.executable, str(HERE / "bench_child_start.py"), "--starts", str(options.starts)],
                             env=env, cwd=tree, check=True, capture_output=True, text=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        print(f"| {tree} | {', '.join(f'{c:.2f}' for c in result['cpu'])} | "
              f"{', '.join(f'{r:.0f}' for r in result['rss'])} |")


if __name__ == "__main__":
    main_()
