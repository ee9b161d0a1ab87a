"""The tests' web server (support.serve_in_thread) ends saying who closed its wake-up pipe when
another owner closed it by number while it served: a descriptor closed twice closes whatever the
process opened under its number in between, and the owner then finds it closed with nobody in
its own stack (support.record_closes keeps the closes by number)."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest
import requests

from . import support


def test_a_wake_up_pipe_closed_by_another_thread_is_named_with_the_thread_and_its_callers(offline_app):
    server, thread = support.serve_in_thread(offline_app)
    assert requests.get(f"http://127.0.0.1:{server.effective_port}/login", timeout=10).status_code == 200
    trigger = server.trigger
    pipe = trigger.trigger
    kept = os.dup(pipe)  # the pipe keeps a writer: its loop sees no end of it, and stops below

    def stale_owner():
        os.close(pipe)  # a second close of a number that was once its own

    closer = threading.Thread(target=stale_owner, name="stale-owner")
    closer.start()
    closer.join()
    with pytest.raises(AssertionError) as failed:
        support.stop_serving(server, thread)
    message = str(failed.value)
    assert f"wake-up pipe (descriptor {pipe}) was closed under it while it served" in message
    assert "in thread stale-owner" in message and " stale_owner\n" in message
    trigger.trigger, trigger._fds = kept, [fd if fd != pipe else kept for fd in trigger._fds]
    support.stop_serving(server, thread)


def test_a_multiprocessing_connections_close_is_recorded_and_only_closes_after_the_mark_are_shown():
    ours, theirs = multiprocessing.Pipe()
    fd, mark = theirs.fileno(), support.close_mark()
    theirs.close()
    ours.close()
    shown = support.closes_of(fd, since=mark)
    assert shown.count("in thread MainThread") == 1, shown
    assert " test_a_multiprocessing_connections_close_is_recorded" in shown
    assert support.closes_of(fd, since=support.close_mark()) == (
        "  none recorded (closed by code that does not call os.close)\n")
