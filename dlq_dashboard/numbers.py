"""Whole numbers from requests, bounded once: every id, version, limit and position a form, a
URL or a JSON body carries is read here, so none reaches the database or a slice out of range.

Ids are 64-bit in the database (below 2^63), versions 32-bit (below 2^31). A bad value is an
InvalidRequest whose sentence names the parameter and what it accepts.
"""

from __future__ import annotations

from typing import Any

from .errors import InvalidRequest

ID_MAX = 2**63 - 1
VERSION_MAX = 2**31 - 1
#: The most of a bad value a sentence quotes: a JSON body may send a number of thousands of digits.
QUOTED = 40


def quoted(raw: Any) -> str:
    """``raw`` as a sentence refusing it quotes it: its repr, at most QUOTED characters of it
    (text and numbers alike) and "…" when cut."""
    if isinstance(raw, str):
        return repr(raw if len(raw) <= QUOTED else raw[:QUOTED] + "…")
    try:
        text = repr(raw)
    except ValueError:  # an int longer than Python converts to text (4,300 digits)
        return f"(a number of more than {QUOTED} digits)"
    return text if len(text) <= QUOTED else text[:QUOTED] + "…"


def whole_number(raw: Any, name: str, *, low: int = 0, high: int = ID_MAX, what: str = "") -> int:
    """``raw`` (an int, or text of digits) as an int from ``low`` to ``high``; ``what`` says in a
    few words what the number is, for the sentence."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and raw.strip().isascii() and raw.strip().isdigit():
        value = int(raw.strip())
    else:
        value = None
    if value is None or not low <= value <= high:
        bound = f"from {low:,} to {high:,}" if high != ID_MAX else f"of {low:,} or more, below 2^63"
        raise InvalidRequest(f"{name} {quoted(raw)} is not valid: use a whole number {bound}"
                             + (f" ({what})" if what else ""))
    return value
