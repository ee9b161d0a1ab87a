"""Which lines of the editor's text a schema error points at: each JSON Pointer of the errors
(``/items/0/price``) to the line where that value starts in the text as typed, whatever its
layout (the pretty form the editor starts with, or one line). A pointer to something the text
does not hold (a required property missing) points at the nearest value it does hold.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

# A string, a number or a literal, from where a value starts.
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_ATOM = re.compile(r"-?\d[\d.eE+-]*|true|false|null|-")


@dataclass(frozen=True)
class FailingLine:
    """One line the editor marks, and the errors that point at it."""

    line: int  # 1-based
    pointers: tuple[str, ...]
    messages: tuple[str, ...]


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def value_lines(text: str) -> dict[str, int]:
    """Every value's JSON Pointer and the line (1-based) where it starts; ``{}`` when ``text``
    is not a JSON document this scanner can follow (the errors are then listed without lines)."""
    lines: dict[str, int] = {}
    at, line, size = 0, 1, len(text)
    # Each open container: its pointer, whether it is an array, its next index, the key just read.
    stack: list[list] = []

    def skip() -> None:
        nonlocal at, line
        while at < size and text[at] in " \t\r\n":
            line += text[at] == "\n"
            at += 1

    def value_pointer() -> str:
        if not stack:
            return ""
        top = stack[-1]
        if top[1]:
            top[2] += 1
            return f"{top[0]}/{top[2] - 1}"
        return f"{top[0]}/{_escape(top[3])}"

    try:
        skip()
        while at < size:
            char = text[at]
            if char in "]}":
                stack.pop()
                at += 1
            elif char == ",":
                at += 1
            elif stack and not stack[-1][1] and stack[-1][3] is None:
                match = _STRING.match(text, at)  # an object's key, then its colon
                if not match:
                    return {}
                stack[-1][3] = json.loads(match.group())
                at = match.end()
                skip()
                if at >= size or text[at] != ":":
                    return {}
                at += 1
                skip()
                continue
            else:
                if not stack and lines:
                    return {}  # a second value after the document
                pointer = value_pointer()
                lines[pointer] = line
                if stack and not stack[-1][1]:
                    stack[-1][3] = None
                if char in "[{":
                    stack.append([pointer, char == "[", 0, None])
                    at += 1
                else:
                    match = _STRING.match(text, at) if char == '"' else _ATOM.match(text, at)
                    if not match:
                        return {}
                    at = match.end()
            skip()
    except (IndexError, ValueError):
        return {}
    return {} if stack else lines  # an unclosed array or object is not a document yet


def failing_lines(text: str, errors: Iterable[Mapping[str, str]]) -> list[FailingLine]:
    """The lines the schema ``errors`` (each with its ``path`` and ``message``) point at, in order."""
    found = value_lines(text)
    if not found:
        return []
    marked: dict[int, tuple[list[str], list[str]]] = {}
    for error in errors:
        pointer = error.get("path") or ""
        while pointer and pointer not in found:
            pointer = pointer.rsplit("/", 1)[0]
        if pointer not in found:
            continue
        pointers, messages = marked.setdefault(found[pointer], ([], []))
        pointers.append(error.get("path") or "/")
        messages.append(error.get("message", ""))
    return [FailingLine(n, tuple(p), tuple(m)) for n, (p, m) in sorted(marked.items())]
