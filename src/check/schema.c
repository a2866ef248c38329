/* The schema: its version against this binary's migrations, and the indexes the hot paths of
 * the relay and the consumer walk (missing, or left invalid by a failed CREATE INDEX
 * CONCURRENTLY), with the claim's index of relay.shards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_int.h"
#include "check/judge.h"
#include "common/str.h"
#include "store/inbox_legacy.h"
#include "store/migrate.h"
#include "store/outbox_sql.h"

/* The indexes of the latest schema version that a relay or a consumer cannot do without, what
 * each is for, and the statement that makes it again (the migrations in sql/ made it;
 * it_check_problems drops one and runs the statement). */
typedef struct index_spec {
    unsigned sides;
    const char *name, *table, *purpose, *create;
} index_spec_t;

static const index_spec_t indexes[] = {
    {PB_CHECK_RELAY, "outbox_pkey", "postbox.outbox", "the claim's id order and the oldest pending event",
     "ALTER TABLE postbox.outbox ADD PRIMARY KEY (id)"},
    {PB_CHECK_RELAY, "outbox_event_id_key", "postbox.outbox", "one row per event id",
     "ALTER TABLE postbox.outbox ADD CONSTRAINT outbox_event_id_key UNIQUE (event_id)"},
    {PB_CHECK_RELAY, "outbox_ready", "postbox.outbox", "the relay's claim",
     "CREATE INDEX CONCURRENTLY outbox_ready ON postbox.outbox (id) WHERE published_at IS NULL "
     "AND NOT waiting"},
    {PB_CHECK_RELAY, "outbox_retrying", "postbox.outbox",
     "holding an aggregate back behind its failed event",
     "CREATE INDEX CONCURRENTLY outbox_retrying ON postbox.outbox (aggregate_type, aggregate_id, "
     "id) WHERE published_at IS NULL AND attempts > 0"},
    {PB_CHECK_RELAY, "outbox_waiting", "postbox.outbox",
     "parking an aggregate behind its waiting event",
     "CREATE INDEX CONCURRENTLY outbox_waiting ON postbox.outbox (aggregate_type, aggregate_id, "
     "id) WHERE waiting"},
    {PB_CHECK_RELAY, "outbox_waiting_due", "postbox.outbox", "waking events whose retry is due",
     "CREATE INDEX CONCURRENTLY outbox_waiting_due ON postbox.outbox (next_attempt_at, id) WHERE "
     "waiting"},
    {PB_CHECK_RELAY, "outbox_published_pkey", "postbox.outbox_published", "the published history",
     "ALTER TABLE postbox.outbox_published ADD PRIMARY KEY (id)"},
    {PB_CHECK_RELAY, "outbox_published_by_age", "postbox.outbox_published",
     "the retention purge of the history",
     "CREATE INDEX CONCURRENTLY outbox_published_by_age ON postbox.outbox_published "
     "(published_at)"},
    {PB_CHECK_RELAY, "dead_letters_pkey", "postbox.dead_letters", "the dead letters",
     "ALTER TABLE postbox.dead_letters ADD PRIMARY KEY (id)"},
    {PB_CHECK_RELAY, "aggregate_sequences_pkey", "postbox.aggregate_sequences",
     "numbering each aggregate's events (producers)",
     "ALTER TABLE postbox.aggregate_sequences ADD PRIMARY KEY (aggregate_type, aggregate_id)"},
    {PB_CHECK_CONSUME, "inbox_pkey", "postbox.inbox", "the consumer's duplicate check",
     "ALTER TABLE postbox.inbox ADD PRIMARY KEY (consumer, message_id)"},
    {PB_CHECK_CONSUME, "inbox_received_at", "postbox.inbox", "the retention purge of the inbox",
     "CREATE INDEX CONCURRENTLY inbox_received_at ON postbox.inbox USING brin (received_at) "
     "WITH (autosummarize = on)"},
    {PB_CHECK_CONSUME, "inbox_failures_pkey", "postbox.inbox_failures",
     "the consumer's failure records",
     "ALTER TABLE postbox.inbox_failures ADD PRIMARY KEY (consumer, message_id)"},
    {PB_CHECK_CONSUME, "inbox_sequences_pkey", "postbox.inbox_sequences",
     "the consumer's order per aggregate",
     "ALTER TABLE postbox.inbox_sequences ADD PRIMARY KEY (consumer, aggregate_type, "
     "aggregate_id)"},
    {PB_CHECK_CONSUME, "inbox_dead_consumer", "postbox.inbox_dead", "postbox dlq --inbox",
     "CREATE INDEX CONCURRENTLY inbox_dead_consumer ON postbox.inbox_dead (consumer, dead_at)"},
};

/* Per index of ctx's sides: exists, valid and ready, on the table it should be on. A table
 * partitioned by an expression (the inbox, sql/026) can have no key of its own: its partitions
 * have one each, which check_inbox_keys judges; its key counts as present here. */
static const char indexes_sql[] =
    "SELECT n.name, c.oid IS NOT NULL OR k.per_partition, "
    "       coalesce(x.indisvalid AND x.indisready, false) OR k.per_partition, "
    "       coalesce(x.indrelid = to_regclass(n.tab), false) OR k.per_partition "
    "FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS n(name, tab, ord) "
    "CROSS JOIN LATERAL (SELECT n.name LIKE '%\\_pkey' AND EXISTS ("
    "    SELECT 1 FROM pg_partitioned_table pt"
    "    WHERE pt.partrelid = to_regclass(n.tab) AND pt.partattrs[0] = 0)) AS k(per_partition) "
    "LEFT JOIN pg_class c ON c.relname = n.name AND c.relnamespace = to_regnamespace('postbox') "
    "LEFT JOIN pg_index x ON x.indexrelid = c.oid "
    "ORDER BY n.ord";

static void check_indexes(pb_check_ctx_t *ctx)
{
    pb_buf_t names = {0}, tables = {0};
    pb_buf_putc(&names, '{');
    pb_buf_putc(&tables, '{');
    size_t n = 0;
    const index_spec_t *wanted[sizeof indexes / sizeof indexes[0]];
    for (size_t i = 0; i < sizeof indexes / sizeof indexes[0]; i++) {
        if (!(indexes[i].sides & ctx->sides))
            continue;
        if (n) {
            pb_buf_putc(&names, ',');
            pb_buf_putc(&tables, ',');
        }
        pb_buf_append_array_text(&names, indexes[i].name);
        pb_buf_append_array_text(&tables, indexes[i].table);
        wanted[n++] = &indexes[i];
    }
    pb_buf_putc(&names, '}');
    pb_buf_putc(&tables, '}');
    const char *params[2] = {names.data, tables.data};
    PGresult *res = pb_check_query(ctx, "schema.index", "look up the indexes", indexes_sql, 2,
                                   params);
    pb_buf_free(&names);
    pb_buf_free(&tables);
    if (!res)
        return;
    size_t good = 0;
    for (int row = 0; row < PQntuples(res) && (size_t)row < n; row++) {
        const index_spec_t *ix = wanted[row];
        bool exists = PQgetvalue(res, row, 1)[0] == 't', valid = PQgetvalue(res, row, 2)[0] == 't',
             on_table = PQgetvalue(res, row, 3)[0] == 't';
        pb_check_finding_t *f;
        if (!exists || !on_table) {
            f = pb_check_add(ctx->r, PB_CHECK_FAIL, "schema.index",
                             "index postbox.%s on %s is missing (%s)", ix->name, ix->table,
                             ix->purpose);
            pb_check_hint(f, "%s", ix->create);
        } else if (!valid) {
            f = pb_check_add(ctx->r, PB_CHECK_FAIL, "schema.index",
                             "index postbox.%s is invalid (a CREATE INDEX CONCURRENTLY that "
                             "failed?): PostgreSQL does not use it for %s",
                             ix->name, ix->purpose);
            pb_check_hint(f, "REINDEX INDEX CONCURRENTLY postbox.%s", ix->name);
        } else {
            good++;
        }
    }
    PQclear(res);
    if (good == n)
        pb_check_add(ctx->r, PB_CHECK_OK, "schema.index", "the %zu indexes the %s walk%s are in "
                                                          "place",
                     n, ctx->sides == PB_CHECK_CONSUME ? "consumer"
                        : ctx->sides == PB_CHECK_RELAY ? "relay"
                                                       : "relay and the consumer",
                     ctx->sides == (PB_CHECK_RELAY | PB_CHECK_CONSUME) ? "" : "s");
}

/* relay.shards > 1: the claim's index of that count (`postbox init` builds it; see
 * PB_OUTBOX_SHARD_INDEX_SQL); any count: no index of another count left behind. */
static void check_shard_index(pb_check_ctx_t *ctx)
{
    char shards[16];
    snprintf(shards, sizeof shards, "%lld", (long long)ctx->cfg->relay_shards);
    const char *params[1] = {shards};
    PGresult *res = pb_check_query(ctx, "schema.shard_index", "plan the shard index",
                                   PB_OUTBOX_SHARD_INDEX_SQL, 1, params);
    if (!res)
        return;
    bool create = false;
    int drops = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        if (strncmp(PQgetvalue(res, i, 0), "CREATE", 6) == 0)
            create = true;
        else
            drops++;
    }
    PQclear(res);
    pb_check_finding_t *f = NULL;
    if (create)
        f = pb_check_add(ctx->r, PB_CHECK_FAIL, "schema.shard_index",
                         "the claim's index for relay.shards = %s is missing (or invalid): every "
                         "claim walks the other shards' rows too",
                         shards);
    else if (drops)
        f = pb_check_add(ctx->r, PB_CHECK_WARN, "schema.shard_index",
                         "%d index%s of another relay.shards than %s %s left on postbox.outbox: "
                         "every insert still maintains %s",
                         drops, drops == 1 ? "" : "es", shards, drops == 1 ? "is" : "are",
                         drops == 1 ? "it" : "them");
    if (f)
        pb_check_hint(f, "run `postbox init` with relay.shards = %s (every relay uses the same "
                         "count)",
                      shards);
    else if (ctx->cfg->relay_shards > 1)
        pb_check_add(ctx->r, PB_CHECK_OK, "schema.shard_index",
                     "the claim's index for relay.shards = %s is in place", shards);
}

/* The partitioned layout (sql/020): the partitions of the current interval and the next exist.
 * A row without one is not lost (it goes to the DEFAULT partition), but only a DELETE purges
 * it, and a DEFAULT partition holding rows of an interval stops that partition's creation. */
static void check_partitions(pb_check_ctx_t *ctx)
{
    PGresult *res = pb_check_query(ctx, "schema.partitions", "look up the partitions ahead",
                                   "SELECT table_name, lower_bound::text, "
                                   "       (SELECT count(*) FROM postbox.partitioned_tables) "
                                   "FROM postbox.partitions_missing() "
                                   "UNION ALL SELECT NULL, NULL, count(*) "
                                   "FROM postbox.partitioned_tables",
                                   0, NULL);
    if (!res)
        return;
    int missing = PQntuples(res) - 1;
    const char *tables = PQgetvalue(res, PQntuples(res) - 1, 2);
    for (int i = 0; i < missing; i++) {
        pb_check_finding_t *f = pb_check_add(ctx->r, PB_CHECK_FAIL, "schema.partitions",
                                             "postbox.%s has no partition for the interval from "
                                             "%s: its rows would go to the DEFAULT partition",
                                             PQgetvalue(res, i, 0), PQgetvalue(res, i, 1));
        pb_check_hint(f, "a running relay or consumer makes them every few minutes; or, as the "
                         "tables' owner: SELECT postbox.partitions_create_ahead()");
    }
    if (missing == 0 && strcmp(tables, "0") != 0)
        pb_check_add(ctx->r, PB_CHECK_OK, "schema.partitions",
                     "the partitions ahead of the %s partitioned tables are in place", tables);
    PQclear(res);
}

/* The partitioned inbox (sql/026): every partition has its key (consumer, message_id), which
 * is the consumer's duplicate check there. */
static void check_inbox_keys(pb_check_ctx_t *ctx)
{
    PGresult *res = pb_check_query(ctx, "schema.inbox_keys", "look up the inbox partitions' keys",
                                   "SELECT p::text FROM postbox.inbox_partitions_without_key() p",
                                   0, NULL);
    if (!res)
        return;
    for (int i = 0; i < PQntuples(res); i++) {
        pb_check_finding_t *f = pb_check_add(ctx->r, PB_CHECK_FAIL, "schema.inbox_keys",
                                             "partition %s of postbox.inbox has no key on "
                                             "(consumer, message_id): a redelivery of a message "
                                             "there would be handled again",
                                             PQgetvalue(res, i, 0));
        pb_check_hint(f, "ALTER TABLE %s ADD PRIMARY KEY (consumer, message_id)",
                      PQgetvalue(res, i, 0));
    }
    PQclear(res);
}

/* The online migration of the inbox (sql/025): in progress while postbox.inbox_legacy exists.
 * Nothing is wrong meanwhile (a copy of an old message is still a duplicate), but only a
 * consumer's janitor finishes it. */
static void check_inbox_migration(pb_check_ctx_t *ctx)
{
    int64_t rows;
    pb_error_t err;
    if (pb_inbox_legacy_rows(ctx->conn, &rows, &err) != PB_OK) {
        pb_check_add(ctx->r, PB_CHECK_FAIL, "schema.inbox_migration",
                     "cannot look for an inbox migration: %s", err.msg);
        return;
    }
    if (rows < 0)
        return;
    pb_check_finding_t *f = pb_check_add(ctx->r, PB_CHECK_WARN, "schema.inbox_migration",
                                         "the online migration of postbox.inbox is in progress: "
                                         "postbox.inbox_legacy holds %lld rows still to move",
                                         (long long)rows);
    pb_check_hint(f, "a running `postbox consume` moves them in batches and drops the table "
                     "when it is empty");
}

void pb_check_schema(pb_check_ctx_t *ctx)
{
    bool present;
    int version;
    pb_error_t err;
    if (pb_migrate_version(ctx->conn, &present, &version, &err) != PB_OK) {
        pb_check_finding_t *f = pb_check_add(ctx->r, PB_CHECK_FAIL, "schema.version",
                                             "cannot read the schema version: %s", err.msg);
        pb_check_hint(f, "the role needs SELECT on postbox.schema_migrations (see `postbox init "
                         "--print-grants`)");
        return;
    }
    ctx->schema_absent = !present;
    ctx->schema_current = pb_judge_schema(ctx->r, present, version);
    if (!ctx->schema_current)
        return; /* indexes of a schema not (yet) at this binary's version are not judged */
    check_indexes(ctx);
    check_partitions(ctx);
    if (ctx->sides & PB_CHECK_CONSUME) {
        check_inbox_keys(ctx);
        check_inbox_migration(ctx);
    }
    if (ctx->sides & PB_CHECK_RELAY)
        check_shard_index(ctx);
}
