"""The ``dlq-dashboard`` command (``[project.scripts]``), and ``python app.py``, which calls it.

``dlq-dashboard [--host H] [--port P] [--threads N] [--nats-port N] [--mirror-in-process] [--demo]``
starts the bundled nats-server (without NATS_URL), the mirror (in a child process of its own,
ingest/process.py) and the web server; ``dlq-dashboard users|tokens|
entries|purge ...`` runs the admin commands that ``flask --app app ...`` runs, over the same
factory, without starting anything.
"""

from __future__ import annotations

import argparse
import errno
import gc
import logging
import signal
import sys
from pathlib import Path

import click
from flask.cli import ScriptInfo

from .. import create_app as _create_app
from ..children import LOG_FORMAT
from ..config import ConfigError, Settings, load_settings, log_level
from ..files import private_folder, write_private
from ..errors import InvalidRequest
from ..nats.bundled import StoreInUse
from ..nats.client_log import quiet_nats_tracebacks
from ..numbers import whole_number
from ..runtime import runtime_of
from ..sources import unused_variables
from ..web.security import WAITRESS_OPTIONS

log = logging.getLogger(__name__)

#: The admin commands (cli/__init__.py ADMIN_COMMANDS, named here so that a server's start does
#: not import them); any other first argument is a flag of the server.
ADMIN_COMMANDS = ("users", "tokens", "entries", "groups", "jobs", "purge")
#: Below debug, the libraries' chatter (Alembic's paragraph per migration revision) is left
#: out, so a start prints one line per thing that matters.
CHATTY = ("alembic",)
#: The interpreter's switch interval while the dashboard serves, in seconds (Python's default is
#: 5 ms). While a backlog drains, the bridge's thread has Python work without pause; a request's
#: thread that let the interpreter lock go for a query or a socket write waits up to one
#: interval to take it back, and a page does that dozens of times (docs/PERFORMANCE.md,
#: "Readers while the mirror drains"). Switching costs the receiving thread little: it is
#: asked to let go only while another thread waits.
SWITCH_INTERVAL = 0.0005


def configure_logging(environ=None) -> None:
    """Log lines on stderr at DLQ_LOG_LEVEL (info by default); raise ConfigError for another word."""
    level = log_level(environ)
    logging.basicConfig(level=level, format=LOG_FORMAT)
    for name in CHATTY:
        logging.getLogger(name).setLevel(level if level == logging.DEBUG else max(level, logging.WARNING))


def framed(lines: list[str]) -> str:
    """Lines in a box, so one-time passwords stand out from the log around them."""
    width = max(len(line) for line in lines)
    rule = "+" + "-" * (width + 2) + "+"
    return "\n".join([rule, *(f"| {line.ljust(width)} |" for line in lines), rule])


#: Left in the instance folder while the dashboard there runs the demo (``--demo``): the admin
#: commands beside it then read the demo's settings too (its schemas and key fields), so that they
#: answer what its pages answer.
DEMO_MARK = "demo-running"


def mark_demo(settings: Settings, demo: bool) -> None:
    """Leave DEMO_MARK in the instance folder of a dashboard that runs the demo; take it away
    when one starts there without it."""
    mark = Path(settings.instance_path) / DEMO_MARK
    if demo:
        private_folder(settings.instance_path)
        # Owner only, as everything the dashboard writes in the instance folder (files.py).
        write_private(mark, "python app.py --demo runs on this folder: the admin commands read its settings\n")
    else:
        mark.unlink(missing_ok=True)


def create_app(config=None):
    """The factory the admin commands (and ``flask --app app``) use: a bad setting ends it with
    the same one line the server prints, not a traceback. Beside a dashboard that runs the demo
    (DEMO_MARK), with the demo's settings."""
    try:
        if config is None or "SETTINGS" not in config:
            settings = load_settings()
            if (Path(settings.instance_path) / DEMO_MARK).exists():
                from ..demo import demo_settings

                settings = demo_settings(settings)
            config = {**(config or {}), "SETTINGS": settings}
        return _create_app(config)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None


def _whole(name: str, low: int, high: int, what: str):
    """An argparse type: a whole number from ``low`` to ``high`` (numbers.py's sentence): a port
    of 99999 was taken modulo 65536, and 0 threads served nothing."""
    def parse(text: str) -> int:
        try:
            return whole_number(text, name, low=low, high=high, what=what)
        except InvalidRequest as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = name  # argparse names the type in its own messages
    return parse


def listen_error(host: str, port: int, exc: Exception) -> str:
    """Why the web server cannot listen on ``host``:``port``, in one line with what to do."""
    where = f"cannot listen on {host}:{port}"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return (f"{where}: the port is in use (another program, or another dashboard, holds it: choose another "
                "with --port)")
    if isinstance(exc, ValueError):  # waitress's answer to a host name that does not resolve
        return f"{where}: the host does not resolve (give --host an address of this machine: 127.0.0.1, 0.0.0.0)"
    return f"{where}: {getattr(exc, 'strerror', None) or exc} (check --host and --port)"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="dlq-dashboard", description="DLQ Dashboard: dead letters of NATS JetStream",
        epilog=f"admin commands: dlq-dashboard {{{','.join(ADMIN_COMMANDS)}}} --help "
               "(the same as flask --app app ...)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_whole("--port", 0, 65535, "0: a free port"), default=8080,
                        help="port to listen on (default 8080; 0: a free one)")
    parser.add_argument("--threads", type=_whole("--threads", 1, 256, "requests served at once"), default=8,
                        help="web server threads (default 8)")
    parser.add_argument("--nats-port", type=_whole("--nats-port", 0, 65535, "0: a free port"), default=4222,
                        help="port of the bundled nats-server, when free (default 4222; else a free port)")
    parser.add_argument("--mirror-in-process", action="store_true",
                        help="mirror in this process rather than in a child process of its own (the pages are "
                             "slower while a backlog drains; for profiling)")
    parser.add_argument("--demo", action="store_true",
                        help="also run demo streams and a consumer that dead-letters realistic failures")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the admin command ``argv`` names, or else the dashboard with ``argv``'s flags."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ADMIN_COMMANDS:
        return admin(argv)
    return serve(parse_args(argv))


def admin(argv: list[str]) -> int:
    """The admin commands of cli/, each in an app context of :func:`create_app` (loaded only
    when a command runs, so ``--help`` opens no database)."""
    from . import ADMIN_COMMANDS as COMMANDS

    group = click.Group("dlq-dashboard", help="Admin commands of DLQ Dashboard.", commands=list(COMMANDS))
    info = ScriptInfo(create_app=create_app, set_debug_flag=False, load_dotenv_defaults=False)
    try:
        group.main(args=argv, prog_name="dlq-dashboard", obj=info)
    except SystemExit as exc:  # click ends every run with one; give its code back
        if isinstance(exc.code, str):  # create_app's one line about a bad setting
            print(exc.code, file=sys.stderr)
            return 1
        return exc.code or 0
    return 0


def serve(args: argparse.Namespace) -> int:
    """Start the bundled nats-server (without NATS_URL), the mirror and the web server."""
    try:
        configure_logging()
        quiet_nats_tracebacks()  # while a server is down: one line per change, not a traceback a second
        settings = load_settings()
        if args.demo:
            from ..demo import demo_settings

            settings = demo_settings(settings)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    unused = unused_variables(settings, Settings())
    if unused:
        # The file names every source's server, credentials and stream; a NATS_URL left in the
        # environment beside it would otherwise look as if it were used.
        log.warning("DLQ_CONFIG names the sources, so %s %s not used (each source's keys in the file are)",
                    ", ".join(unused), "is" if len(unused) == 1 else "are")

    sys.setswitchinterval(SWITCH_INTERVAL)
    import waitress

    from ..accounts import ensure_first_admin

    application = create_app({"SETTINGS": settings})
    runtime = runtime_of(application)
    # The address first: a port another program holds is said in one line before anything
    # starts; the first admin's one-time password is made once all of it has (else never shown).
    try:
        server = waitress.create_server(application, host=args.host, port=args.port, threads=args.threads,
                                        **WAITRESS_OPTIONS)  # forwarded headers reach the app
    except (OSError, ValueError) as exc:
        print(f"error: {listen_error(args.host, args.port, exc)}", file=sys.stderr, flush=True)
        runtime.stop()  # nothing of it started: its database's connections closed
        return 2
    # One-time logins are printed last, framed, once the address to use them at is known.
    logins: list[str] = []
    demo = None

    def stop(signum, _frame):
        # Leave the serving loop; the finally below stops everything in order. A second
        # SIGTERM while it does is ignored rather than cutting the stop short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        try:
            runtime.start(bundled_port=args.nats_port, mirror_process=not args.mirror_in_process)
        except StoreInUse as exc:  # another server runs on instance/nats: never a second one
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
        mark_demo(settings, args.demo)  # the one that serves: a start refused above leaves the mark as it was
        # Only once this process is the one that serves: a start refused above made the admin
        # and never showed its one-time password, so no later start had a login to print.
        password = ensure_first_admin(runtime.engine, local_login=settings.local_login)
        if password:
            logins.append(f"Created the first user: admin / {password}  (shown once; change it with the CLI)")
        if settings.sources:
            for feed in runtime.feeds.values():
                print(f"Source {feed.name}: stream {feed.source.describe()}", flush=True)
        if args.demo:
            from ..demo import Demo

            demo = Demo(runtime).start()
            if demo.login:
                logins.append(f"Demo operator login: {demo.login[0]} / {demo.login[1]}  (shown once)")
        # What the start made (modules, the app, its templates) lives as long as the process: a
        # full collection need not walk it again, and one stops every thread while it runs.
        gc.freeze()
        print(f"DLQ Dashboard at http://{args.host}:{server.effective_port}", flush=True)
        if logins:
            print(framed(logins), flush=True)
        server.run()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        print("Stopping…", flush=True)
        server.close()
        if demo is not None:
            demo.stop()
        runtime.stop()
    return 0


def run() -> None:
    """The console script's entry point."""
    sys.exit(main())
