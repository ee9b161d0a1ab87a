"""A renamed source goes on where its old name stopped (SPEC section 12): a (source, stream) with no
position takes over the position its old name left on a stream of that name and creation time, so
nothing is stored twice and the entries stored before keep the old name.

Who may take over whose positions is decided once at the start (:func:`takeover_plan`), from
DLQ_CONFIG and the positions stored, so that every follower of every source sees the same answer
whichever asks first: a source's ``renamed_from`` names its old names; without it, a source takes
over the positions of sources no longer configured only when it is the one source new to the
database (a source started from a copy of another's store, added in the same change as a rename,
would otherwise take the renamed source's place as soon as its follower asked first)."""

from __future__ import annotations

import logging
from typing import Iterable, Sequence

from sqlalchemy import Engine, select, update

from ..db.engine import write_transaction
from ..db.models import MirrorState
from ..sources import Source
from ..times import utcnow
from .writes import read_position

log = logging.getLogger(__name__)

#: What a source may take over: the old names it may take from, or ANY (a source no longer
#: configured, nor claimed by a renamed_from).
ANY = None
Takes = tuple[str, ...] | None


def takeover_plan(engine: Engine, sources: Sequence[Source]) -> tuple[dict[str, Takes], tuple[str, ...]]:
    """Each source's :data:`Takes`, and the names whose positions no source takes over
    automatically (the configured sources and the old names of renamed_from)."""
    names = [source.name for source in sources]
    claimed = [old for source in sources for old in source.renamed_from]
    with engine.connect() as conn:
        known = set(conn.execute(select(MirrorState.source).distinct()).scalars())
    plan: dict[str, Takes] = {source.name: source.renamed_from for source in sources}
    new = [source for source in sources if source.name not in known]
    kept = tuple(names + claimed)
    left = sorted(known - set(kept))
    if len(new) == 1 and not new[0].renamed_from:
        plan[new[0].name] = ANY
    elif left and len(new) > 1 and any(not source.renamed_from for source in new):
        log.warning("sources %s are new and sources %s (no longer configured) left stream positions: none of them "
                    "is taken over, as it cannot be told which source was renamed; to go on where an old name "
                    "stopped, give the renamed source's [[sources]] table renamed_from = \"<old name>\"",
                    ", ".join(s.name for s in new), ", ".join(left))
    return plan, kept


def take_over_position(engine: Engine, stream: str, epoch: str, source: str,
                       kept: Iterable[str], takes: Takes = ANY) -> tuple[str | None, int]:
    """``read_position``, where a (source, stream) that has none takes over the position one of
    ``takes`` (ANY: a source not among ``kept``) left of a stream of that name and ``epoch`` (the
    stream as it is now). A kept source's position is never taken (two sources reading two copies
    of one stream each store every message). The furthest one, if several."""
    saved = read_position(engine, stream, source)
    if saved[0] is not None or takes == ():
        return saved  # the common case, read without the write lock
    table = MirrorState.__table__
    chosen = table.c.source.not_in(list(kept)) if takes is ANY else table.c.source.in_(list(takes))
    with write_transaction(engine) as conn:
        own = conn.execute(select(table.c.epoch, table.c.last_seq).where(
            table.c.source == source, table.c.stream == stream).with_for_update()).first()
        if own is not None:
            return own.epoch, own.last_seq
        # Locked as a write's position check locks it: a process still writing the old name's
        # batches either commits first (its position is what is taken) or finds it gone (OutOfOrder).
        left = conn.execute(select(table.c.source, table.c.last_seq).where(
            table.c.stream == stream, table.c.epoch == epoch, table.c.source != source, chosen)
            .order_by(table.c.last_seq.desc(), table.c.source).limit(1).with_for_update()).first()
        if left is None:
            if takes is not ANY:
                other = conn.execute(select(table.c.source, table.c.epoch).where(
                    table.c.stream == stream, chosen)).all()
                for row in other:
                    log.warning("source %s does not take over the position of stream %s that source %s left: that "
                                "stream was created at %s and the stream %s now at %s (another stream); it is read "
                                "from its start", source, stream, row.source, row.epoch, stream, epoch)
            return None, 0
        conn.execute(update(table).where(table.c.source == left.source, table.c.stream == stream)
                     .values(source=source, updated_at=utcnow()))
    log.warning("source %s takes over the position of stream %s that source %s (no longer configured) left: it goes "
                "on after sequence %d; the entries stored before keep the name %s", source, stream, left.source,
                left.last_seq, left.source)
    return epoch, left.last_seq
