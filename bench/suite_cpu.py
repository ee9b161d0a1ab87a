"""Where a command's CPU goes, by kind of process: runs the command (by default the test suite,
`pytest`) and samples /proc every 0.25 s until it ends, keeping each process's last user+system
time, then prints the CPU of each kind (the xdist workers, Chromium, the writer processes, the
`python app.py` processes the tests start, PostgreSQL, the nats-servers, Node, ...).

    python bench/suite_cpu.py [--interval 0.25] [--tree] [-- pytest -q]

Every process on the machine started while the command runs is counted, so run it on a machine
doing nothing else; or with --tree, only the command and the processes it starts (its
descendants, through each process's parent), beside whatever else the machine runs. A process
that lives less than an interval may be missed, and with --tree one that leaves its parent (a
daemon, Chromium's crash handler) too; one started before the command is counted from its own
start.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
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


def sample(seen: dict, before: set, ticks: int, root: int | None = None) -> None:
    stats = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stats[pid] = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
    if root is not None:
        stats = {pid: fields for pid, fields in stats.items() if pid in descendants(stats, str(root))}
    for pid, fields in stats.items():
        key = (pid, fields[19])  # the pid and its start time: a reused pid is another process
        if key in before:
            continue
        # Asked again each time: a process started by another has its parent's command line until
        # it runs its own program (Playwright's Node starting Chromium).
        kind = kind_of(pid) or (seen[key][0] if key in seen else None)  # None: ended, or a kernel thread
        if kind is None:
            continue
        seen[key] = [kind, (int(fields[11]) + int(fields[12])) / ticks]


def descendants(stats: dict, root: str) -> set:
    """``root`` and every process below it, from each process's parent in ``stats``."""
    children = collections.defaultdict(list)
    for pid, fields in stats.items():
        children[fields[1]].append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children[pid])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--tree", action="store_true", help="count only the command and the processes it starts")
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
        sample(seen, before, ticks, proc.pid if args.tree else None)
        time.sleep(args.interval)
    wall = time.monotonic() - started
    cpu, count = collections.Counter(), collections.Counter()
    for kind, seconds in seen.values():
        cpu[kind] += seconds
        count[kind] += 1
    total = sum(cpu.values())
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"\n{' '.join(command)}: exit {proc.returncode}, {wall:.0f} s wall, {total:.0f} s CPU "
          f"({total / wall:.2f} CPUs busy on average); /usr/bin/time would say "
          f"{reaped.ru_utime + reaped.ru_stime:.0f} s (it misses a process its parent never waits for)")
    for kind, seconds in cpu.most_common():
        print(f"{seconds:9.1f} s  {100 * seconds / total:5.1f}%  {count[kind]:6d} processes  {kind}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
