-- postbox schema, version 17: the inbox's index on received_at becomes a BRIN index.
--
-- The index serves one query, the retention purge (received_at < cutoff). Inbox rows are
-- appended in received_at order, so a block range index summarises them closely, and keeping it
-- up costs an insert next to nothing, where the B-tree took an entry per message: a twentieth of
-- the database's work per consumed message (bench/README.md, "consume"). autosummarize lets
-- autovacuum summarise each filled range, so that the purge skips ranges of recent rows.
--
-- CREATE INDEX here blocks writes to the inbox while it reads the table once; on a large inbox,
-- a DBA can build it beforehand (CREATE INDEX CONCURRENTLY inbox_received_at_brin ... ; DROP
-- INDEX CONCURRENTLY postbox.inbox_received_at; ALTER INDEX ... RENAME TO inbox_received_at) and
-- record the version with `postbox init --mark-applied`.
DROP INDEX IF EXISTS postbox.inbox_received_at;
CREATE INDEX inbox_received_at ON postbox.inbox USING brin (received_at)
    WITH (autosummarize = on);
