"""Which lines of the editor's text a schema error points at: each JSON Pointer of the errors
(``/items/0/price``) to the line where that value starts in the text as typed, whatever its
layout (the pretty form the editor starts with, or one line). A pointer to something the text
does not hold (a required property missing) points at the nearest value it does hold.

The text is read once, and only the values on the errors' pointers are looked at: a value's
pointer is never written out, so a payload nested 100,000 deep costs a byte a level, not a
pointer a level (which grows with the depth: memory of the depth's square).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

# A string, a number or a literal, from where a value starts.
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_ATOM = re.compile(r"-?\d[\d.eE+-]*|true|false|null|-")

# What each open container expects next.
_ITEM, _KEY, _MEMBER = 0, 1, 2  # an array's item; an object's key; the value of the key just read


@dataclass(frozen=True)
class FailingLine:
    """One line the editor marks, and the errors that point at it."""

    line: int  # 1-based
    pointers: tuple[str, ...]
    messages: tuple[str, ...]


class _Node:
    """A value the errors' pointers pass through (a trie of their tokens), and its line once found."""

    __slots__ = ("children", "line")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.line: int | None = None


def _tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _trie(pointers: Iterable[str]) -> _Node:
    root = _Node()
    for pointer in pointers:
        node = root
        for token in _tokens(pointer):
            node = node.children.setdefault(token, _Node())
    return root


def _find(text: str, root: _Node) -> bool:
    """Set the line of each node of ``root`` whose value ``text`` holds; False when ``text`` is
    not a JSON document this scanner can follow."""
    at, line, size = 0, 1, len(text)
    expects = bytearray()  # each open container: _ITEM, _KEY or _MEMBER
    # The open containers that are on the pointers, outermost first (those inside one that is
    # not are not either): [its node, its next index, the node of the key just read].
    on_path: list[list] = []
    found = False

    def skip() -> None:
        nonlocal at, line
        while at < size and text[at] in " \t\r\n":
            line += text[at] == "\n"
            at += 1

    try:
        skip()
        while at < size:
            char = text[at]
            if char in "]}":
                if not expects or expects[-1] != (_ITEM if char == "]" else _KEY):
                    return False
                expects.pop()
                del on_path[len(expects):]
                at += 1
            elif char == ",":
                at += 1
            elif expects and expects[-1] == _KEY:
                match = _STRING.match(text, at)  # an object's key, then its colon
                if not match:
                    return False
                if len(on_path) == len(expects):
                    on_path[-1][2] = on_path[-1][0].children.get(json.loads(match.group()))
                expects[-1] = _MEMBER
                at = match.end()
                skip()
                if at >= size or text[at] != ":":
                    return False
                at += 1
                skip()
                continue
            else:
                if not expects:
                    if found:
                        return False  # a second value after the document
                    node: _Node | None = root
                    found = True
                elif len(on_path) == len(expects):
                    parent = on_path[-1]
                    if expects[-1] == _ITEM:
                        node = parent[0].children.get(str(parent[1]))
                        parent[1] += 1
                    else:
                        node = parent[2]
                else:
                    node = None
                if node is not None:
                    node.line = line
                if expects and expects[-1] == _MEMBER:
                    expects[-1] = _KEY
                if char in "[{":
                    expects.append(_ITEM if char == "[" else _KEY)
                    if node is not None:
                        on_path.append([node, 0, None])
                    at += 1
                else:
                    match = _STRING.match(text, at) if char == '"' else _ATOM.match(text, at)
                    if not match:
                        return False
                    at = match.end()
            skip()
    except (IndexError, ValueError):
        return False
    return found and not expects  # an unclosed array or object is not a document yet


def value_lines(text: str, pointers: Iterable[str]) -> dict[str, int]:
    """The line (1-based) where each of ``pointers`` that ``text`` holds starts; ``{}`` when
    ``text`` is not a JSON document this scanner can follow."""
    pointers = list(pointers)
    root = _trie(pointers)
    if not _find(text, root):
        return {}
    lines = {}
    for pointer in pointers:
        node: _Node | None = root
        for token in _tokens(pointer):
            node = node.children[token]
        if node.line is not None:
            lines[pointer] = node.line
    return lines


def failing_lines(text: str, errors: Iterable[Mapping[str, str]]) -> list[FailingLine]:
    """The lines the schema ``errors`` (each with its ``path`` and ``message``) point at, in order."""
    errors = list(errors)
    root = _trie(error.get("path") or "" for error in errors)
    if not errors or not _find(text, root):
        return []
    marked: dict[int, tuple[list[str], list[str]]] = {}
    for error in errors:
        # The deepest value on the error's pointer that the text holds.
        node, line = root, root.line
        for token in _tokens(error.get("path") or ""):
            node = node.children[token]
            if node.line is None:
                break
            line = node.line
        pointers, messages = marked.setdefault(line, ([], []))
        pointers.append(error.get("path") or "/")
        messages.append(error.get("message", ""))
    return [FailingLine(n, tuple(p), tuple(m)) for n, (p, m) in sorted(marked.items())]
