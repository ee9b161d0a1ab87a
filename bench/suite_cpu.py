"""Where a command's CPU goes, by kind of process: runs the command (by default the test suite,
`pytest`) and samples /proc every 0.25 s until it ends, keeping each process's last user+system
time, then prints the CPU of each kind (the xdist workers, Chromium, the writer processes, the
`python app.py` processes the tests start, PostgreSQL, the nats-servers, Node, ...).

    python bench/suite_cpu.py [--interval 0.25] [-- pytest -q]

Every process on the machine started while the command runs is counted, so run it on a machine
doing nothing else. A process that lives less than an interval may be missed; one started before
the command is counted from its own start.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time

KINDS = (  # (a piece of the command line, the kind), first match wins
    ("nats-server", "nats-server"), ("postgres", "PostgreSQL"), ("chrom", "Chromium"),
    ("forkserver", "writer processes (forkserver)"), ("exec(eval(sys.stdin", "xdist workers"),
    ("app.py", "python app.py"), ("pytest", "pytest (controller)"), ("node", "Node"), ("pip", "pip"),
    ("python", "other Python"),
)


def kind_of(pid: str) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return None
    if not cmd:
        return None  # a kernel thread
    return next((kind for piece, kind in KINDS if piece in cmd), os.path.basename(cmd.split(" ")[0]))


def sample(seen: dict, before: set, ticks: int) -> None:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        key = (pid, fields[19])  # the pid and its start time: a reused pid is another process
        if key in before:
            continue
        if key not in seen:
            kind = kind_of(pid)
            if kind is None:
                continue
            seen[key] = [kind, 0.0]
        seen[key][1] = (int(fields[11]) + int(fields[12])) / ticks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="after --; default: pytest")
    args = parser.parse_args()
    command = [c for c in args.command if c != "--"] or ["pytest"]
    ticks = os.sysconf("SC_CLK_TCK")
    seen: dict = {}
    before: set = set()
    sample(seen, before, ticks)
    before = set(seen)  # what ran already is not the command's
    seen.clear()
    started = time.monotonic()
    proc = subprocess.Popen(command)
    while proc.poll() is None:
        sample(seen, before, ticks)
        time.sleep(args.interval)
    wall = time.monotonic() - started
    cpu, count = collections.Counter(), collections.Counter()
    for kind, seconds in seen.values():
        cpu[kind] += seconds
        count[kind] += 1
    total = sum(cpu.values())
    print(f"\n{' '.join(command)}: exit {proc.returncode}, {wall:.0f} s wall, {total:.0f} s CPU "
          f"({total / wall:.2f} CPUs busy on average)")
    for kind, seconds in cpu.most_common():
        print(f"{seconds:9.1f} s  {100 * seconds / total:5.1f}%  {count[kind]:6d} processes  {kind}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
