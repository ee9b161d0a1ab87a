"""One fix for many: a JSON Patch (RFC 6902) applied to each entry's payload before it is republished.

The patch is checked once when the job is asked for (``parse_patch``), stored in the job's
selection, and applied again to each entry's stored payload when its window is claimed
(``patched_payload``). The result is the same bytes every time (the stored payload never
changes and the JSON is written compactly, keys in their order), so a retried or resumed
item asks for the same intent and the msgId rule keeps it exactly once. ``preview_patch``
counts, before anything runs, how many entries the patch would make pass the current schema.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any, Sequence

import jsonpatch
import jsonpointer
from sqlalchemy import select

from dlq_consumer.validation import NotJSON, one_value_a_key, read_json

from ...errors import InvalidRequest
from ..context import ActionContext
from ..decisions import edited_from, republish_refusal
from ..intents import ENTRIES
from .refusals import ONE_ENTRY, subject_key, subjects_without_stream

#: The operations of RFC 6902 and the members each needs besides ``op`` and ``path``.
OPERATIONS = {"add": ("value",), "remove": (), "replace": ("value",), "move": ("from",), "copy": ("from",),
              "test": ("value",)}
#: Entries whose diff a preview shows, and how many a preview counts at most.
PREVIEW_DIFFS, PREVIEW_BOUND = 5, 10_000
_CHUNK = 500


class PatchError(InvalidRequest):
    """A JSON Patch document that is not one; the message says why."""


class Unpatchable(Exception):
    """This entry's payload cannot take the patch; the message says why (the same for alike entries)."""


def parse_patch(raw: Any) -> list[dict[str, Any]]:
    """The operations of a JSON Patch given as JSON text or as a parsed list; PatchError (a 400) if
    it is not an array of valid operations."""
    if raw is None or isinstance(raw, (str, bytes)):
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else (raw or "")
        if not text.strip():
            raise PatchError("Write a JSON Patch: an array of operations, e.g. "
                             '[{"op": "replace", "path": "/price", "value": 12.5}].')
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise PatchError(f"The patch is not JSON ({exc}).") from None
        except RecursionError:
            raise PatchError("The patch nests too deeply to be read as JSON.") from None
    if not isinstance(raw, list):
        raise PatchError("A JSON Patch is an array of operations, e.g. "
                         '[{"op": "replace", "path": "/price", "value": 12.5}].')
    if not raw:
        raise PatchError("The patch has no operations; nothing would change.")
    for n, op in enumerate(raw, 1):
        if not isinstance(op, dict):
            raise PatchError(f"Operation {n} is not an object with op and path.")
        name = op.get("op")
        if not isinstance(name, str) or name not in OPERATIONS:
            what = f"op {name!r}" if isinstance(name, str) else "no op name" if name is None else "an op that is no name"
            raise PatchError(f"Operation {n} has {what}: use one of {', '.join(OPERATIONS)}.")
        for member in ("path", *OPERATIONS[name]):
            if member not in op:
                raise PatchError(f"Operation {n} ({name}) has no {member!r}.")
        for member in ("path", "from"):
            if member in op:
                pointer = op[member]
                if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
                    raise PatchError(f"Operation {n} ({name}): {member} {pointer!r} is not a JSON Pointer "
                                     "(\"\" or starting with /).")
    try:
        jsonpatch.JsonPatch(raw)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
        raise PatchError(f"The patch is not valid: {exc}.") from None
    return raw


def patch_text(ops: list[dict[str, Any]] | None) -> str:
    """The patch as people read it: one operation a line."""
    if not ops:
        return ""
    return "[\n" + ",\n".join("  " + json.dumps(op, ensure_ascii=False) for op in ops) + "\n]"


def patched_payload(ops: list[dict[str, Any]], payload: bytes | None, available: bool = True) -> bytes:
    """The payload with the patch applied, as compact JSON; Unpatchable with the reason if it cannot be."""
    if not available:
        raise Unpatchable("The payload is not available (the source stream no longer had it).")
    try:
        document = read_json(bytes(payload or b""), object_pairs_hook=_one_key_each)
    except NotJSON as exc:  # NaN or 1e400 written back would stay what no consumer reads as JSON
        raise Unpatchable(f"The payload is not JSON ({exc}), so a JSON Patch cannot apply.") from None
    except _Unwritable as exc:
        raise Unpatchable(str(exc)) from None
    except ValueError:
        raise Unpatchable("The payload is not JSON, so a JSON Patch cannot apply.") from None
    except RecursionError:  # nested deeper than Python parses: no job may stop on it
        raise Unpatchable("The payload is nested too deeply to patch.") from None
    try:
        # A copy of the operations each time: jsonpatch puts an op's value into the document as
        # it is, so a later op that changes it inside would change the patch for the next entry.
        result = jsonpatch.apply_patch(document, copy.deepcopy(ops), in_place=True)
    except jsonpatch.JsonPatchTestFailed:
        # jsonpatch's message quotes the payload's value: a viewer reads the job's results (DLQ_MASK).
        raise Unpatchable("A test operation failed: the payload does not hold the tested value.") from None
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, ValueError,
            KeyError, IndexError) as exc:
        raise Unpatchable(f"The patch does not apply: {exc}.") from None
    except RecursionError:
        raise Unpatchable("The payload is nested too deeply to patch.") from None
    try:
        return json.dumps(result, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    except ValueError:  # a number beyond a double (1e400) reads as infinity, which JSON cannot write
        raise Unpatchable("The payload holds a number too large to write back as JSON; patch it by hand.") from None
    except RecursionError:
        raise Unpatchable("The payload is nested too deeply to patch.") from None


class _Unwritable(ValueError):
    """A payload the patch could not write back as it was: the message says why."""


# Written back, an object with a key twice would keep only the last: one value would be lost.
_one_key_each = one_value_a_key(
    lambda key: _Unwritable("The payload repeats a key in an object; a patch would drop one of its values."))


def schema_failure(rt: ActionContext, subject: str | None, payload: bytes) -> str | None:
    """Why ``payload`` fails the current schema of ``subject`` (its first error), or None if it passes."""
    if not rt.schemas.judges or not subject:
        return None
    verdict = rt.schemas.validate(subject, payload)
    if verdict.unusable:
        return f"After the patch the payload cannot be judged, as the {verdict.unusable}."
    if verdict.valid:
        return None
    first = verdict.errors[0]
    return f"After the patch the payload still fails the schema {verdict.schema} ({first.path or '/'}: {first.message})."


def patch_for_job(rt: ActionContext, ops: list[dict[str, Any]], row, only_valid: bool) -> bytes:
    """The payload a patch job republishes for this entry; Unpatchable (the item is skipped) when
    it cannot be republished from here at all (republish_refusal: no subject, a compressed
    payload), the patch does not apply or, with ``only_valid``, the result fails the schema."""
    refusal = republish_refusal(row, edit=True)
    if refusal:
        raise Unpatchable(refusal)
    payload = patched_payload(ops, edited_from(row)[0], bool(row["payload_available"]))
    if only_valid:
        failure = schema_failure(rt, row["original_subject"], payload)
        if failure:
            raise Unpatchable(failure)
    return payload


def preview_patch(rt: ActionContext, ops: list[dict[str, Any]], ids: Sequence[int], *,
                  diffs: int = PREVIEW_DIFFS, bound: int = PREVIEW_BOUND) -> dict[str, Any]:
    """What the patch would do to the first ``bound`` of these entries: how many would then pass
    the schema, still fail it (with the first error) or cannot be patched (by reason, as the job
    would skip them), how many of those it patches no stream would store (``no_stream``, by
    sentence: they fail when published), and the payload before and after for the first
    ``diffs`` (the page shows their line diff)."""
    counted = list(ids[:bound])
    passing, failing, reasons = 0, 0, Counter()
    first_failure, examples = None, []
    # subject -> [entries that then pass, that still fail]: NATS may have no stream for one
    patched: dict[str, list[int]] = {}
    for start in range(0, len(counted), _CHUNK):
        chunk = counted[start:start + _CHUNK]
        with rt.engine.connect() as conn:
            rows = conn.execute(select(ENTRIES.c.id, ENTRIES.c.original_subject, ENTRIES.c.payload,
                                       ENTRIES.c.payload_available, ENTRIES.c.headers, ENTRIES.c.source)
                                .where(ENTRIES.c.id.in_(chunk)).order_by(ENTRIES.c.id)).all()
        for row in rows:
            example: dict[str, Any] = {"id": row.id}
            try:
                refusal = republish_refusal(row._mapping, edit=True, name=ONE_ENTRY)  # alike ones counted as one
                if refusal:
                    raise Unpatchable(refusal)
                before = edited_from(row._mapping)[0]  # gzip bytes no header declares: decompressed
                after = patched_payload(ops, before, bool(row.payload_available))
            except Unpatchable as exc:
                reasons[str(exc)] += 1
                example["skipped"] = str(exc)
            else:
                failure = schema_failure(rt, row.original_subject, after)
                patched.setdefault(subject_key(rt, row), [0, 0])[failure is not None] += 1
                if failure:
                    failing += 1
                    first_failure = first_failure or failure
                passing += failure is None
                if len(examples) < diffs:
                    example.update(before=before, after=after, failure=failure)
            if len(examples) < diffs:
                examples.append(example)
    # A patched entry of a subject no stream stores is refused when published, as a republish is.
    no_stream, note = subjects_without_stream(rt, sorted(patched, key=lambda s: -sum(patched[s])))
    refused = {sentence: sum(patched[subject]) for subject, sentence in no_stream.items()}
    return {"counted": len(counted), "bounded": len(ids) > bound, "total": len(ids), "pass": passing,
            "fail": failing, "first_failure": first_failure, "unpatchable": sum(reasons.values()),
            "reasons": dict(reasons.most_common(5)), "examples": examples, "no_stream": refused, "note": note,
            # what would reach a stream: passing the schema, and failing it (sent only with the override)
            "sent_valid": passing - sum(patched[s][0] for s in no_stream),
            "sent_invalid": failing - sum(patched[s][1] for s in no_stream)}
