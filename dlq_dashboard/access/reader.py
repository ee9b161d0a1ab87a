"""Who is asking: the one value every read of entries, groups, jobs and the audit is given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..masking import Mask
from ..scopes import RANK as _RANK
from ..scopes import Grant, Scope, pattern_within, scopes_for


@dataclass(frozen=True)
class Reader:
    """A reader: its role, and the mask (DLQ_MASK) it sees entries through, None when it sees
    them as stored. Build one with ``Reader.of``; the web makes it from the request's identity
    (web/data.py ``current_reader``), the command line from its ``--as`` option."""

    role: str
    mask: Mask | None = None
    # The grants the reader holds (scopes.py); None: one unscoped grant of ``role``. What of the
    # entries the reader may see is what ``reads`` covers, what it may act on what ``acts`` covers.
    grants: tuple[Grant, ...] | None = None
    # (old name, source) for each name of a [[sources]] table's renamed_from (sources.py
    # renamed_sources): entries still carrying an old name are the renaming source's, so a scope
    # of that source (``two:orders.>``) covers them too.
    renamed: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, role: str | None, mask: Mask | None, grants: tuple[Grant, ...] | None = None,
           renamed: Mapping[str, str] | None = None) -> "Reader":
        """The reader with ``role`` (None, nobody signed in: read as a viewer) under the
        settings' ``mask``: a viewer sees through it, an operator and an admin do not.
        ``grants``: what a signed-in identity holds (None or only unscoped grants: everything);
        ``renamed``: each old name of a renamed source, with the source that has it now."""
        role = role if role in _RANK else "viewer"
        if grants is not None and all(g.scopes is None for g in grants):
            grants = None
        return cls(role, mask if mask and _RANK[role] < _RANK["operator"] else None, grants,
                   tuple(sorted((renamed or {}).items())) if grants is not None else ())

    @property
    def reads(self) -> tuple[Scope, ...] | None:
        """The scopes this reader may read entries in; None for every entry."""
        found = scopes_for(self.grants, "viewer") if self.grants is not None else None
        return () if found is False else self._with_old_names(found)

    @property
    def acts(self) -> tuple[Scope, ...] | None:
        """The scopes this reader may republish and close entries in; None for every entry
        (whether its role may act at all is ``may("operator")``)."""
        found = scopes_for(self.grants, "operator") if self.grants is not None else None
        return () if found is False else self._with_old_names(found)

    def _with_old_names(self, scopes: tuple[Scope, ...] | None) -> tuple[Scope, ...] | None:
        """``scopes`` and, for each one of a renamed source, the same pattern in each of its old
        names (the entries that keep an old name belong to the source that renamed it)."""
        if not scopes or not self.renamed:
            return scopes
        more = {Scope(s.pattern, old) for s in scopes if s.source is not None
                for old, new in self.renamed if new == s.source}
        return tuple(sorted(set(scopes) | more, key=lambda s: (s.pattern, s.source or ""))) if more else scopes

    def may(self, role: str) -> bool:
        """True when this reader's role is ``role`` or above it."""
        return _RANK[self.role] >= _RANK[role]

    def sees_all_of(self, other: "Reader") -> bool:
        """Whether this reader sees everything ``other`` sees: no mask where ``other`` has none, and
        each of ``other``'s scopes inside one of this reader's (a streamed export asks it of its
        caller as the caller is now, against the reader it began as)."""
        if self.mask is not None and other.mask is None:
            return False
        mine, theirs = self.reads, other.reads
        if mine is None:
            return True
        if theirs is None:
            return False
        return all(any(m.source in (None, t.source) and pattern_within(t.pattern, m.pattern) for m in mine)
                   for t in theirs)

    @property
    def masked(self) -> bool:
        """Whether anything is hidden from this reader."""
        return self.mask is not None
