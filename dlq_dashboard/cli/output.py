"""What every command shares: tables, one-line errors with their exit codes, the CLI's actor,
and NATS for the commands that need it."""

from __future__ import annotations

import getpass
import json
import logging
import re
import sys
from contextlib import contextmanager
from typing import Iterator

import click

from ..controls import shown
from ..numbers import ID_MAX, VERSION_MAX
from ..redaction import without_userinfo
from ..runtime import Runtime

#: Exit codes: 1 when the thing asked for cannot be done (not found, a conflict, NATS down),
#: 2 when the request itself is wrong (a bad filter or value), as click uses 2 for a bad option.
FAILED, BAD_INPUT = 1, 2


#: An id (of an entry, a group, a job) and a version, bounded as the API bounds them (numbers.py):
#: out of range is a usage error (exit 2) naming the argument, never an overflow in the database.
ID = click.IntRange(1, ID_MAX)
VERSION = click.IntRange(1, VERSION_MAX)

# What the operating system gives for bytes of an argument that are not UTF-8 (surrogateescape).
_NOT_UTF8 = re.compile("[\ud800-\udfff]")


# What a terminal obeys rather than shows is written as its escape (controls.py).


class _Shown:
    """A text stream that writes through ``shown``; everything else is its stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(shown(text))
        return len(text)

    def __getattr__(self, name: str):
        # (``buffer`` too: an export writes its bytes exactly, as its file is to hold them.)
        return getattr(self._stream, name)


@contextmanager
def terminal_safe() -> Iterator[None]:
    """Standard output and error written through ``shown`` while a command runs."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Shown(sys.stdout), _Shown(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def utf8_arguments(command: click.Command) -> None:
    """Make ``command`` (and each command of a group) refuse an argument that is not UTF-8 text
    with one line and exit code 2: such a note, filter or name cannot be stored or compared; and
    write what it prints through ``shown`` (terminal_safe)."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            utf8_arguments(sub)
        return
    invoke = command.invoke

    def checked(ctx: click.Context):
        for name, value in ctx.params.items():
            for text in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(text, str) and _NOT_UTF8.search(text):
                    raise CommandError(f"{name.replace('_', ' ')} {ascii(text)[:80]} is not UTF-8 text; "
                                       "nothing was done.", BAD_INPUT)
        # Not into a terminal, click.echo removes a colour's escape sequence (``ESC[31m``) before
        # ``shown`` sees it: a table piped to a file lost "[31m" where a terminal showed
        # "\u001b[31m". The commands colour nothing of their own, so nothing is left out.
        ctx.color = True
        with terminal_safe():
            return invoke(ctx)

    command.invoke = checked


class CommandError(click.ClickException):
    """One line on standard error ("Error: ...") and an exit code."""

    def __init__(self, message: str, exit_code: int = FAILED):
        super().__init__(shown(" ".join(str(message).split())))
        self.exit_code = exit_code


def table(rows: list[tuple], header: tuple[str, ...]) -> None:
    """Print rows under a header, each column as wide as its widest value."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())


def echo_json(body) -> None:
    """Print an answer as the API gives it, indented."""
    click.echo(json.dumps(body, ensure_ascii=False, indent=2))


def cli_actor() -> str:
    """Who the audit names for a command: ``cli:<operating-system user>``."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no name for this uid (a container's bare user id)
        return "cli:unknown"


#: The logger of the bridges' lines about their connection (a refused connection, each retry).
BRIDGE_LOGGER = "dlq_dashboard.nats.bridge"


def _said_by_the_command(record: logging.LogRecord) -> bool:
    # A command's own bridge connecting: the command says in one line of its own whether NATS
    # answered ("NATS is not reachable at ..."); the bridge's warnings before it were two more
    # lines of the same (its logger's errors, and everything at DLQ_LOG_LEVEL=debug, still pass).
    return record.levelno > logging.WARNING or logging.getLogger(BRIDGE_LOGGER).isEnabledFor(logging.DEBUG)


@contextmanager
def nats_connected(rt: Runtime, *, required: bool = True) -> Iterator[bool]:
    """NATS through the runtime's bridge for the length of a command (only the bridge: no
    mirror, no jobs). Yields whether it is connected; CommandError if ``required`` and not."""
    if rt.bridge is not None:  # a runtime already started (the tests' app)
        yield rt.bridge.state.connected
        return
    logging.getLogger(BRIDGE_LOGGER).addFilter(_said_by_the_command)
    try:
        connected = rt.connect_nats()
        if required and not connected:
            bundled = rt.bundled_nats_url() if rt.settings.bundled_nats else None
            where = (", ".join(without_userinfo(u) for u in rt.settings.nats_urls) if not rt.settings.bundled_nats
                     else f"{bundled}, the running dashboard's bundled nats-server, which does not answer" if bundled
                     else "the bundled nats-server: no dashboard runs on this instance folder (start it, or set "
                          "NATS_URL)")
            raise CommandError(f"NATS is not reachable at {where}; nothing was done.")
        yield connected
    finally:
        for feed in rt.feeds.values():
            if feed.bridge is not None:
                feed.bridge.stop()
                feed.bridge = None
        rt.bridge = None
        logging.getLogger(BRIDGE_LOGGER).removeFilter(_said_by_the_command)
