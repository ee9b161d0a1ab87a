"""Yes-or-no values from requests, read one way: a form's checkbox, a query string, a JSON body
and a setting accept the same words, so ``"force": "false"`` is false wherever it is sent.

A value that is none of the words is an InvalidRequest whose sentence names the parameter and
the words it accepts; nothing is taken as true because it is not empty.
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidRequest

TRUE_WORDS = ("true", "1", "on", "yes")
FALSE_WORDS = ("false", "0", "off", "no")
#: The words, for a sentence that says what is accepted (worded as web/params.py's one_of).
ACCEPTED = "one of true, false, 1, 0, on, off, yes, no"


def truth(raw: Any) -> bool | None:
    """True or False for one of the words (any case, spaces around ignored), a JSON true or
    false, or the number 1 or 0; None for anything else."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int):
        return {1: True, 0: False}.get(raw)
    if isinstance(raw, str):
        word = raw.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    return None


def flag(raw: Any, name: str, default: bool = False) -> bool:
    """``raw`` as a yes or no; ``default`` when it is absent (None, or blank text, as an unchecked
    checkbox or an empty query parameter sends it). Anything else is an InvalidRequest."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return default
    value = truth(raw)
    if value is None:
        shown = repr(raw) if len(repr(raw)) <= 42 else repr(raw)[:40] + "…"
        raise InvalidRequest(f"{name} {shown} is not valid: use {ACCEPTED}, or leave it out")
    return value
