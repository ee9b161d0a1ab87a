"""Run the dashboard from a checkout: ``python app.py [--host H] [--port P] [--demo]``, the same
as the installed ``dlq-dashboard`` command (dlq_dashboard/cli/main.py), admin commands included.

Importing this module starts nothing. ``flask --app app ...`` (the admin commands) finds the
``create_app`` factory here and calls it: an app over the database, with no thread, no
nats-server and no web server.
"""

from __future__ import annotations

import sys

from dlq_dashboard.cli.main import create_app, main, parse_args

__all__ = ["create_app", "main", "parse_args"]

if __name__ == "__main__":
    sys.exit(main())
