"""Half a UTF-16 pair (a lone surrogate): what a JSON escape such as ``"\\ud800"`` decodes to
when its other half is missing. JSON allows the escape, and Python reads it into a string, but
no UTF-8 text (a page, a database column, a request body) can hold the result: such a character
is written back as the escape it came from.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

import orjson

_LONE = re.compile("[\ud800-\udfff]")


def first_lone_surrogate(text: str) -> str | None:
    """The first lone surrogate of ``text`` as its JSON escape (``\\ud800``), or None."""
    found = _LONE.search(text)
    return None if found is None else f"\\u{ord(found.group()):04x}"


def escape_lone_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written as its JSON escape, so that UTF-8 can hold it
    (in a JSON text, where such characters stand only inside strings, the document is the same)."""
    return _LONE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _LONE.search(text) else text


# Header values: bytes that are not UTF-8 are read with ``surrogateescape`` (each such byte one of
# U+DC80..U+DCFF, nats/headers.py), so that a republish sends them back as they came. The stored
# headers' JSON (a text column: PostgreSQL's jsonb refuses such escapes, as it refuses "\u0000")
# holds each as its escape (``"\udcff"``, plain ASCII; a backslash of a value is ``\\`` there). Who
# shows the headers reads them with loads_shown, each such run of bytes as U+FFFD, as nats-py reads
# them; only the republish reads them as kept (loads_kept) and sends the bytes.

def shown(text: str) -> str:
    """``text`` as shown: the bytes that are not UTF-8 it keeps (surrogateescape's) as U+FFFD, as
    ``bytes.decode(errors="replace")`` reads them; any other half of a UTF-16 pair as U+FFFD too."""
    if text.isascii() or not _LONE.search(text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a half pair that stands for no byte
        return _LONE.sub("\ufffd", text)


def _shown_in(value: Any) -> Any:
    if isinstance(value, str):
        return shown(value)
    if isinstance(value, list):
        return [_shown_in(item) for item in value]
    if isinstance(value, dict):
        return {shown(name): _shown_in(item) for name, item in value.items()}
    return value


def _loads(text: str, escaped: Callable[[Any], Any]) -> Any:
    """JSON text read by orjson, or, when it holds lone surrogate escapes (which orjson refuses),
    by json and given to ``escaped``."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        if "\\u" not in text:
            raise
        return escaped(json.loads(text))


def loads_kept(text: str) -> Any:
    """JSON text read with its lone surrogate escapes kept."""
    return _loads(text, lambda value: value)


def loads_shown(text: str) -> Any:
    """JSON text read as it is shown: each lone surrogate escape's string as :func:`shown` gives it."""
    return _loads(text, _shown_in)


def dumps_kept(value: Any) -> str:
    """``value`` as JSON text that UTF-8 (and any text column) holds, lone surrogates as escapes."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson refuses a lone surrogate
        return escape_lone_surrogates(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
