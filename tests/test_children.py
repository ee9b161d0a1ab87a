"""The dashboard's child processes (the mirror's writer, a bulk job's publisher) start without
running the dashboard's main module again (dlq_dashboard/children.py): ``app.py`` or the
installed script imports the whole web stack, which a child paid for at every start."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from . import support

ROOT = Path(__file__).resolve().parent.parent

# A main module that leaves a mark, named by its process id, each time it is run: as the
# script itself, and again in any child multiprocessing prepares by running it.
MAIN = textwrap.dedent('''
    import os, sys
    open(os.path.join(sys.argv[1], f"main-{os.getpid()}"), "w").close()

    if __name__ == "__main__":
        import multiprocessing, time
        from dlq_dashboard.actions.bulk.publisher import Publisher
        from dlq_dashboard.config import Settings
        from dlq_dashboard.ingest.writer import WriterProcess

        writer = WriterProcess(sys.argv[2])
        assert writer.call("ingest_dlq_rows", "DLQ", "e1", []) == 0  # started, and answering
        print("writer", writer._proc.pid, flush=True)
        writer.close()
        settings = Settings(nats_urls=(sys.argv[3],), database_url=sys.argv[2], instance_path=sys.argv[1],
                            secret_key="test")
        publisher = Publisher(settings, timeout=5.0)
        deadline = time.monotonic() + 30
        while not publisher.ready and time.monotonic() < deadline:
            time.sleep(0.02)
        assert publisher.ready, "the publishing process did not connect"
        print("publisher", publisher._proc.pid, flush=True)
        publisher.close()
        # Any other child is prepared as before: it runs the main module again.
        other = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
        other.start()
        other.join(30)
        print("other", other.pid, flush=True)
''')


def test_the_writer_and_the_publisher_start_without_the_dashboards_main_module(tmp_path, nats_server):
    script = tmp_path / "main.py"
    script.write_text(MAIN)
    marks = tmp_path / "marks"
    marks.mkdir()
    url = support.migrated_sqlite(tmp_path / "dlq.sqlite3")
    done = subprocess.run([sys.executable, str(script), str(marks), url, nats_server.url], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pids = {kind: int(pid) for kind, pid in (line.split() for line in done.stdout.splitlines())}
    ran_main = {int(path.name.split("-")[1]) for path in marks.iterdir()}
    assert pids["writer"] not in ran_main and pids["publisher"] not in ran_main
    # The control: the mark does show a child that ran the main module.
    assert pids["other"] in ran_main
    assert len(ran_main) == 2  # the script itself and the other child
