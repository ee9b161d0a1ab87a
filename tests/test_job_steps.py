"""A bulk job's loop decides its next step from what it sees (actions/bulk/steps.py): every state
of a turn, against the rules written as a table."""

from __future__ import annotations

import itertools
from dataclasses import fields, replace

import pytest

from dlq_dashboard.actions.bulk.steps import Step, Turn, next_step
from dlq_dashboard.actions.bulk.work import JobWork

NAMES = [f.name for f in fields(Turn)]
QUIET = Turn(**{name: False for name in NAMES})

# The rules, first match wins: (what must hold, the step).
RULES = [
    ({"stopping": True}, Step.LEAVE),
    ({"finished": True}, Step.LEAVE),
    ({"cancel_requested": True}, Step.CANCEL),
    ({"needs_nats": True, "nats_down": True}, Step.WAIT_FOR_NATS),
    ({"has_items": True}, Step.WORK_WINDOW),
    ({"in_flight": True}, Step.WORK_WINDOW),
    ({"recording": True}, Step.AWAIT_RECORDING),
    ({"from_start": True}, Step.FINISH),
    ({}, Step.START_OVER),
]


def every_turn():
    for values in itertools.product((False, True), repeat=len(NAMES)):
        yield Turn(**dict(zip(NAMES, values)))


def test_every_turn_takes_the_step_of_the_first_rule_that_holds():
    turns = list(every_turn())
    assert len(turns) == 2 ** len(NAMES) == 512
    for turn in turns:
        expected = next(step for wanted, step in RULES if all(getattr(turn, k) == v for k, v in wanted.items()))
        assert next_step(turn) is expected, turn


def test_every_step_is_taken_in_some_turn():
    assert {next_step(turn) for turn in every_turn()} == set(Step)


@pytest.mark.parametrize("changes, step", [
    ({"stopping": True, "cancel_requested": True, "has_items": True}, Step.LEAVE),  # a stop writes nothing more
    ({"finished": True, "in_flight": True}, Step.LEAVE),  # finished elsewhere: its windows are recorded, no more
    ({"cancel_requested": True, "needs_nats": True, "nats_down": True}, Step.CANCEL),  # cancels while NATS is away
    ({"needs_nats": True, "nats_down": True, "has_items": True}, Step.WAIT_FOR_NATS),
    ({"nats_down": True, "has_items": True}, Step.WORK_WINDOW),  # a close that deletes nothing needs no NATS
    ({"in_flight": True, "from_start": True}, Step.WORK_WINDOW),  # no items, but a window's outcome to record
    ({"recording": True, "from_start": True}, Step.AWAIT_RECORDING),  # not done while an outcome is recorded
    ({"from_start": True}, Step.FINISH),
    ({}, Step.START_OVER),  # a pass begun after the first item may have passed over leftovers
])
def test_the_steps_in_words(changes, step):
    assert next_step(replace(QUIET, **changes)) is step


def test_every_step_is_a_method_of_the_job_named_for_it():
    assert all(callable(getattr(JobWork, f"_{step.value}", None)) for step in Step)
