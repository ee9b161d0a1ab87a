"""Operator actions on one entry over HTTP: republish (plain or edited), close, reopen.

Each route parses its parameters, makes one call into the actions layer and answers: JSON for
/api/..., and for pages a redirect after the POST (an htmx request gets HX-Redirect). Errors
are answered by web/errors.py; only the editor catches the ones it answers by showing the form
again.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, jsonify, render_template, request, url_for

from dlq_consumer.validation import read_json

from ..actions.close import close_entry, reopen_entry
from ..actions.decisions import edited_from, republish_refusal, source_verdict
from ..actions.errors import EDITOR_EMPTY, EmptyPayload, NatsDown, Refused
from ..actions.republish import republish_entry, republish_targets
from ..entries.filters import FilterError
from ..entries.view import EntryView
from ..errors import InvalidRequest
from ..flags import flag
from . import current_runtime, params
from .auth import actor_name, requires
from .data import entry_to_act_on, get_entry_or_404, request_filter
from .errors import status_of
from .presenters.lines import failing_lines
from .presenters.payloads import editable, line_diff, same_document
from .responses import after_post, render_block

bp = Blueprint("actions", __name__)


# --- JSON ----------------------------------------------------------------------------------------

@bp.route("/api/entries/<int:entry_id>/republish", methods=["POST"])
@requires("operator")
def api_republish(entry_id: int):
    """Republish with the version seen; ``payload_base64`` sends an edited payload, ``force`` an invalid one."""
    entry_to_act_on(entry_id, with_history=False)  # 404 outside the reader's scopes, 403 outside their acts
    body = params.json_body(*params.REPUBLISH_FIELDS)
    payload = params.base64_payload(body["payload_base64"]) if body.get("payload_base64") is not None else None
    outcome = republish_entry(current_runtime(), entry_id, params.json_version(body.get("version")), actor=actor_name(),
                              payload=payload, force=flag(body.get("force"), "force"))
    return jsonify(outcome.to_dict())


@bp.route("/api/entries/<int:entry_id>/close", methods=["POST"])
@requires("operator")
def api_close(entry_id: int):
    """Acknowledge and close with an optional note."""
    entry_to_act_on(entry_id, with_history=False)  # 404 outside the reader's scopes, 403 outside their acts
    body = params.json_body(*params.CLOSE_FIELDS)
    outcome = close_entry(current_runtime(), entry_id, params.json_version(body.get("version")), actor=actor_name(),
                          note=body.get("note"))
    return jsonify(outcome.to_dict())


@bp.route("/api/entries/<int:entry_id>/reopen", methods=["POST"])
@requires("operator")
def api_reopen(entry_id: int):
    """Reopen a closed or republished entry."""
    entry_to_act_on(entry_id, with_history=False)  # 404 outside the reader's scopes, 403 outside their acts
    version = params.json_version(params.json_body(*params.REOPEN_FIELDS).get("version"))
    return jsonify(reopen_entry(current_runtime(), entry_id, version, actor=actor_name()).to_dict())


@bp.route("/api/entries/<int:entry_id>/targets")
@requires("viewer")
def api_targets(entry_id: int):
    """The stream and consumers a republish of this entry would reach."""
    entry = get_entry_or_404(entry_id, with_history=False)
    return jsonify(republish_targets(current_runtime(), entry.original_subject, entry.source))


# --- pages ---------------------------------------------------------------------------------------

def _editor(entry: EntryView, *, editing: bool, payload_text: str | None = None, error: Exception | None = None,
            force: bool = False, status: int = 200):
    # The version the operator saw on the page they came from: a change since then is a 409.
    seen = request.values.get("version", "").strip()
    version = params.version(seen) if seen else entry.version
    base, unpacked = edited_from(entry)
    original, encoding = editable(base)
    current = payload_text if payload_text is not None else original
    rt = current_runtime()
    # Why it cannot be republished at all, said as the entry page says it (its buttons disabled
    # with the sentence): the page's own button is disabled with it, not refused after a try.
    refusal = republish_refusal(entry, status=True, edit=editing) or source_verdict(
        rt, entry.source, entry.id, entry.original_subject)
    # Sent before (by hand or a job): said above the button, as a second send is what it does.
    sent = [r for r in rt.store.republishes_of(entry.id) if r["state"] == "published"]
    return render_template("edit.html", entry=entry, version=version, editing=editing, encoding=encoding,
                           unpacked=unpacked, original=original, payload=current, sent_before=sent[-1] if sent else None,
                           check=check_payload(entry, current, encoding), force=force, targets=republish_targets(rt, entry.original_subject, entry.source),
                           list_args=kept_list_args(),
                           error=error, refusal=refusal), status


def _edited_body(entry: EntryView, text: str, encoding: str) -> bytes:
    """The bytes an edited payload republishes: what the operator submitted, or the original
    bytes exactly when the edit left the document as it was (only its layout differs); for a
    payload edited decompressed, the decompressed bytes then."""
    base = edited_from(entry)[0]
    if encoding == "base64":
        body = params.base64_payload(text, "The payload")
    else:
        # Browsers send a textarea's line breaks as CRLF; keep the original's own line breaks.
        body = (text.replace("\r\n", "\n") if b"\r\n" not in base else text).encode("utf-8")
    return base if same_document(base, body) else body


def _form_payload(entry: EntryView) -> bytes | None:
    """The edited payload of a form, or None for the original (a plain Republish sends none)."""
    if "payload" not in request.form:
        return None
    encoding = "base64" if request.form.get("encoding") == "base64" else "text"
    body = _edited_body(entry, request.form["payload"], encoding)
    if encoding == "text":
        _still_json(edited_from(entry)[0], body)
    return None if body == entry.payload else body


def _still_json(base: bytes, body: bytes) -> None:
    """An edit of a JSON payload that no longer parses is a slip of the keyboard, not a fix: the
    consumer would fail it at once (the schema override is for values a schema refuses, not
    for a syntax error). InvalidRequest, the form again with where it stops."""
    if not body:
        return  # emptied: refused as an empty payload (decisions.republish_refusal), not as "not JSON"
    try:
        read_json(base)  # the reader of the schema's verdict: NaN, 1e400 or UTF-16 are not JSON
    except (ValueError, RecursionError):
        return  # the original is not JSON either: text is edited as text
    try:
        read_json(body)
    except ValueError as exc:
        raise InvalidRequest(f"The edited payload is not JSON ({exc}); the original was. Nothing was "
                             "republished: correct it (the check beside the editor shows where).") from None
    except RecursionError:
        raise InvalidRequest("The edited payload nests too deeply to be read as JSON; nothing was republished.") \
            from None


def kept_list_args() -> dict[str, str]:
    """The filters of the list the entry was opened from, carried by an action's address so that
    the entry page it leads back to walks that list still (Previous, Next, Back to the list);
    none when they do not parse (the page would refuse them)."""
    try:
        return request_filter(request.args).to_args()
    except FilterError:
        return {}


def done(sentence: str, link_text: str, anchor: str = "timeline-title") -> None:
    """What an action did, said on the page it leads to (base.html announces it, role=status),
    with a link to where its result is shown."""
    flash({"text": sentence, "link": link_text, "anchor": anchor}, "done")


def republished_sentence(entry: EntryView, published, changed: str | None = None) -> str:
    """What a republish from the pages did: which payload went where (``changed``: how it was,
    "edited" or "repaired"), and what the broker said."""
    what = f"Republished entry {entry.id}" + (f" with the {changed} payload" if changed else "")
    where = f" to {entry.original_subject}" if entry.original_subject else ""
    if published is None:
        return f"{what}{where}."
    if published.duplicate:
        return f"{what}{where}: the broker had it already (message {published.msg_id}), so it was not sent twice."
    stored = f", stored by stream {published.stream} as message {published.seq}" if published.stream else ""
    return f"{what}{where}{stored}."


def check_payload(entry: EntryView, text: str, encoding: str) -> dict[str, Any]:
    """The current schema's verdict on an edited payload and its line diff from the original
    (of the pretty forms, so a one-field change is one line out and one in)."""
    try:
        body = _edited_body(entry, text, encoding)
    except InvalidRequest:
        return {"errors": [{"path": "", "message": "not valid base64"}], "schema": None, "diff": [],
                "changed": True, "lines": []}
    base, unpacked = edited_from(entry)  # the diff is from what the editor started with
    if not body:  # emptied: nothing to judge (a republish of it is refused: EDITOR_EMPTY)
        return {"errors": [], "schema": None, "empty": True, "diff": line_diff(base, body), "changed": True,
                "unpacked": unpacked, "lines": []}
    try:
        verdict = current_runtime().schemas.validate(entry.original_subject, body)
    except RecursionError:
        return {"errors": [{"path": "", "message": "the payload nests too deeply to be validated"}],
                "schema": None, "diff": line_diff(base, body), "changed": body != base, "unpacked": unpacked,
                "lines": []}
    errors = [e.to_dict() for e in verdict.errors]
    return {"errors": errors, "schema": verdict.schema, "unusable": verdict.unusable, "diff": line_diff(base, body),
            "changed": body != base, "unpacked": unpacked,
            # The editor's lines the errors point at (of the text as typed; none for base64).
            "lines": failing_lines(text, errors) if encoding == "text" else []}


@bp.route("/entries/<int:entry_id>/republish", methods=["GET"])
@requires("operator")
def confirm_republish(entry_id: int):
    """Confirm a republish: where it goes and which consumers will receive it."""
    return _editor(entry_to_act_on(entry_id), editing=False)


@bp.route("/entries/<int:entry_id>/edit")
@requires("operator")
def edit(entry_id: int):
    """The payload editor: validated against the current schema as the operator types."""
    return _editor(entry_to_act_on(entry_id), editing=True)


@bp.route("/entries/<int:entry_id>/validate", methods=["POST"])
@requires("operator", fragment=True)
def validate(entry_id: int):
    """The editor's live check (an htmx fragment): schema errors and the diff from the original."""
    entry = entry_to_act_on(entry_id)
    encoding = "base64" if request.form.get("encoding") == "base64" else "text"
    return render_block("edit.html", "check", entry=entry, editing=True,
                        check=check_payload(entry, request.form.get("payload", ""), encoding))


@bp.route("/entries/<int:entry_id>/republish", methods=["POST"])
@requires("operator")
def republish(entry_id: int):
    """Republish from the confirm page or the editor; back to the entry's timeline.

    A refusal (an invalid payload, no stream) or an outage shows the form again with the
    reason; a conflict is answered by web/errors.py with what changed meanwhile.
    """
    entry = entry_to_act_on(entry_id)
    force = flag(request.form.get("force"), "force")
    try:
        # In the try: an edit refused as read (not JSON, not base64) is the editor again with the
        # text as typed, not a page of its own that drops it.
        edited = _form_payload(entry)
        outcome = republish_entry(current_runtime(), entry_id, params.version(request.form.get("version")),
                                  actor=actor_name(), payload=edited, force=force)
    except InvalidRequest as exc:
        return _editor(entry, editing=True, payload_text=request.form.get("payload"), error=exc, force=force,
                       status=status_of(exc))
    except EmptyPayload as exc:  # the editor's words, not the API's ("send none")
        return _editor(entry, editing=True, payload_text=request.form.get("payload"),
                       error=Refused(EDITOR_EMPTY, entry_id=entry_id), force=force, status=status_of(exc))
    except (Refused, NatsDown) as exc:
        return _editor(entry, editing="payload" in request.form, payload_text=request.form.get("payload"),
                       error=exc, force=force, status=status_of(exc))
    done(republished_sentence(entry, outcome.publish, "edited" if edited is not None else None), "See it in the timeline")
    return after_post(url_for("pages.entry", entry_id=entry_id, **kept_list_args()))


@bp.route("/entries/<int:entry_id>/close", methods=["POST"])
@requires("operator")
def close(entry_id: int):
    """Acknowledge and close with a note."""
    entry_to_act_on(entry_id, with_history=False)
    close_entry(current_runtime(), entry_id, params.version(request.form.get("version")), actor=actor_name(),
                note=request.form.get("note"))
    done(f"Closed entry {entry_id}: it is acknowledged and no longer open.", "See it in the timeline")
    return after_post(url_for("pages.entry", entry_id=entry_id, **kept_list_args()))


@bp.route("/entries/<int:entry_id>/reopen", methods=["POST"])
@requires("operator")
def reopen(entry_id: int):
    """Reopen a closed or republished entry."""
    entry_to_act_on(entry_id, with_history=False)
    reopen_entry(current_runtime(), entry_id, params.version(request.form.get("version")), actor=actor_name())
    done(f"Reopened entry {entry_id}: it is open again.", "See it in the timeline")
    return after_post(url_for("pages.entry", entry_id=entry_id, **kept_list_args()))

