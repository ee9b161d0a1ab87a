"""What every template's markup promises, read from the templates themselves:

- a box of facts (app.css `.facts`: a grid of cells) keeps each label with its value: every <dt>
  and its <dd> stand in a <div> of their own, one cell. Laid out directly in the <dl>, each label
  and each value took a cell of its own and the grid paired a label with the next fact's value
  (the group page's "Key" beside its first time seen, the row action's question page);
- every column header names its column (a job's items had a "Result" column and a nameless one
  beside it; the groups', the views' and the sources' last columns had none)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


class FactsReader(HTMLParser):
    """The <dt> and <dd> tags found directly inside a <dl class="facts ...">, by line."""

    def __init__(self):
        super().__init__()
        self.open: list[tuple[str, bool]] = []  # (tag, a facts list)
        self.loose: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("dt", "dd") and self.open and self.open[-1] == ("dl", True):
            self.loose.append(f"<{tag}> on line {self.getpos()[0]}")
        if tag in ("dl", "div"):
            classes = (dict(attrs).get("class") or "").split()
            self.open.append((tag, tag == "dl" and "facts" in classes))

    def handle_endtag(self, tag):
        if tag in ("dl", "div") and self.open and self.open[-1][0] == tag:
            self.open.pop()


class HeaderReader(HTMLParser):
    """The <th> that hold neither text nor a labelled control, by line."""

    def __init__(self):
        super().__init__()
        self.header: tuple[int, list[str]] | None = None
        self.nameless: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "th":
            self.header = (self.getpos()[0], [])
        elif self.header is not None and dict(attrs).get("aria-label"):
            self.header[1].append(dict(attrs)["aria-label"])

    def handle_data(self, data):
        if self.header is not None:
            self.header[1].append(data.strip())

    def handle_endtag(self, tag):
        if tag == "th" and self.header is not None:
            line, names = self.header
            if not any(names):
                self.nameless.append(f"<th> on line {line}")
            self.header = None


def with_facts() -> list[Path]:
    return sorted(path for path in TEMPLATES.glob("*.html") if 'class="facts' in path.read_text())


def test_the_templates_with_a_box_of_facts_are_found():
    assert {"entry.html", "group.html", "row_confirm.html"} <= {path.name for path in with_facts()}


@pytest.mark.parametrize("template", with_facts(), ids=lambda path: path.name)
def test_each_label_stands_with_its_value_in_a_cell_of_its_own(template):
    reader = FactsReader()
    reader.feed(template.read_text())
    assert reader.loose == [], f"{template.name}: a label or value outside a fact's <div>: {reader.loose}"


@pytest.mark.parametrize("template", sorted(TEMPLATES.glob("*.html")), ids=lambda path: path.name)
def test_every_column_header_names_its_column(template):
    reader = HeaderReader()
    reader.feed(template.read_text())
    assert reader.nameless == [], f"{template.name}: a column header without a name: {reader.nameless}"
