#include "store/purge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "metrics/metrics.h"
#include "store/pg.h"

/* Published events live in postbox.outbox_published (sql/004); its index on published_at
 * finds the old rows. Nobody else writes those rows, so no lock is needed. */
static const char purge_outbox_sql[] =
    "DELETE FROM postbox.outbox_published WHERE id IN ("
    "  SELECT id FROM postbox.outbox_published WHERE published_at < $1::timestamptz"
    "  LIMIT $2::integer)";

/* FOR UPDATE SKIP LOCKED: never wait for a row a consumer holds; it is taken next time. The
 * numbers of the rows deleted are folded into their aggregate's inbox_sequences row (sql/012):
 * a row whose aggregate's sequence row a consumer holds is left for the next batch, so that the
 * purge never waits for a consumer (which may be waiting for one of the purge's rows). Returns
 * the rows deleted. */
static const char purge_inbox_sql[] =
    "WITH old AS ("
    "  SELECT consumer, message_id, aggregate_type, aggregate_id, aggregate_sequence"
    "  FROM postbox.inbox b"
    "  WHERE b.received_at < $1::timestamptz AND ($3::text IS NULL OR b.consumer = $3::text)"
    "    AND (b.processed_at IS NOT NULL OR NOT EXISTS ("
    "         SELECT 1 FROM postbox.inbox_dead d"
    "         WHERE d.consumer = b.consumer AND d.message_id = b.message_id))"
    "  LIMIT $2::integer FOR UPDATE SKIP LOCKED), "
    "held AS ("
    "  SELECT s.consumer, s.aggregate_type, s.aggregate_id FROM postbox.inbox_sequences s"
    "  WHERE (s.consumer, s.aggregate_type, s.aggregate_id) IN ("
    "    SELECT consumer, aggregate_type, aggregate_id FROM old"
    "    WHERE aggregate_sequence IS NOT NULL)"
    "  FOR UPDATE SKIP LOCKED), "
    "gone AS ("
    "  DELETE FROM postbox.inbox i USING old o"
    "  WHERE i.consumer = o.consumer AND i.message_id = o.message_id"
    "    AND (o.aggregate_sequence IS NULL"
    "         OR (o.consumer, o.aggregate_type, o.aggregate_id) IN (SELECT * FROM held)"
    "         OR NOT EXISTS (SELECT 1 FROM postbox.inbox_sequences s"
    "                        WHERE s.consumer = o.consumer AND s.aggregate_type = o.aggregate_type"
    "                          AND s.aggregate_id = o.aggregate_id))"
    "  RETURNING i.consumer, i.aggregate_type, i.aggregate_id, i.aggregate_sequence,"
    "            i.received_at), "
    "folded AS ("
    "  INSERT INTO postbox.inbox_sequences AS s (consumer, aggregate_type, aggregate_id,"
    "      last_sequence, purged, purged_before)"
    "  SELECT consumer, aggregate_type, aggregate_id, max(aggregate_sequence),"
    "         range_agg(int8range(aggregate_sequence, aggregate_sequence, '[]')),"
    "         max(received_at)"
    "  FROM gone WHERE aggregate_sequence IS NOT NULL GROUP BY 1, 2, 3"
    "  ON CONFLICT (consumer, aggregate_type, aggregate_id) DO UPDATE"
    "  SET purged = coalesce(s.purged, '{}'::int8multirange) + EXCLUDED.purged,"
    "      purged_before = greatest(s.purged_before, EXCLUDED.purged_before)) "
    "SELECT count(*) FROM gone";

/* Sequence rows of idle aggregates (sql/018 gives the rules and why they keep the numbering and
 * the duplicate rule). SKIP LOCKED: a producer or consumer holding a row is never waited for;
 * FOR UPDATE re-reads a row updated since the statement's snapshot and re-checks updated_at,
 * so an aggregate written meanwhile keeps its row. Neither table has an index on updated_at (it
 * would cost every producer's and consumer's update its HOT path): a round reads the table. */
static const char purge_aggregate_sequences_sql[] =
    "DELETE FROM postbox.aggregate_sequences s USING ("
    "  SELECT a.aggregate_type, a.aggregate_id FROM postbox.aggregate_sequences a"
    "  WHERE a.updated_at < $1::timestamptz"
    "    AND NOT EXISTS (SELECT 1 FROM postbox.outbox o"
    "                    WHERE o.published_at IS NULL AND o.aggregate_type = a.aggregate_type"
    "                      AND o.aggregate_id = a.aggregate_id)"
    "    AND NOT EXISTS (SELECT 1 FROM postbox.cdc_deferred d"
    "                    WHERE d.aggregate_type = a.aggregate_type"
    "                      AND d.aggregate_id = a.aggregate_id)"
    "  LIMIT $2::integer FOR UPDATE OF a SKIP LOCKED) idle"
    " WHERE s.aggregate_type = idle.aggregate_type AND s.aggregate_id = idle.aggregate_id";
static const char purge_inbox_sequences_sql[] =
    "DELETE FROM postbox.inbox_sequences s USING ("
    "  SELECT q.consumer, q.aggregate_type, q.aggregate_id FROM postbox.inbox_sequences q"
    "  WHERE q.updated_at < $1::timestamptz AND ($3::text IS NULL OR q.consumer = $3::text)"
    "    AND (q.purged_before IS NULL OR q.purged_before < $1::timestamptz)"
    "  LIMIT $2::integer FOR UPDATE OF q SKIP LOCKED) idle"
    " WHERE s.consumer = idle.consumer AND s.aggregate_type = idle.aggregate_type"
    "   AND s.aggregate_id = idle.aggregate_id";

/* Dead letters: the first rule whose LIKE pattern matches the type gives the row's age
 * ($3 patterns, $4 ages in ms, in rule order), else the default ($2); age 0 keeps the row.
 * $1 is the purge's start. Dead letters are few: no index on dead_at is needed. On the
 * partitioned layout (the boolean parameter `partitioned`) whole partitions go at the longest
 * age (drop_partitions_sql): the DELETE takes only the rows of a shorter age and those of the
 * DEFAULT partition. */
#define DEAD_AGE(type_column, partitioned, table)                                              \
    "  LEFT JOIN LATERAL (SELECT r.age FROM unnest($3::text[], $4::bigint[]) WITH ORDINALITY"  \
    "      AS r(pat, age, o) WHERE " type_column " LIKE r.pat ORDER BY r.o LIMIT 1) m ON true" \
    "  WHERE coalesce(m.age, $2::bigint) > 0"                                                   \
    "    AND d.dead_at < $1::timestamptz - coalesce(m.age, $2::bigint) * interval '1 millisecond'" \
    "    AND (NOT " partitioned "::boolean"                                                     \
    "         OR d.tableoid = to_regclass('postbox." table "_default')"                         \
    "         OR coalesce(m.age, $2::bigint) < (SELECT max(a) FROM unnest($4::bigint[] || $2::bigint) a))"
static const char purge_dead_letters_sql[] =
    "DELETE FROM postbox.dead_letters WHERE id IN ("
    "  SELECT d.id FROM postbox.dead_letters d" DEAD_AGE("d.event_type", "$6", "dead_letters")
    "  LIMIT $5::integer)";
static const char purge_inbox_dead_sql[] =
    "DELETE FROM postbox.inbox_dead WHERE id IN ("
    "  SELECT d.id FROM postbox.inbox_dead d" DEAD_AGE("d.message_type", "$7", "inbox_dead")
    "    AND ($6::text IS NULL OR d.consumer = $6::text)"
    "  LIMIT $5::integer)";

/* The partitioned layout (sql/020): published history keeps only the rows of its DEFAULT
 * partition (times no partition covered) for the DELETE; whole partitions are dropped. */
static const char purge_outbox_default_sql[] =
    "SELECT postbox.partitions_purge_default('outbox_published', $1::timestamptz, $2::integer)";
/* The partitioned inbox (sql/026): the DELETE, with its fold, only in the two partitions that
 * are never dropped (ids without a time, times without a partition). */
static const char purge_inbox_unpartitioned_sql[] =
    "SELECT postbox.inbox_purge_unpartitioned($1::timestamptz, $2::integer, $3::text)";
/* Drops the partitions whose whole interval is older than the longest age ($2 the purge's
 * start, $3 the default age in ms, $4 the rules' ages); none while an age of 0 keeps rows. */
static const char drop_partitions_sql[] =
    "SELECT CASE WHEN 0 = ANY(s.a) THEN 0 ELSE postbox.partitions_drop_before($1,"
    "    $2::timestamptz - (SELECT max(x) FROM unnest(s.a) x) * interval '1 millisecond') END "
    "FROM (SELECT $4::bigint[] || $3::bigint AS a) s";
static const char is_partitioned_sql[] =
    "SELECT EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass('postbox.' || $1)"
    "               AND relkind = 'p')";

const char *pb_purge_table(pb_purge_target_t target)
{
    switch (target) {
    case PB_PURGE_INBOX:
        return "inbox";
    case PB_PURGE_DEAD_LETTERS:
        return "dead_letters";
    case PB_PURGE_INBOX_DEAD:
        return "inbox_dead";
    case PB_PURGE_AGGREGATE_SEQUENCES:
        return "aggregate_sequences";
    case PB_PURGE_INBOX_SEQUENCES:
        return "inbox_sequences";
    case PB_PURGE_OUTBOX:
        break;
    }
    return "outbox_published";
}

/* The statement of a target purged by its cutoff alone ($1 cutoff, $2 batch, $3 consumer). */
static const char *purge_sql(pb_purge_target_t target, bool partitioned)
{
    switch (target) {
    case PB_PURGE_OUTBOX:
        return partitioned ? purge_outbox_default_sql : purge_outbox_sql;
    case PB_PURGE_INBOX:
        return partitioned ? purge_inbox_unpartitioned_sql : purge_inbox_sql;
    case PB_PURGE_AGGREGATE_SEQUENCES:
        return purge_aggregate_sequences_sql;
    case PB_PURGE_INBOX_SEQUENCES:
        return purge_inbox_sequences_sql;
    default:
        break;
    }
    return purge_outbox_sql;
}

static bool dead_target(pb_purge_target_t target)
{
    return target == PB_PURGE_DEAD_LETTERS || target == PB_PURGE_INBOX_DEAD;
}

/* Whether the table is on the partitioned layout (asked of the catalog, so that it works on
 * any schema version and needs no grant). */
static pb_status_t detect_partitions(pb_purge_t *p, pb_error_t *err)
{
    if (p->target != PB_PURGE_OUTBOX && p->target != PB_PURGE_INBOX && !dead_target(p->target))
        return PB_OK;
    const char *params[1] = {pb_purge_table(p->target)};
    PGresult *res = PQexecParams(p->conn, is_partitioned_sql, 1, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(p->conn, res, PGRES_TUPLES_OK, "purge: table layout", err);
    if (st != PB_OK)
        return st;
    p->partitioned = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    return PB_OK;
}

/* The partitioned layout's retention: whole partitions first, once per purge. */
static pb_status_t drop_partitions(pb_purge_t *p, pb_error_t *err)
{
    char age[24];
    snprintf(age, sizeof age, "%lld", (long long)p->older_than_ms);
    bool rules = p->rules && p->rules->n;
    const char *params[4] = {pb_purge_table(p->target), p->asof, age,
                             rules ? p->rules->ages.data : "{}"};
    PGresult *res = PQexecParams(p->conn, drop_partitions_sql, 4, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(p->conn, res, PGRES_TUPLES_OK, "purge: drop partitions", err);
    if (st != PB_OK)
        return st;
    p->partitions_dropped = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    p->partitions_checked = true;
    return PB_OK;
}

pb_status_t pb_purge_begin(pb_purge_t *p, PGconn *conn, pb_purge_target_t target,
                           int64_t older_than_ms, const pb_retention_rules_t *rules,
                           const char *consumer, int batch, pb_error_t *err)
{
    memset(p, 0, sizeof *p);
    p->conn = conn;
    p->target = target;
    p->consumer = consumer;
    p->older_than_ms = older_than_ms;
    p->rules = dead_target(target) ? rules : NULL;
    p->batch = batch > 0 ? batch : PB_PURGE_DEFAULT_BATCH;
    char ms[24];
    snprintf(ms, sizeof ms, "%lld", (long long)older_than_ms);
    const char *params[1] = {ms};
    PGresult *res = PQexecParams(conn,
                                 "SELECT (now() - $1::bigint * interval '1 millisecond')::text, "
                                 "now()::text",
                                 1, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "purge cutoff", err);
    if (st != PB_OK)
        return st;
    snprintf(p->cutoff, sizeof p->cutoff, "%s", PQgetvalue(res, 0, 0));
    snprintf(p->asof, sizeof p->asof, "%s", PQgetvalue(res, 0, 1));
    PQclear(res);
    return detect_partitions(p, err);
}

pb_status_t pb_purge_step(pb_purge_t *p, uint64_t *rows, pb_error_t *err)
{
    *rows = 0;
    if (p->done)
        return PB_OK;
    if (p->partitioned && !p->partitions_checked) {
        pb_status_t st = drop_partitions(p, err);
        if (st != PB_OK)
            return st;
    }
    char batch[16], age[24];
    snprintf(batch, sizeof batch, "%d", p->batch);
    snprintf(age, sizeof age, "%lld", (long long)p->older_than_ms);
    bool inbox = p->target == PB_PURGE_INBOX;
    int64_t t0 = pb_wall_us();
    PGresult *res;
    if (dead_target(p->target)) {
        bool consumer = p->target == PB_PURGE_INBOX_DEAD, rules = p->rules && p->rules->n;
        const char *partitioned = p->partitioned ? "t" : "f";
        const char *params[7] = {p->asof, age, rules ? p->rules->like.data : "{}",
                                 rules ? p->rules->ages.data : "{}", batch,
                                 consumer ? p->consumer : partitioned, partitioned};
        res = PQexecParams(p->conn, consumer ? purge_inbox_dead_sql : purge_dead_letters_sql,
                           consumer ? 7 : 6, NULL, params, NULL, NULL, 0);
    } else {
        const char *params[3] = {p->cutoff, batch, p->consumer};
        bool by_consumer = inbox || p->target == PB_PURGE_INBOX_SEQUENCES;
        res = PQexecParams(p->conn, purge_sql(p->target, p->partitioned), by_consumer ? 3 : 2, NULL, params,
                           NULL, NULL, 0);
    }
    /* the inbox's and the DEFAULT partition's statements return the count as a row */
    bool counted = inbox || (p->partitioned && p->target == PB_PURGE_OUTBOX);
    pb_status_t st = pb_pg_check(p->conn, res, counted ? PGRES_TUPLES_OK : PGRES_COMMAND_OK,
                                 "purge", err);
    if (st != PB_OK)
        return st;
    double ms = (double)(pb_wall_us() - t0) / 1000.0;
    *rows = strtoull(counted ? PQgetvalue(res, 0, 0) : PQcmdTuples(res), NULL, 10);
    PQclear(res);
    p->deleted += *rows;
    p->batches++;
    if (ms > p->max_batch_ms)
        p->max_batch_ms = ms;
    if (*rows < (uint64_t)p->batch)
        p->done = true;
    if (*rows)
        pb_metrics_purged(pb_purge_table(p->target), *rows);
    return PB_OK;
}
