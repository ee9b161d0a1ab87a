"""Repair by the schema for many entries: each payload coerced by its current schema
(entries/repair.py), previewed, then republished by a ``repair`` job through the same items,
leases and intents as a patch job.

The repair of a stored payload under one schema is the same bytes every time, so a retried or
resumed item asks for the same intent, and an intent already pending or published carries the
payload it was decided with (work.py): the msgId rule keeps each republish exactly once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Sequence

from sqlalchemy import select

from ...entries.repair import (CANNOT, REPAIRED, STILL_FAILS, VALID, Change, Repair, repair_payload,
                               schema_validator)
from ..context import ActionContext
from ..decisions import edited_from, republish_refusal
from ..intents import ENTRIES
from .patching import Unpatchable
from .refusals import ONE_ENTRY, subject_key, subjects_without_stream

#: Entries whose diff a preview shows, and how many a preview counts at most (as a patch's preview).
PREVIEW_DIFFS, PREVIEW_BOUND = 5, 10_000
#: Examples a preview keeps of each reason an entry cannot be repaired.
REASON_EXAMPLES = 3
_CHUNK = 500
ALREADY_PASSES = "The payload already passes the current schema; nothing to repair."


def _validators(rt: ActionContext) -> dict[int, Any]:
    """The jsonschema validators of the loaded schemas, made once per registry."""
    registry = rt.schemas
    cached = getattr(registry, "_repair_validators", None)
    if cached is None or cached[0] is not registry.schemas:
        cached = (registry.schemas, {id(s): schema_validator(s.schema) for s in registry.schemas})
        try:
            registry._repair_validators = cached
        except AttributeError:  # a registry that takes no attributes: made again next time
            pass
    return cached[1]


def repair_entry(rt: ActionContext, row, *, name: str | None = None) -> Repair:
    """What repair by the current schema makes of an entry (a row or mapping with id, status,
    original_subject, payload, payload_available, headers): CANNOT with the sentence when it
    cannot be republished from here, has no payload or no schema covers its subject."""
    refusal = republish_refusal(row, edit=True, name=name)
    payload = bytes(_get(row, "payload") or b"")
    if refusal:
        return Repair(CANNOT, payload, reason=refusal)
    if not _get(row, "payload_available"):
        return Repair(CANNOT, payload, reason="The payload is not available (the source stream no longer had it).")
    subject = _get(row, "original_subject")
    schema = rt.schemas.for_subject(subject)
    if schema is None:
        unusable = rt.schemas.unusable_for(subject)
        return Repair(CANNOT, payload, reason=f"There is nothing to repair by: the {unusable}." if unusable else
                      "No schema covers its subject, so there is nothing to repair by.")
    base, unpacked = edited_from(row)  # gzip bytes no header declares: repaired decompressed
    result = repair_payload(_validators(rt)[id(schema)], base)
    return _decompressed_first(result, payload) if unpacked else result


#: The first change of a repair of gzip bytes no header declares (decisions.edited_from).
DECOMPRESSED = Change("", "gzip bytes decompressed (its producer compressed it without saying so)")


def _decompressed_first(result: Repair, stored: bytes) -> Repair:
    """A repair of the decompressed payload as a repair of the stored one: decompressing is its
    first change (one that passes once decompressed is repaired by that alone)."""
    if result.outcome == CANNOT:
        return Repair(CANNOT, stored, reason=result.reason)
    if result.outcome == VALID:
        return Repair(REPAIRED, result.payload, (DECOMPRESSED,))
    return Repair(result.outcome, result.payload, (DECOMPRESSED, *result.changes), result.reason)


def repair_for_job(rt: ActionContext, row) -> bytes:
    """The payload a repair job republishes for this entry; Unpatchable (the item is skipped with
    the reason) unless the repaired payload passes the current schema."""
    result = repair_entry(rt, row)
    if result.outcome == REPAIRED:
        return result.payload
    raise Unpatchable(ALREADY_PASSES if result.outcome == VALID else result.reason)


def preview_repair(rt: ActionContext, ids: Sequence[int], *, diffs: int = PREVIEW_DIFFS,
                   bound: int = PREVIEW_BOUND) -> dict[str, Any]:
    """What a repair job would do to the first ``bound`` of these entries: how many would pass
    once repaired (and be republished), still fail, cannot be repaired or already pass, by
    reason with a few entries each; those of a subject no stream stores (``no_stream``); and the
    payload before and after for the first ``diffs`` repaired (the page shows their line diff)."""
    counted = list(ids[:bound])
    counts: Counter = Counter()
    reasons: dict[str, dict[str, list]] = {STILL_FAILS: {}, CANNOT: {}}
    examples: list[dict[str, Any]] = []
    passing: Counter = Counter()  # subject -> entries that would pass: NATS may store none of them
    for start in range(0, len(counted), _CHUNK):
        chunk = counted[start:start + _CHUNK]
        with rt.engine.connect() as conn:
            rows = conn.execute(select(ENTRIES.c.id, ENTRIES.c.status, ENTRIES.c.original_subject, ENTRIES.c.payload,
                                       ENTRIES.c.payload_available, ENTRIES.c.headers, ENTRIES.c.source)
                                .where(ENTRIES.c.id.in_(chunk)).order_by(ENTRIES.c.id)).all()
        for row in rows:
            result = repair_entry(rt, row._mapping, name=ONE_ENTRY)  # alike ones counted as one
            counts[result.outcome] += 1
            if result.outcome in reasons:
                shown = reasons[result.outcome].setdefault(result.reason, [0, []])
                shown[0] += 1
                if len(shown[1]) < REASON_EXAMPLES:
                    shown[1].append(row.id)
            if result.outcome == REPAIRED:
                passing[subject_key(rt, row)] += 1
                if len(examples) < diffs:
                    before, unpacked = edited_from(row._mapping)
                    examples.append({"id": row.id, "before": before, "after": result.payload, "decompressed": unpacked,
                                     "changes": [c.to_dict() for c in result.changes]})
    no_stream, note = subjects_without_stream(rt, [s for s, _ in passing.most_common()])
    refused = {sentence: passing[subject] for subject, sentence in no_stream.items()}

    def by_reason(outcome: str) -> list[dict[str, Any]]:
        found = sorted(reasons[outcome].items(), key=lambda kv: -kv[1][0])
        return [{"reason": reason, "count": n, "examples": shown} for reason, (n, shown) in found]

    return {"counted": len(counted), "bounded": len(ids) > bound, "total": len(ids),
            "pass": counts[REPAIRED], "still_fail": counts[STILL_FAILS], "cannot": counts[CANNOT],
            "already_valid": counts[VALID], "still_fail_reasons": by_reason(STILL_FAILS),
            "cannot_reasons": by_reason(CANNOT), "examples": examples, "no_stream": refused, "note": note,
            "sent": counts[REPAIRED] - sum(refused.values())}


def _get(row, name: str):
    return row[name] if isinstance(row, Mapping) else getattr(row, name)
