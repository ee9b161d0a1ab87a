"""Benchmarks that measure several checkouts side by side (``--trees . ../baseline``): each
tree's run is a process of its own, started with ``--one-tree <tree>``, whose imports come from
that tree (its package and its bench/ first on the path)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def add_tree_options(parser: argparse.ArgumentParser) -> None:
    """``--trees`` (the checkouts to measure, this one by default) and the hidden ``--one-tree``."""
    parser.add_argument("--trees", nargs="+", default=[str(HERE.parent)],
                        help="checkouts to measure, taking turns (each in a process of its own)")
    parser.add_argument("--one-tree", help=argparse.SUPPRESS)


def enter_tree(args: argparse.Namespace) -> bool:
    """In a tree's own process (``--one-tree``): its modules first on the path; True there."""
    if not args.one_tree:
        return False
    sys.path[:0] = [args.one_tree, str(Path(args.one_tree) / "bench")]
    return True
