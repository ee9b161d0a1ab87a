"""Half a UTF-16 pair (a lone surrogate): what a JSON escape such as ``"\\ud800"`` decodes to
when its other half is missing. JSON allows the escape, and Python reads it into a string, but
no UTF-8 text (a page, a database column, a request body) can hold the result: such a character
is written back as the escape it came from.
"""

from __future__ import annotations

import re

_LONE = re.compile("[\ud800-\udfff]")


def first_lone_surrogate(text: str) -> str | None:
    """The first lone surrogate of ``text`` as its JSON escape (``\\ud800``), or None."""
    found = _LONE.search(text)
    return None if found is None else f"\\u{ord(found.group()):04x}"


def escape_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written as its JSON escape, so that UTF-8 can hold it
    (in a JSON text, where such characters stand only inside strings, the document is the same)."""
    return _LONE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _LONE.search(text) else text
