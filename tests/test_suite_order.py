"""The suite's own order: xdist's first hand gives every worker a share of the slow tests.

The first hand is xdist's own (its `load` scheduler, run here on workers that only record what
they are sent), so this fails if xdist starts dealing differently, as well as if conftest's
order does."""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScheduling

from .support import dealt


class _Config:
    def __init__(self, workers: int):
        self.workers = workers

    def getvalue(self, name: str):
        assert name == "tx"
        return [f"{self.workers}*popen"]

    def getoption(self, name: str, default=None):
        return None if name == "maxschedchunk" else default


class _Worker:
    def __init__(self, name: str):
        self.gateway = type("Gateway", (), {"id": name})()
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def first_hand(collection: list[str], workers: int) -> list[list[str]]:
    """What xdist's `load` scheduling sends each worker before any test has run."""
    scheduler = LoadScheduling(_Config(workers))
    nodes = [_Worker(f"gw{n}") for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    return [[collection[i] for i in node.sent] for node in nodes]


@pytest.mark.parametrize("tests, slow, workers", [(2243, 56, 4), (2243, 56, 3), (400, 7, 4), (2243, 5, 2)])
def test_each_worker_starts_with_its_share_of_the_slow_tests(tests, slow, workers):
    items = [f"slow{n}" for n in range(slow)] + [f"test{n}" for n in range(tests - slow)]
    order = dealt(items, slow, workers, None)
    assert sorted(order) == sorted(items)
    assert [i for i in order if i.startswith("test")] == items[slow:]  # the rest keeps its order
    shares = [sum(name.startswith("slow") for name in hand) for hand in first_hand(order, workers)]
    assert sum(shares) == slow and max(shares) - min(shares) <= 1, shares


def test_the_order_is_left_alone_where_a_worker_would_get_nothing_else():
    items = [f"slow{n}" for n in range(40)] + [f"test{n}" for n in range(20)]
    assert dealt(items, 40, 4, None) == items  # `pytest -m slow`: a run of slow tests only
    assert dealt(items, 1, 4, None) == items
