"""When each xdist worker ran out of tests, and how busy the machine's CPUs were meanwhile: runs
the suite verbosely (`pytest -v`, plus any arguments given after --), notes the moment of each
line, and samples /proc/stat every 2 s. Prints, for each worker, how many tests it ran and when
its last one ended, and the CPUs busy in each 20 s of the run (on two CPUs, 2.0 is full).

    python bench/suite_timeline.py [--log FILE] [-- -n 3 tests/]

A worker ending a minute before the others is a run whose last minute used one CPU or less: the
order in which xdist hands tests out left that worker the most (tests/conftest.py deals the
slow tests among the workers for that reason).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import threading
import time

WORKER_LINE = re.compile(r"\[(gw\d+)\] \[\s*\d+%\] (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)")


def cpu_times() -> tuple[int, int]:
    """(all jiffies, idle jiffies) of the machine so far."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return sum(values), values[3] + values[4]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", help="also write every timed line and sample here")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="after --: more pytest arguments")
    options = parser.parse_args()
    extra = [a for a in options.args if a != "--"]
    cpus = os.cpu_count() or 1
    started, done = time.monotonic(), threading.Event()
    busy: dict[int, list[float]] = collections.defaultdict(list)
    log = open(options.log, "w") if options.log else None

    def sample() -> None:
        last = cpu_times()
        while not done.wait(2.0):
            now = cpu_times()
            total, idle = now[0] - last[0], now[1] - last[1]
            at = time.monotonic() - started
            busy[int(at // 20) * 20].append(cpus * (total - idle) / max(total, 1))
            if log:
                log.write(f"{at:7.1f} CPUs busy {busy[int(at // 20) * 20][-1]:.2f}\n")
            last = now

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    workers: dict[str, list[float]] = collections.defaultdict(list)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-v", *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    summary = ""
    for line in proc.stdout:
        at = time.monotonic() - started
        if log:
            log.write(f"{at:7.1f} {line}")
        match = WORKER_LINE.search(line)
        if match:
            workers[match.group(1)].append(at)
        elif " in " in line and ("passed" in line or "failed" in line):
            summary = line.strip(" =\n")
    code = proc.wait()
    done.set()
    sampler.join()
    if log:
        log.close()
    wall = time.monotonic() - started
    print(f"pytest -v {' '.join(extra)}: exit {code}, {wall:.0f} s wall; {summary}")
    for name in sorted(workers, key=lambda w: int(w[2:])):
        print(f"  {name}: {len(workers[name])} tests, its last ended at {workers[name][-1]:.0f} s")
    print("  CPUs busy, each 20 s: " + " ".join(f"{at}:{sum(v) / len(v):.2f}" for at, v in sorted(busy.items())))
    return code


if __name__ == "__main__":
    sys.exit(main())
