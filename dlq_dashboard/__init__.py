"""DLQ Dashboard: the dead-letter inspection dashboard for NATS JetStream.

``create_app`` builds the Flask app. Its imports are inside the factory, as flaskr's are, so
that importing a lower layer (``dlq_dashboard.db``, ``dlq_dashboard.ingest``) loads no web stack.
docs/ARCHITECTURE.md is the map of the package.
"""

from __future__ import annotations

import logging
import os
from typing import Any

PACKAGE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(PACKAGE)
#: The largest request body accepted (an edited payload, a bulk selection).
MAX_CONTENT_LENGTH = 16 * 1024 * 1024
#: The largest field of a form (Flask's default), and the forms whose fields may be as large as a
#: body: the editor's check and republish, and a bulk patch's preview and start.
FORM_FIELD_MAX = 500_000
PAYLOAD_FORMS = frozenset({"actions.validate", "actions.republish", "bulk.bulk_preview", "bulk.bulk_create"})


def resource_folder(name: str) -> str:
    """Where the app's ``templates`` or ``static`` folder is.

    An installed wheel carries them inside the package (``dlq_dashboard/templates``, put there
    by setup.py's ``package_dir``); a checkout, and ``pip install -e .`` over it, keeps them at
    the top of the checkout, next to the package.
    """
    packaged = os.path.join(PACKAGE, name)
    return packaged if os.path.isdir(packaged) else os.path.join(ROOT, name)


def create_app(config: dict[str, Any] | None = None):
    """Create the app; opens and migrates the database but starts no thread or server.

    ``config`` may carry ``SETTINGS`` (a Settings) and Flask options; without it settings
    come from the environment.
    """
    from flask import Flask, request
    from flask_wtf.csrf import CSRFProtect
    from werkzeug.routing import IntegerConverter, Map

    from . import cli
    from .config import Settings, ensure_secret_key, load_settings
    from .runtime import EXTENSION, Runtime
    from .web import (actions, admin, alert_outbox, api, audit, auth, bulk, errors, export, groups, metrics, oidc,
                      openapi, pages, query_parameters, repair, row_actions, saved_views, security, sources, status,
                      templating)
    from .web import params as web_params
    from .web.responses import bearer_token, htmx

    class IdConverter(IntegerConverter):
        """``<int:...>`` bounded to what the database stores: a larger id is a 404, not a 500; and
        of ASCII digits only, as numbers.py reads a query's and a body's: Werkzeug's ``\\d+``
        also matches other scripts' digits (``/api/entries/１２`` reached entry 12), a 404 here."""

        regex = "[0-9]+"

        def __init__(self, url_map, *args, **kwargs):
            kwargs.setdefault("max", 2**63 - 1)
            super().__init__(url_map, *args, **kwargs)

    class ExactPaths(Map):
        """Werkzeug's map without merge_slashes: ``//entries//1`` is a 404, not a redirect to an
        absolute URL built from the request's Host header."""

        def __init__(self, *args, **kwargs):
            kwargs.setdefault("merge_slashes", False)
            super().__init__(*args, **kwargs)

    class Dashboard(Flask):
        url_map_class = ExactPaths

    app = Dashboard(__name__, template_folder=resource_folder("templates"),
                    static_folder=resource_folder("static"))
    app.url_map.converters["int"] = IdConverter
    config = dict(config or {})
    settings: Settings = config.pop("SETTINGS", None) or load_settings()
    if not settings.secret_key and not settings.database_url.startswith("sqlite"):
        # Replicas behind one load balancer must sign sessions with one key, or a login made on
        # one replica is a stranger to the next.
        logging.getLogger(__name__).warning(
            "SECRET_KEY is not set: sessions are signed with instance/secret_key, valid on this "
            "process only; give every replica the same SECRET_KEY")
    settings = ensure_secret_key(settings)
    app.config.update(
        SECRET_KEY=settings.secret_key,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        MAX_CONTENT_LENGTH=MAX_CONTENT_LENGTH,
        # A form's field holds at most Flask's 500,000 bytes, but in the forms that carry a payload
        # or a patch (PAYLOAD_FORMS, below), where it may be as large as a body.
        MAX_FORM_MEMORY_SIZE=FORM_FIELD_MAX,
        WTF_CSRF_TIME_LIMIT=None,
        WTF_CSRF_CHECK_DEFAULT=False,
    )
    app.config.update(config)
    # JSON keeps the order it was built in: an entry's fields in the order entries/shape.py
    # declares them (SPEC section 6), not sorted.
    app.json.sort_keys = False
    app.extensions[EXTENSION] = Runtime.create(settings)

    csrf = CSRFProtect(app)
    auth.login_manager.init_app(app)
    oidc.init_app(app)  # its routes, with DLQ_OIDC_ISSUER set
    # Before the CSRF check below: a cross-site write is refused as such.
    security.init_app(app)
    errors.init_app(app)
    web_params.init_app(app)  # a query parameter given twice is a 400, on every route
    query_parameters.init_app(app)  # and one that reads as a misspelling of a route's own
    templating.init_app(app)
    cli.init_app(app)
    htmx.init_app(app)
    for module in (auth, pages, groups, api, actions, bulk, audit, export, metrics, openapi, status, saved_views,
                   admin, repair, row_actions, alert_outbox, sources):
        app.register_blueprint(module.bp)

    def _payload_forms():
        if request.endpoint in PAYLOAD_FORMS:
            request.max_form_memory_size = MAX_CONTENT_LENGTH

    # First of all: the checks before the view read the form (web/params.py's refusal of a
    # parameter given twice, the CSRF token), and its size limit applies when it is first read.
    app.before_request_funcs.setdefault(None, []).insert(0, _payload_forms)

    @app.before_request
    def _csrf_unless_bearer():
        # A bearer-token call carries no cookie, so no other site can forge it; everything
        # else that changes state needs the CSRF token (a form field or X-CSRFToken header).
        # A request that its route's role refuses for want of a session has nothing to forge,
        # nor has one that matches no route or no method of it (answered 404 or 405: nothing runs).
        if bearer_token() is None and request.method in app.config["WTF_CSRF_METHODS"] \
                and request.routing_exception is None and not auth.wants_a_session():
            csrf.protect()

    logging.getLogger("dlq_dashboard").setLevel(logging.INFO)
    return app
