"""The dashboard's child processes (the mirror's process, its writer, a bulk job's publisher)
start without the dashboard's ``__main__``.

multiprocessing prepares every child it starts by running the parent's main module again (as
``__mp_main__``), so that functions defined there can be found. The dashboard's main module is
``app.py`` or the ``dlq-dashboard`` script (pytest in the tests), which imports the whole web
stack: every writer and publisher paid 0.27 s of CPU and the memory of Flask for it, though
their code lives in modules of their own and is imported by name (docs/PERFORMANCE.md, "A child
process's start"). A child named with :func:`without_main` skips that step; every other child
multiprocessing starts in the process is prepared as before.
"""

from __future__ import annotations

import functools
import logging
from multiprocessing import spawn

# The dashboard's log lines, in every process of it.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The names of the processes that skip the parent's __main__: only those named here.
_NAMES: set[str] = set()


def without_main(name: str) -> str:
    """``name``, for a child process that is to start without the parent's ``__main__``: its
    target and arguments must be importable from modules by name (not defined in ``__main__``)."""
    _NAMES.add(name)
    return name


def _preparing(get_preparation_data):
    @functools.wraps(get_preparation_data)
    def get_preparation(name):
        data = get_preparation_data(name)
        if name in _NAMES:
            # What tells the child to run the main module again, by path or by module name.
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    get_preparation.dlq_children = True
    return get_preparation


# multiprocessing's launchers (spawn and forkserver) look the function up on the module at each
# start, with the child's name: wrapped once, whoever imports this first.
if not getattr(spawn.get_preparation_data, "dlq_children", False):
    spawn.get_preparation_data = _preparing(spawn.get_preparation_data)


def log_as_parent(level: int) -> None:
    """A child's log lines as the dashboard's, in its format at its ``level``: unconfigured, a
    child's warnings reach stderr bare (Python's last resort), with no time, and its infos not at all."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
