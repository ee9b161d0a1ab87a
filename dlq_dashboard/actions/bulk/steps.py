"""What a bulk job's loop does next, decided from what it sees, with no I/O (as decisions.py
decides single actions): work.py reads the job into a Turn, asks next_step, and runs the step.

Order matters: a runner that stops or a job finished elsewhere goes first (nothing more is
written for it), then a cancel, then an outage of NATS (the windows in flight are recorded and
the job waits), and only then the items.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Turn:
    """What one turn of a job's loop sees: the runner, the job's row, NATS, and its windows."""

    stopping: bool  # the runner is stopping (the process ends, the lease is lost)
    finished: bool  # the job is done or cancelled already (another replica finished it)
    cancel_requested: bool
    needs_nats: bool  # a republish, or a close that deletes from the DLQ stream
    nats_down: bool
    has_items: bool  # a window of pending items was read after the last one taken
    in_flight: bool  # republish windows published and their outcomes not recorded yet
    recording: bool  # an outcome being recorded on the recorder's thread (PostgreSQL)
    from_start: bool  # this pass began at the job's first item


class Step(Enum):
    """The steps of a job's loop, each a method of JobWork named the same."""

    LEAVE = "leave"  # record the windows in flight and stop, leaving the job as it is
    CANCEL = "cancel"  # record the windows in flight, cancel the pending items, end the job cancelled
    WAIT_FOR_NATS = "wait_for_nats"  # record the windows in flight, wait a second, start the pass again
    AWAIT_RECORDING = "await_recording"  # wait for the outcome on the recorder's thread
    FINISH = "finish"  # nothing left pending: end the job done
    START_OVER = "start_over"  # a pass ended with items left behind: another pass from the first item
    WORK_WINDOW = "work_window"  # pace, then republish or close the window (or record the oldest in flight)


def next_step(turn: Turn) -> Step:
    """The step a job's loop takes for what it sees."""
    if turn.stopping or turn.finished:
        return Step.LEAVE
    if turn.cancel_requested:
        return Step.CANCEL
    if turn.needs_nats and turn.nats_down:
        return Step.WAIT_FOR_NATS
    if turn.has_items or turn.in_flight:
        return Step.WORK_WINDOW
    if turn.recording:  # its outcome may leave items pending (waiting for NATS): look again after it
        return Step.AWAIT_RECORDING
    # A pass that began after the first item may have passed over items left pending (a republish
    # recovery was finishing): only a pass from the start with nothing found means done.
    return Step.FINISH if turn.from_start else Step.START_OVER
