"""Characters a terminal or a page obeys rather than shows, and the text that shows them.

Control characters (but the line's end and a tab) ring a terminal's bell, move its cursor or,
from an escape (ESC), restyle and retitle it; the marks that reorder a line's text (U+202A-202E,
U+2066-2069, U+200E, U+200F, U+061C) make "orders.\\u202edetaerc" read "orders.created", in a
terminal and on a page alike. A dead letter's subject, error, headers and payload may hold any of
them: each is written as its escape, as JSON writes it, by the command line and by the pages.
"""

from __future__ import annotations

import re

UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """``text`` with what a terminal or a page would obey (UNSHOWN) written as JSON writes it
    (``\\u0007``, ``\\u202e``): so too in a command's JSON, which stays JSON, with the same text."""
    return UNSHOWN.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
