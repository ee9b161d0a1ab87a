"""What a bulk republish would refuse, counted before it starts, by the rules the job applies
(in their order: the status, republish_refusal, the schema unless overridden, a stream for the
subject), so the preview can say how many will fail and why, and not offer a Start that
fails them all. With several sources the stream is asked of each entry's own source.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from sqlalchemy import select

from ...unpacking import judged
from ..context import ActionContext
from ..decisions import no_stream_sentence, republish_refusal, source_refusal
from ..intents import ENTRIES
from ..streams import stream_of
from .lanes import several_sources

#: Entries a preview reads at most (their payloads are validated), as the patch preview does.
PREVIEW_BOUND = 10_000
#: Distinct subjects whose stream a preview asks NATS about (each answer is remembered a while).
SUBJECTS_ASKED = 20
#: What a preview's sentences call each entry, so alike entries count under one sentence.
ONE_ENTRY = "The entry"
_CHUNK = 500


def schema_sentence(schema: str | None, only_valid: bool = False, first: dict | None = None,
                    unusable: str | None = None) -> str:
    """Why the job refuses a payload the current schema fails: without the override, or (asked
    for only those that pass) why it leaves it out; ``first``: its first failure, as an item's
    result names it ({"path", "message"}); ``unusable``: why no schema could judge it (the file
    that would could not be loaded, SchemaRegistry.unusable_for)."""
    if unusable:
        if only_valid:
            return f"Left out: only those that pass were asked for, and the payload cannot be judged, as the {unusable}."
        return f"Republishing it needs the override: the payload cannot be judged, as the {unusable}."
    name = f"the current schema {schema}" if schema else "the current schema"
    if first is not None:
        name += f" ({first.get('path') or '/'}: {first.get('message', '')})"
    if only_valid:
        return f"Left out: the payload does not pass {name}, and only those that pass were asked for."
    return f"The payload does not pass {name}; republishing it needs the override."


def subject_key(rt: ActionContext, row) -> str | tuple[str, str]:
    """What a preview tallies an entry's subject under: the subject, or with several sources
    (source, subject), since each source has its own streams."""
    subject = row.original_subject
    return (row.source, subject) if subject and several_sources(rt) else subject


def subjects_without_stream(rt: ActionContext, subjects) -> tuple[dict, str | None]:
    """{subject: why a republish to it is refused} for the subjects no stream stores, and a
    sentence when some could not be asked (NATS unreachable or slow, too many subjects). A
    subject given as (source, subject) (subject_key) is asked of that source, and its sentence
    names the source."""
    refused, unasked = {}, 0
    for n, key in enumerate(s for s in subjects if s):
        if n >= SUBJECTS_ASKED:
            unasked += 1
            continue
        source, subject = key if isinstance(key, tuple) else (None, key)
        known, stream = stream_of(rt, subject) if source is None else stream_of(rt, subject, source)
        if not known:
            unasked += 1
        elif stream is None:
            sentence = no_stream_sentence(subject)
            refused[key] = sentence if source is None else f"Source '{source}': {sentence}"
    note = (f"Whether a stream stores {unasked} of the subjects could not be asked now; "
            "a republish to one that has none fails.") if unasked else None
    return refused, note


def republish_refusals(rt: ActionContext, ids: Sequence[int], *, bound: int = PREVIEW_BOUND,
                       only_valid: bool = False) -> dict[str, Any]:
    """How many of the first ``bound`` of these entries a republish job would refuse: ``refused``
    and ``reasons`` (sentence -> count, each entry under the first rule that refuses it) without
    the override, ``with_override`` with it (``lifted``: the override sends them); ``counted``,
    ``bounded`` and ``note`` (what could not be checked). ``only_valid``: the job leaves out a
    payload the schema fails, override or not (none is lifted)."""
    counted = list(ids[:bound])
    reasons: Counter[str] = Counter()
    refused_anyway = 0  # by the status or republish_refusal: the override changes nothing
    # subject (subject_key) -> [entries that pass the rest, entries the schema fails, the schema's name]
    passed: dict[str, list] = {}
    for start in range(0, len(counted), _CHUNK):
        with rt.engine.connect() as conn:
            rows = conn.execute(select(ENTRIES.c.id, ENTRIES.c.status, ENTRIES.c.original_subject,
                                       ENTRIES.c.payload, ENTRIES.c.payload_available, ENTRIES.c.headers,
                                       ENTRIES.c.source)
                                .where(ENTRIES.c.id.in_(counted[start:start + _CHUNK]))).all()
        for row in rows:
            refusal = republish_refusal(row._mapping, status=True, name=ONE_ENTRY) or source_refusal(
                rt, row.source, None, row.original_subject)
            if refusal:
                reasons[refusal] += 1
                refused_anyway += 1
                continue
            tally = passed.setdefault(subject_key(rt, row), [0, 0, None])
            verdict = rt.schemas.validate(row.original_subject, judged(row.headers, bytes(row.payload or b""))) \
                if rt.schemas.judges else None
            if verdict is not None and not verdict.valid:
                tally[1] += 1
                tally[2] = schema_sentence(verdict.schema, only_valid, unusable=verdict.unusable)
            else:
                tally[0] += 1
    no_stream, note = subjects_without_stream(rt, sorted(passed, key=lambda s: -sum(passed[s][:2])))
    lifted = 0
    for subject, (valid, invalid, sentence) in passed.items():
        if invalid:
            reasons[sentence] += invalid
        if subject in no_stream:
            reasons[no_stream[subject]] += valid
            refused_anyway += valid + invalid
        elif only_valid:
            refused_anyway += invalid
        else:
            lifted += invalid
    refused = sum(reasons.values())
    return {"counted": len(counted), "bounded": len(ids) > bound, "refused": refused,
            "with_override": refused_anyway, "lifted": lifted,
            "reasons": dict(reasons.most_common()), "note": note}
