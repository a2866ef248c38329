/* Every statement the inbox runs (the consumer's batches, src/inbox/, and the library's
 * postbox_inbox_process), prepared once per connection by pb_inbox_sql_prepare. */
#include "store/inbox_sql.h"

/* One statement records the whole batch: the ids it returns are the new ones. ON CONFLICT goes
 * through the primary key whatever the planner thinks of the table, skips repeats within the
 * batch, and waits for a concurrent consumer's insert of the same id to commit or roll back. */
static const char inbox_claim_batch_sql[] =
    "INSERT INTO postbox.inbox (consumer, message_id, message_type, aggregate_type, aggregate_id, "
    "    aggregate_sequence, processed_at) "
    "SELECT $1, u.id, u.type, u.at, u.ai, u.seq, now() "
    "FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[]) "
    "    AS u(id, type, at, ai, seq) "
    "ON CONFLICT DO NOTHING RETURNING message_id";
/* The fast path's claim: a plain INSERT, which fails (aborting the transaction, so that no
 * handler runs) unless every row is new. Without ON CONFLICT it also skips the speculative
 * insertion, a tenth of the server's work per message. */
static const char inbox_claim_all_sql[] =
    "INSERT INTO postbox.inbox (consumer, message_id, message_type, aggregate_type, aggregate_id, "
    "    aggregate_sequence, processed_at) "
    "SELECT $1, u.id, u.type, u.at, u.ai, u.seq, now() "
    "FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[]) "
    "    AS u(id, type, at, ai, seq)";
/* The statements that find one row by its id go through postbox.inbox_row_settle (sql/025):
 * it names the row's partition key, so that on the partitioned inbox only the message's
 * partition is probed (on the single table that comparison always holds), and during the
 * online migration of the inbox it first moves the row out of postbox.inbox_legacy, where a row
 * claimed before the migration may still be. (A list of ids, below, is looked up in every
 * partition: PostgreSQL prunes none for a list computed at run time; those releases are rare,
 * and their rows were claimed in the same transaction, so never in the legacy table.) */
/* A failed handler gives its message's row back, so that the retry is not taken for a
 * duplicate. */
static const char inbox_release_sql[] = "SELECT postbox.inbox_row_settle($1, $2, false)";
static const char inbox_fail_sql[] =
    "INSERT INTO postbox.inbox_failures AS f (consumer, message_id, attempts, last_error) "
    "VALUES ($1, $2, 1, $3) ON CONFLICT (consumer, message_id) DO UPDATE "
    "SET attempts = f.attempts + 1, last_error = EXCLUDED.last_error, last_failed_at = now() "
    "RETURNING attempts";
/* A dead message keeps an inbox row (processed_at NULL) so that a redelivery is acknowledged as
 * a duplicate instead of failing all over again. */
static const char inbox_dead_sql[] =
    "WITH cleared AS (DELETE FROM postbox.inbox_failures WHERE consumer = $1 AND message_id = $2), "
    "marked AS (INSERT INTO postbox.inbox (consumer, message_id, message_type, aggregate_type, "
    "               aggregate_id, aggregate_sequence, processed_at) "
    "           SELECT $1, $2, $3, $10, $11, $12::bigint, NULL WHERE $2 IS NOT NULL "
    "           ON CONFLICT DO NOTHING) "
    "INSERT INTO postbox.inbox_dead (consumer, message_id, message_type, exchange, routing_key, "
    "    headers, body, error, attempts) "
    "VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::bytea, $8, $9::integer)";
/* commit_inbox_first: the row is committed on its own before the handler runs */
static const char inbox_claim_sql[] =
    "INSERT INTO postbox.inbox (consumer, message_id, message_type, processed_at) "
    "VALUES ($1, $2, $3, NULL) ON CONFLICT DO NOTHING RETURNING 1";
static const char inbox_done_sql[] = "SELECT postbox.inbox_row_settle($1, $2, true)";
/* The rows of messages held back behind a failure, claimed with the batch. */
static const char inbox_release_many_sql[] =
    "DELETE FROM postbox.inbox WHERE consumer = $1 AND message_id = ANY($2::text[])";
static const char inbox_clear_sql[] =
    "DELETE FROM postbox.inbox_failures WHERE consumer = $1 AND message_id = ANY($2::text[])";
/* The rows of the batch's aggregates, locked for the transaction (another consumer process of
 * the same consumer waits), with the position of each in the parameter arrays. */
static const char inbox_seq_get_sql[] =
    "SELECT w.o, s.last_sequence, s.purged IS NOT NULL FROM postbox.inbox_sequences s "
    "JOIN unnest($2::text[], $3::text[]) WITH ORDINALITY AS w(t, i, o) "
    "  ON s.aggregate_type = w.t AND s.aggregate_id = w.i "
    "WHERE s.consumer = $1 FOR UPDATE OF s";
static const char inbox_seq_put_sql[] =
    "INSERT INTO postbox.inbox_sequences AS s (consumer, aggregate_type, aggregate_id, "
    "    last_sequence) "
    "SELECT $1, w.t, w.i, w.l FROM unnest($2::text[], $3::text[], $4::bigint[]) AS w(t, i, l) "
    "ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE "
    "SET last_sequence = greatest(s.last_sequence, EXCLUDED.last_sequence), updated_at = now()";
/* Of the late messages asked about (type, id, number, stamp in unix seconds), the positions of
 * those whose number the retention purge folded into the aggregate's row (sql/012); an hour of
 * slack for the broker's or producer's clock against the database's. */
static const char inbox_seq_purged_sql[] =
    "SELECT w.o FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[]) "
    "    WITH ORDINALITY AS w(t, i, q, at, o) "
    "JOIN postbox.inbox_sequences s "
    "  ON s.consumer = $1 AND s.aggregate_type = w.t AND s.aggregate_id = w.i "
    "WHERE s.purged @> w.q AND to_timestamp(w.at) <= s.purged_before + interval '1 hour'";
static const char inbox_seq_advance_sql[] =
    "SELECT postbox.inbox_advance($1, $2::text[], $3::text[], $4::bigint[], $5::bigint[])";
static const char inbox_seq_advance_past_sql[] =
    "SELECT postbox.inbox_advance_past($1, $2::text[], $3::text[], $4::bigint[], $5::bigint[])";

/* The trace context of the message whose handler runs next, for the handler to read with
 * current_setting('postbox.traceparent', true): local to the transaction (or the savepoint). */
static const char inbox_trace_sql[] =
    "SELECT set_config('postbox.traceparent', $1, true), set_config('postbox.tracestate', $2, true)";

static const pb_pg_statement_t statements[] = {
    {"pb_inbox_claim_batch", inbox_claim_batch_sql},
    {"pb_inbox_claim_all", inbox_claim_all_sql},
    {"pb_inbox_release", inbox_release_sql},
    {"pb_inbox_fail", inbox_fail_sql},
    {"pb_inbox_dead", inbox_dead_sql},
    {"pb_inbox_claim", inbox_claim_sql},
    {"pb_inbox_done", inbox_done_sql},
    {"pb_inbox_release_many", inbox_release_many_sql},
    {"pb_inbox_clear", inbox_clear_sql},
    {"pb_inbox_seq_get", inbox_seq_get_sql},
    {"pb_inbox_seq_put", inbox_seq_put_sql},
    {"pb_inbox_seq_purged", inbox_seq_purged_sql},
    {"pb_inbox_seq_advance", inbox_seq_advance_sql},
    {"pb_inbox_seq_advance_past", inbox_seq_advance_past_sql},
    {"pb_inbox_trace", inbox_trace_sql},
};

pb_status_t pb_inbox_sql_prepare(PGconn *conn, pb_error_t *err)
{
    return pb_pg_prepare_all(conn, statements, sizeof statements / sizeof *statements, err);
}
