"""Reading request parameters (JSON bodies and forms) into values; a bad one is an
InvalidRequest, answered 400 with a sentence."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from flask import request

from ..errors import InvalidRequest


def version(raw: Any) -> int:
    """The entry version an operator saw, from a form field or a JSON value."""
    if isinstance(raw, bool) or raw is None or not str(raw).strip().lstrip("-").isdigit():
        raise InvalidRequest("version is required: send the entry's version as you saw it (a whole number).")
    return int(str(raw).strip())


def json_body() -> dict:
    """The request's JSON object."""
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise InvalidRequest("Send a JSON object as the request body.")
    return body


def base64_payload(raw: Any, name: str = "payload_base64") -> bytes:
    """Bytes from base64 text."""
    try:
        return base64.b64decode(str(raw), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{name} is not valid base64.") from None


def bulk_selection(source: dict) -> dict[str, Any]:
    """What a bulk request selects: ``ids`` or a ``filter`` (the list's filters), ``only_valid``,
    and ``upto`` (the newest id a preview showed), as create_job and select_items take them."""
    flt = source.get("filter")
    if flt is not None and not isinstance(flt, dict):
        raise InvalidRequest("filter must be an object of the list's filters, e.g. {\"subject\": \"orders.*\"}.")
    ids = source.get("ids")
    if ids is not None and not isinstance(ids, list):
        raise InvalidRequest("ids must be a list of entry ids.")
    upto = source.get("upto")
    if upto not in (None, "") and (isinstance(upto, bool) or not str(upto).isdigit() or int(upto) >= 2**63):
        raise InvalidRequest("upto must be an entry id: a whole number below 2^63.")
    return {"ids": ids, "filter_args": {k: str(v) for k, v in flt.items()} if flt is not None else None,
            "only_valid": bool(source.get("only_valid")), "upto": int(upto) if upto not in (None, "") else None}


FILTER_FIELDS = ("status", "subject", "stream", "consumer", "reason", "q", "since", "until", "group")


def form_selection() -> dict[str, Any]:
    """A bulk form's selection: the checked rows (``ids``) or the list's filters (``by=filter``)."""
    form = request.form
    if form.get("by") == "filter":
        return bulk_selection({"filter": {k: form[k] for k in FILTER_FIELDS if form.get(k)},
                               "only_valid": form.get("only_valid"), "upto": form.get("upto")})
    return bulk_selection({"ids": form.getlist("ids"), "upto": form.get("upto")})
