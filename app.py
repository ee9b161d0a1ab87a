"""Run the dashboard: ``python app.py [--host H] [--port P] [--demo]``.

Importing this module starts nothing. ``flask --app app ...`` (the admin commands) finds the
``create_app`` factory defined here and calls it: an app over the database, with no thread,
no nats-server and no web server.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from dlq_dashboard import create_app as _create_app
from dlq_dashboard.config import ConfigError, load_settings
from dlq_dashboard.nats.bundled import StoreInUse
from dlq_dashboard.nats.client_log import quiet_nats_tracebacks
from dlq_dashboard.runtime import runtime_of


def create_app(config=None):
    """The factory ``flask --app app`` finds: a bad setting ends it with the same one line
    ``python app.py`` prints, not a traceback."""
    try:
        return _create_app(config)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="DLQ Dashboard: dead letters of NATS JetStream")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    parser.add_argument("--threads", type=int, default=8, help="web server threads (default 8)")
    parser.add_argument("--nats-port", type=int, default=4222,
                        help="port of the bundled nats-server, when free (default 4222; else a free port)")
    parser.add_argument("--demo", action="store_true",
                        help="also run demo streams and a consumer that dead-letters realistic failures")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Start the bundled nats-server (without NATS_URL), the mirror and the web server."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_nats_tracebacks()  # while a server is down: one line per change, not a traceback a second
    try:
        settings = load_settings()
        if args.demo:
            from dlq_dashboard.demo import demo_settings

            settings = demo_settings(settings)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    import waitress

    from dlq_dashboard.accounts import ensure_first_admin

    application = create_app({"SETTINGS": settings})
    runtime = runtime_of(application)
    password = ensure_first_admin(runtime.engine)
    if password:
        print(f"Created the first user: admin / {password}  (shown once; change it with the CLI)", flush=True)
    demo = None
    server = None

    def stop(signum, _frame):
        # Leave the serving loop; the finally below stops everything in order. A second
        # SIGTERM while it does is ignored rather than cutting the stop short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        try:
            runtime.start(bundled_port=args.nats_port)
        except StoreInUse as exc:  # another server runs on instance/nats: never a second one
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
        if args.demo:
            from dlq_dashboard.demo import Demo

            demo = Demo(runtime).start()
        server = waitress.create_server(application, host=args.host, port=args.port, threads=args.threads)
        print(f"DLQ Dashboard at http://{args.host}:{server.effective_port}", flush=True)
        server.run()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        print("Stopping…", flush=True)
        if server is not None:
            server.close()
        if demo is not None:
            demo.stop()
        runtime.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
