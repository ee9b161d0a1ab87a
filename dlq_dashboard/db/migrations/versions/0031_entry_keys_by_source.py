"""v31, an entry's DLQ message is keyed within its source: (source, dlq_stream, dlq_epoch, dlq_seq).

The key was (dlq_stream, dlq_epoch, dlq_seq), on the belief that a stream's epoch (its creation
time to the microsecond) names one stream wherever it lives. A copy of a server's store (a backup
restored, a disaster-recovery copy) holds its streams with their creation times: two sources
reading a stream DLQ each, one on the server and one on the copy, shared their keys, and every
message of the second whose sequence the first had stored was taken as stored already and
dropped. A renamed source does not store its stream twice: the mirror takes over the position
its old name left (ingest/takeover.py).

An advisory's event key names its source the same way, ``advisory:<source>:<id>`` (a copied
advisory stream has the same ids): the keys stored before, ``advisory:<id>``, are rewritten from
each event's source, or a re-read of an advisory stream (a source added back, a takeover missed)
would store each advisory's history again.

Every entry stored keeps its source; no two of them could share the old key, so none shares the
new one. SQLite cannot drop a constraint: batch mode copies the table, and the triggers on it
(the search index's, the key fields') and the search index's view of it are made again as they were.

Revision ID: 0031
Revises: 0030
"""

from __future__ import annotations

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

KEY = "uq_entries_dlq_message"


def upgrade() -> None:
    bind = op.get_bind()
    made_again: list[str] = []
    if bind.dialect.name == "sqlite":
        # The triggers on entries go with the table batch mode replaces, and a view reading it
        # (the search index's entries_search_text) would refuse its rename: each made again after.
        views = bind.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE type = 'view' "
                                     "AND sql LIKE '%FROM entries%' ORDER BY name").all()
        for name, _ in views:
            bind.exec_driver_sql(f'DROP VIEW "{name}"')
        made_again = [sql for _, sql in views] + list(bind.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'entries' ORDER BY name").scalars())
    with op.batch_alter_table("entries") as batch:
        batch.drop_constraint(KEY, type_="unique")
        batch.create_unique_constraint(KEY, ["source", "dlq_stream", "dlq_epoch", "dlq_seq"])
    for sql in made_again:
        bind.exec_driver_sql(sql)
    # 'advisory:' is 9 characters: the id follows it. Every key stored before this revision is of
    # the old form, and no two events of one id were stored (source_key is unique), so none clash.
    bind.exec_driver_sql("UPDATE events SET source_key = 'advisory:' || source || ':' || substr(source_key, 10) "
                         "WHERE substr(source_key, 1, 9) = 'advisory:'")


def downgrade() -> None:
    raise NotImplementedError("restore a backup taken before the upgrade instead")
