"""The one stylesheet holds one definition per rule: a selector is written once in each media
context, and no property of a selector is set twice there (the earlier one would be dead, or a
rule split in two places)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

CSS = Path(__file__).resolve().parent.parent / "static" / "app.css"


def style_rules(css: str) -> list[tuple[tuple[str, ...], str, str]]:
    """Every style rule as (its at-rule context, e.g. ("@media (max-width: 980px)",), its selector
    list with whitespace runs as one space, its declarations). Comments are dropped; a brace in a
    string does not count."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    found, context, text, at = [], [], "", 0
    while at < len(css):
        char = css[at]
        if char in "\"'":
            end = css.index(char, at + 1)
            text, at = text + css[at:end + 1], end + 1
            continue
        if char == "{":
            context.append(" ".join(text.split()))
            text = ""
        elif char == "}":
            head = context.pop()
            if not head.startswith("@"):
                found.append((tuple(context), head, text))
            text = ""
        else:
            text += char
        at += 1
    assert not context, "an unclosed block"
    return found


def declarations(body: str) -> list[str]:
    """The property names a rule sets, in order."""
    return [d.split(":", 1)[0].strip().lower() for d in body.split(";") if ":" in d]


def selector_list(selectors: str) -> list[str]:
    """A selector list's selectors: split at its commas, not at those inside a pseudo-class's
    parentheses (``td:not(.who, .when)`` is one selector)."""
    found, depth, start = [], 0, 0
    for at, char in enumerate(selectors):
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            found.append(selectors[start:at])
            start = at + 1
    return found + [selectors[start:]]


def twice_defined(css: str) -> list[str]:
    """The selectors written twice in one media context, and the properties of one selector set twice there."""
    selectors, properties = defaultdict(int), defaultdict(int)
    for context, selector, body in style_rules(css):
        selectors[context, selector] += 1
        for one in selector_list(selector):
            for name in declarations(body):
                properties[context, " ".join(one.split()), name] += 1
    return ([f"{' '.join(c) or 'top level'}: {s} written {n} times" for (c, s), n in selectors.items() if n > 1]
            + [f"{' '.join(c) or 'top level'}: {s} sets {p} {n} times" for (c, s, p), n in properties.items() if n > 1])


def test_each_selector_is_defined_once_in_each_media_context_of_the_stylesheet():
    rules = style_rules(CSS.read_text())
    assert len(rules) > 150  # the parser read the file, not a fraction of it
    assert twice_defined(CSS.read_text()) == []


@pytest.mark.parametrize("css, found", [
    (".split { display: grid; }\n@media (max-width: 980px) { .split { grid-template-columns: 1fr; } }\n"
     "@media (max-width: 980px) { .split { grid-template-columns: minmax(0, 1fr); } }",
     ["@media (max-width: 980px): .split written 2 times",
      "@media (max-width: 980px): .split sets grid-template-columns 2 times"]),
    ("main { padding: 1rem; }\n/* later */\nmain { min-width: 0; }", ["top level: main written 2 times"]),
    ("pre.code { white-space: pre; }\npre, pre.code { white-space: pre-wrap; }",
     ["top level: pre.code sets white-space 2 times"]),
    # Not twice: a selector in another media context, a property of another selector of a group.
    (".a { color: red; }\n@media (max-width: 600px) { .a { color: blue; } }\n.a, .b { margin: 0; }\n"
     ".b { content: \"}\"; color: red; }", []),
    # A comma inside a pseudo-class's parentheses does not end a selector.
    ("table.a td:not(.x, .y) { order: 3; }\ntable.b td:not(.x, .y) { order: 3; }", []),
])
def test_the_check_finds_a_rule_written_twice_and_nothing_else(css, found):
    assert twice_defined(css) == found
