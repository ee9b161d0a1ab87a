"""DLQ Dashboard: the dead-letter inspection dashboard for NATS JetStream."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask
from flask_wtf.csrf import CSRFProtect

from .config import Settings, ensure_secret_key, load_settings
from .runtime import Runtime

csrf = CSRFProtect()


def create_app(config: dict[str, Any] | None = None) -> Flask:
    """Create the app; opens and migrates the database but starts no thread or server.

    ``config`` may carry ``SETTINGS`` (a Settings) and Flask options; without it settings
    come from the environment.
    """
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    app = Flask(__name__, template_folder=os.path.join(root, "templates"),
                static_folder=os.path.join(root, "static"))
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

    from .web import api, auth, pages

    auth.login_manager.init_app(app)
    csrf.init_app(app)
    app.register_blueprint(auth.bp)
    app.register_blueprint(pages.bp)
    app.register_blueprint(api.bp)

    @app.before_request
    def _csrf_unless_bearer():
        # A bearer-token call carries no cookie, so no other site can forge it; everything
        # else that changes state needs the CSRF token (a form field or X-CSRFToken header).
        from flask import request

        if not request.headers.get("Authorization", "").startswith("Bearer "):
            csrf.protect()

    logging.getLogger("dlq_dashboard").setLevel(logging.INFO)
    return app
