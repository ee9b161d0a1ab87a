"""Who is asking: the one value every read of entries, groups, jobs and the audit is given."""

from __future__ import annotations

from dataclasses import dataclass

from ..accounts import ROLES
from ..masking import Mask

_RANK = {role: i for i, role in enumerate(ROLES)}


@dataclass(frozen=True)
class Reader:
    """A reader: its role, and the mask (DLQ_MASK) it sees entries through, None when it sees
    them as stored. Build one with ``Reader.of``; the web makes it from the request's identity
    (web/data.py ``current_reader``), the command line from its ``--as`` option."""

    role: str
    mask: Mask | None = None
    # What of the entries a reader may see at all (team access) is to be decided here too:
    # its scopes join the role and the mask as a field of this value, and visible.py applies them.

    @classmethod
    def of(cls, role: str | None, mask: Mask | None) -> "Reader":
        """The reader with ``role`` (None, nobody signed in: read as a viewer) under the
        settings' ``mask``: a viewer sees through it, an operator and an admin do not."""
        role = role if role in _RANK else "viewer"
        return cls(role, mask if mask and _RANK[role] < _RANK["operator"] else None)

    def may(self, role: str) -> bool:
        """True when this reader's role is ``role`` or above it."""
        return _RANK[self.role] >= _RANK[role]

    @property
    def masked(self) -> bool:
        """Whether anything is hidden from this reader."""
        return self.mask is not None
