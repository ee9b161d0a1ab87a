"""DLQ Dashboard: the dead-letter inspection dashboard for NATS JetStream."""

from __future__ import annotations

import logging
import os
from typing import Any

from flask import Flask, jsonify, request
from flask_wtf.csrf import CSRFProtect
from werkzeug.exceptions import HTTPException
from werkzeug.routing import IntegerConverter

from .config import Settings, ensure_secret_key, load_settings
from .runtime import Runtime

csrf = CSRFProtect()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class IdConverter(IntegerConverter):
    """``<int:...>`` bounded to what the database stores: a larger id is a 404, not a 500."""

    def __init__(self, url_map, *args, **kwargs):
        kwargs.setdefault("max", 2**63 - 1)
        super().__init__(url_map, *args, **kwargs)


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """Create the app; opens and migrates the database but starts no thread or server.

    ``config`` may carry ``SETTINGS`` (a Settings) and Flask options; without it settings
    come from the environment.
    """
    app = Flask(__name__, template_folder=os.path.join(ROOT, "templates"),
                static_folder=os.path.join(ROOT, "static"))
    app.url_map.converters["int"] = IdConverter
    config = dict(config or {})
    settings: Settings = config.pop("SETTINGS", None) or load_settings()
    settings = ensure_secret_key(settings)
    app.config.update(
        SECRET_KEY=settings.secret_key,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        MAX_CONTENT_LENGTH=16 * 1024 * 1024,
        WTF_CSRF_TIME_LIMIT=None,
        WTF_CSRF_CHECK_DEFAULT=False,
    )
    app.config.update(config)
    app.extensions["dlq"] = Runtime.create(settings)

    from . import cli, openapi
    from .web import actions, api, auth, export, metrics, pages, security

    auth.login_manager.init_app(app)
    csrf.init_app(app)
    # Before the CSRF check below: a cross-site write is refused as such.
    security.init_app(app)
    cli.init_app(app)
    pages.htmx.init_app(app)  # htmx request detection, and `htmx` in templates
    for blueprint in (auth.bp, pages.bp, api.bp, export.bp, metrics.bp, openapi.bp, actions.bp):
        app.register_blueprint(blueprint)

    @app.before_request
    def _csrf_unless_bearer():
        # A bearer-token call carries no cookie, so no other site can forge it; everything
        # else that changes state needs the CSRF token (a form field or X-CSRFToken header).
        if auth.bearer_token() is None:
            csrf.protect()

    @app.errorhandler(HTTPException)
    def _api_errors_as_json(exc: HTTPException):
        # An unknown API path or method answers like every other API error.
        if request.path.startswith("/api/") and exc.code and exc.code >= 400:
            return jsonify(error=exc.description or exc.name), exc.code
        return exc

    logging.getLogger("dlq_dashboard").setLevel(logging.INFO)
    return app
