/* The relay's wake and claim statements. Their SQL lives in the schema (sql/006_claim_functions.sql,
 * functions postbox.wake and postbox.claim), so the relay, the tests and an operator asking
 * EXPLAIN run the same text; here is only how to call them. Both are single statements, safe in
 * a pipeline (they run in the caller's transaction, or their own), and their cost is bounded by the batch size whatever the
 * planner statistics say (the functions set the planner options they need themselves: no
 * per-connection setup). */
#ifndef PB_STORE_OUTBOX_SQL_H
#define PB_STORE_OUTBOX_SQL_H

/* Wakes up to $1 (int) waiting events whose retry time has come, of the shards in $3 (int[])
 * when $2 (int, relay.shards) > 1; one row, one column: how many (0 when none was due, which
 * costs one read of a small index and runs no UPDATE). */
#define PB_OUTBOX_WAKE_SQL "SELECT postbox.wake($1::int, $2::int, $3::int[])"

/* Claims the next $1 (int) pending rows in id order that do not wait and whose ids are not in
 * $4 (int8multirange literal of the ids in flight, "{}" for none); with $2 (int, relay.shards)
 * > 1 only rows of the shards in $3 (int[] literal such as "{0,3}"). Columns, in this order:
 *   0 id bigint, 1 event_id uuid, 2 aggregate_type, 3 aggregate_id, 4 event_type,
 *   5 payload (text), 6 headers (text), 7 destination (NULL: none),
 *   8 created_at as unix microseconds (bigint), 9 attempts (int), 10 parked (boolean),
 *   11 sequence (bigint, NULL for an event written before schema version 8),
 *   12 available_at, 13 expires_at as unix microseconds (bigint, NULL: none; version 16).
 * A parked row was behind an earlier waiting event of its aggregate (one waiting for a retry,
 * or for its available_at): the statement already set it waiting (until that event's time, or
 * its own if later), committed with it; it is not to be published. A row whose available_at is
 * still to come is waiting from its insert on (sql/016_expiry_delay.sql), so every row claimed is
 * due by the database's clock. With relay.shards > 1 its cost is bounded once
 * PB_OUTBOX_SHARD_INDEX_SQL built the index for the count. */
#define PB_OUTBOX_CLAIM_SQL                                                                    \
    "SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, "        \
    "destination, created_at_us, attempts, parked, sequence, available_at_us, expires_at_us "  \
    "FROM postbox.claim($1::int, $2::int, $3::int[], $4::int8multirange)"

/* Run by `postbox init` (relay.shards is the same for every instance), outside a transaction
 * block and outside pipeline mode: $1 (int) is relay.shards;
 * each row returned is one statement (CREATE / DROP INDEX CONCURRENTLY) to run in order, alone.
 * No rows when the index for the count exists and no other count's index is left. */
#define PB_OUTBOX_SHARD_INDEX_SQL "SELECT postbox.shard_index_ddl($1::int)"

#endif
