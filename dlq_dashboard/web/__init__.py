"""The web layer: blueprints for the pages, the JSON API, the actions, bulk jobs, the audit,
exports and metrics; how errors become answers (errors.py); who may do what (auth.py,
security.py); presenters that lay data out for templates (presenters/)."""

from __future__ import annotations

from flask import current_app

from ..runtime import Runtime, runtime_of


def current_runtime() -> Runtime:
    """The Runtime of the app handling this request (the one way views reach it)."""
    return runtime_of(current_app)
