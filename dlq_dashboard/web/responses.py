"""How a view answers: a full page or one block of it for htmx, POST-redirect-GET. Shared by
every blueprint; errors and refusals are raised and answered by web/errors.py."""

from __future__ import annotations

import weakref
from typing import Callable
from urllib.parse import urlencode, urlsplit

from flask import Response, current_app, has_request_context, make_response, redirect, render_template, request, url_for
from flask_htmx import HTMX
from jinja2 import Environment, Template, nodes

htmx = HTMX()  # request detection; create_app registers it, which also puts `htmx` in templates


def bearer_token() -> str | None:
    """The token of an ``Authorization: Bearer`` header ('' if empty), or None without one."""
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip()


#: Paths that answer JSON besides /api/...: /api itself (no route), the health and readiness checks.
JSON_PATHS = ("/api", "/healthz", "/readyz")


def json_path(path: str) -> bool:
    """Whether ``path`` is one of the API's (its errors are JSON, whatever the client)."""
    return path.startswith("/api/") or path in JSON_PATHS


def wants_json() -> bool:
    """API and export routes, and every bearer-token call, answer errors as JSON; pages as HTML."""
    return json_path(request.path) or bearer_token() is not None


#: What a template binds outside its blocks ({% import %}, {% from ... import %}, {% set %}).
_TOP_LEVEL = (nodes.Import, nodes.FromImport, nodes.Assign, nodes.AssignBlock, nodes.Macro)
#: The attribute of an app's Jinja environment that keeps its templates' preludes. Kept by the
#: environment, they go with it: kept in a module-wide WeakKeyDictionary, each prelude held its
#: environment, whose cache held the template it was keyed by, so no key ever went, and every app
#: that rendered a fragment stayed in memory with all it held (26 of the apps of the 77 tests of
#: tests/test_pages.py, alive after the last).
_PRELUDES = "dlq_preludes"


def _prelude(env: Environment, template: Template) -> Template:
    """A template of just the statements ``template`` and the templates it extends run outside
    their blocks: a block rendered alone skips them, so a macro imported at the top of the page
    (csrf_field) would be undefined in its fragment (/jobs/<id>'s progress poll answered 500)."""
    preludes = env.__dict__.setdefault(_PRELUDES, weakref.WeakKeyDictionary())
    found = preludes.get(template)
    if found is None:
        statements: list[nodes.Node] = []
        name: str | None = template.name
        while name:
            tree = env.parse(env.loader.get_source(env, name)[0], name)
            # The page's own statements come last, so its own names win, as they do for its blocks.
            statements[:0] = [n for n in tree.body if isinstance(n, _TOP_LEVEL)]
            parent = next((n.template for n in tree.body if isinstance(n, nodes.Extends)), None)
            name = parent.value if isinstance(parent, nodes.Const) else None
        found = preludes[template] = env.from_string(nodes.Template(statements, lineno=1))
    return found


def render_block(template_name: str, block: str, **context) -> str:
    """Render one named block of a template with the same context a full render gets: the
    request's (context processors) and what the template binds outside its blocks."""
    app = current_app._get_current_object()
    env = app.jinja_env
    template = env.get_template(template_name)
    app.update_template_context(context)
    prelude = _prelude(env, template)
    bound = prelude.new_context(context)
    for _ in prelude.root_render_func(bound):
        pass
    return "".join(template.blocks[block](template.new_context({**context, **bound.vars})))


def page_or_fragment(template_name: str, block: str, status: int = 200, **context) -> Response:
    """The full page, or for an htmx request the named block (a history restore gets the page)."""
    if htmx and not htmx.history_restore_request:
        body = render_block(template_name, block, **context)
    else:
        body = render_template(template_name, **context)
    response = make_response(body, status)
    response.vary.add("HX-Request")
    return response


def after_post(url: str) -> Response:
    """POST-redirect-GET; htmx follows HX-Redirect instead of swapping a redirect in."""
    if request.headers.get("HX-Request"):
        response = make_response("", 204)
        response.headers["HX-Redirect"] = url
        return response
    return redirect(url, 303)


def came_from() -> str | None:
    """The page of this site the request came from (its Referer), as a path to link back to: an
    error page's way back to the form it was sent from; None when another site or none."""
    parts = urlsplit(request.referrer or "")
    if parts.netloc != request.host or not parts.path.startswith("/") or parts.path.startswith("//"):
        return None
    back = parts.path + (f"?{parts.query}" if parts.query else "")
    return None if back == request.full_path.rstrip("?") else back


def list_url(endpoint: str = "pages.index", **args) -> str:
    """A URL with the given query arguments, empty ones left out."""
    query = urlencode({k: v for k, v in args.items() if v not in (None, "")})
    return url_once(endpoint) + (f"?{query}" if query else "")


#: Where an app keeps the URLs url_once built (its extensions), and how many at most.
_BUILT, KEPT_URLS = "dlq_dashboard.urls", 4096
#: What of a request werkzeug builds a URL from (Map.bind_to_environ): its address and method.
_ADDRESS = ("SCRIPT_NAME", "HTTP_HOST", "SERVER_NAME", "SERVER_PORT", "wsgi.url_scheme", "REQUEST_METHOD")


def url_once(endpoint: str, **values) -> str:
    """url_for, each URL built once (the templates' ``url_for``).

    Every page links to the same places (the static files, the main nav) and some many times
    (the groups page to the bulk preview four times a group), and werkzeug builds a URL in about
    60 µs. What url_for makes in a request depends on its arguments and on what werkzeug reads
    of the request: its script root, host, scheme and method (and for a relative endpoint,
    '.name', its blueprint). The app has no URL defaults and its routes are fixed once it has
    answered a request, so those are the key; arguments that cannot be one (a list) are built
    each time."""
    if not has_request_context():
        return url_for(endpoint, **values)
    environ = request.environ
    # The values in their order, as the query string keeps it, each with its type: True and 1 are
    # equal keys but written "True" and "1".
    key = (*map(environ.get, _ADDRESS), request.blueprint if endpoint[:1] == "." else None, endpoint,
           *((name, type(value), value) for name, value in values.items()))
    built = current_app.extensions.get(_BUILT)
    if built is None:
        built = current_app.extensions[_BUILT] = {}
    try:
        return built[key]
    except KeyError:
        if len(built) >= KEPT_URLS:
            built.clear()  # the URLs asked most are built again at their next request
        url = built[key] = url_for(endpoint, **values)
        return url
    except TypeError:
        return url_for(endpoint, **values)


#: The id a URL is first built for by IdUrls: digits that no other part of a URL holds by chance
#: (a URL that does hold them is built by url_for every time).
_MARKER = 7_493_022_805_146_613_879


class IdUrls:
    """``url_for(endpoint, entry_id=..., **values)`` for many entries (or groups: ``key`` is the
    route's id, ``group_id``): each endpoint and values is built once, for a marker id, and each
    URL is that one with its id in the marker's place (werkzeug's URL building is about 60 µs; a
    list of 50 rows asked for 250 URLs, the groups page for one a group).

    Made for one page (web/data.py row_context, the groups page), so it never outlives the
    request that built its URLs."""

    def __init__(self, key: str = "entry_id"):
        self.key = key
        self._made: dict[tuple, Callable[[int], str]] = {}

    def __call__(self, endpoint: str, id_: int, **values) -> str:
        key = (endpoint, *values.items())  # in their order, as the query string keeps it
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = self._with_id(endpoint, values)
        return made(id_)

    def _with_id(self, endpoint: str, values: dict) -> Callable[[int], str]:
        url = url_for(endpoint, **{self.key: _MARKER}, **values)
        head, found, tail = url.partition(str(_MARKER))
        if not found or str(_MARKER) in tail:
            return lambda id_: url_for(endpoint, **{self.key: id_}, **values)
        # The int converter writes an id as str(int(id)).
        return lambda id_: f"{head}{int(id_)}{tail}"
