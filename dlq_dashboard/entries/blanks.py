"""A bulk selection whose filters are all blank (``{"subject": ""}``, ``--subject " "``): as a
list's empty inputs they are no filter, so such a selection would take every open entry. The API,
the bulk forms and the command line refuse it (web/params.py, actions/bulk/jobs.py, cli/jobs.py)."""

from __future__ import annotations

from typing import Any, Mapping

from .filters import filter_of


def blank_filters(args: Mapping[str, Any]) -> dict[str, str] | None:
    """The filters ``args`` give a blank value (ListFilter.blank), when none has a value (None when
    one has; {} when none is given): as a list's empty inputs, no filter. A bulk selection by them
    would take every open entry; nothing_named says why it is refused."""
    blank = {}
    for name, value in ((str(k), v) for k, v in args.items() if filter_of(str(k))):  # paging (limit, cursor) aside
        if not filter_of(name).blank(value):
            return None
        blank[name] = "" if value is None else str(value)
    return blank


def nothing_named(args: Mapping[str, Any]) -> str | None:
    """A request's 400 for a bulk selection by ``args`` that names no filter (blank_filters)."""
    blank = blank_filters(args)
    if blank is None:
        return None
    given = f" ({', '.join(f'{k} {v!r}' for k, v in blank.items())}: blank, which is no filter)" if blank else ""
    return (f"filter names no filter{given}, so it would take every open entry: name at least one "
            "(e.g. {\"status\": \"open\"} for every open entry, {\"subject\": \"orders.*\"}).")
