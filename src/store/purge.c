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

const char *pb_purge_table(pb_purge_target_t target)
{
    return target == PB_PURGE_INBOX ? "inbox" : "outbox_published";
}

pb_status_t pb_purge_begin(pb_purge_t *p, PGconn *conn, pb_purge_target_t target,
                           int64_t older_than_ms, const char *consumer, int batch, pb_error_t *err)
{
    memset(p, 0, sizeof *p);
    p->conn = conn;
    p->target = target;
    p->consumer = consumer;
    p->batch = batch > 0 ? batch : PB_PURGE_DEFAULT_BATCH;
    char ms[24];
    snprintf(ms, sizeof ms, "%lld", (long long)older_than_ms);
    const char *params[1] = {ms};
    PGresult *res = PQexecParams(conn,
                                 "SELECT (now() - $1::bigint * interval '1 millisecond')::text",
                                 1, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "purge cutoff", err);
    if (st != PB_OK)
        return st;
    snprintf(p->cutoff, sizeof p->cutoff, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return PB_OK;
}

pb_status_t pb_purge_step(pb_purge_t *p, uint64_t *rows, pb_error_t *err)
{
    *rows = 0;
    if (p->done)
        return PB_OK;
    char batch[16];
    snprintf(batch, sizeof batch, "%d", p->batch);
    const char *params[3] = {p->cutoff, batch, p->consumer};
    bool inbox = p->target == PB_PURGE_INBOX;
    int64_t t0 = pb_wall_us();
    PGresult *res = PQexecParams(p->conn, inbox ? purge_inbox_sql : purge_outbox_sql,
                                 inbox ? 3 : 2, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(p->conn, res, inbox ? PGRES_TUPLES_OK : PGRES_COMMAND_OK,
                                 "purge", err);
    if (st != PB_OK)
        return st;
    double ms = (double)(pb_wall_us() - t0) / 1000.0;
    *rows = strtoull(inbox ? PQgetvalue(res, 0, 0) : PQcmdTuples(res), NULL, 10);
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
