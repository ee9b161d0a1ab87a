"""What the entry page validates after a republish: the payload last sent.

Once an entry has been republished, "Against the current schema" is about the payload that went
out (edited by hand or by a bulk job's patch, or the original), so an operator sees whether the
fix they sent passes, and the original's verdict is kept below it.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from ..masking import Mask
from ..times import format_time, parse_time
from ..unpacking import judged


@dataclass
class LastSent:
    """The newest published republish of an entry and the current schema's verdict on its payload."""

    actor: str | None
    at: datetime | None
    edited: bool
    msg_id: str | None
    job_id: int | None = None
    schema: str | None = None
    valid: bool = True
    errors: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # it could not be validated
    hidden: bool = False  # a viewer may not see the payload (DLQ_MASK)
    payload: bytes | None = None  # as this request may see it (None when hidden)

    def to_dict(self) -> dict[str, Any]:
        """The JSON of GET /api/entries/<id>'s ``last_sent`` (web/openapi.py LastSent)."""
        return {"actor": self.actor, "at": format_time(self.at), "edited": self.edited, "msg_id": self.msg_id,
                "job_id": self.job_id, "hidden": self.hidden,
                "payload_base64": None if self.payload is None else base64.b64encode(self.payload).decode(),
                "schema": self.schema, "valid": None if self.hidden or self.error else self.valid,
                "errors": self.errors, "error": self.error}


def last_sent(stored: list[dict], shown: list[dict], subject: str | None,
              validate: Callable[[str | None, bytes], Any]) -> LastSent | None:
    """The verdict on the payload of the newest published republish, or None if there is none.

    ``stored`` are the republishes as stored (the payload validated), ``shown`` the same as the
    reader may see them (detail.py republishes_seen): their hidden values are masked in the
    messages, as the entry's own are."""
    published = [(i, r) for i, r in enumerate(stored) if r.get("state") == "published"]
    if not published:
        return None
    index, rep = published[-1]
    seen = shown[index]
    at = rep.get("published_at") or rep.get("created_at")
    result = LastSent(rep.get("actor"), parse_time(at) if isinstance(at, str) else at, bool(rep.get("edited")),
                      rep.get("msg_id"), rep.get("job_id"), hidden=bool(seen.get("payload_hidden")),
                      payload=None if seen.get("payload_hidden") else seen.get("payload"))
    if result.hidden:
        return result
    try:
        # A payload its Content-Encoding declares compressed is judged as its consumer reads it.
        verdict = validate(subject, judged(rep.get("headers"), rep.get("payload") or b""))
    except RecursionError:
        result.error = "The payload sent nests too deeply to be validated."
        return result
    if verdict.unusable:  # the file that would judge it could not be loaded
        result.error = f"Not validated: {verdict.unusable}."
        return result
    values = seen.get("hidden_values") or ()
    result.schema = verdict.schema
    result.errors = [{**e.to_dict(), "message": Mask.mask_text(e.message, values) if values else e.message}
                     for e in verdict.errors]
    result.valid = not verdict.errors
    return result
