#include "store/stats.h"

#include <stdio.h>
#include <stdlib.h>

#include "store/pg.h"

/* ORDER BY id makes the planner walk the primary key: since schema version 4 the outbox holds
 * pending rows only, so the first entries qualify (a sequential scan could read the whole table
 * before it meets the oldest one). */
static const char stats_sql[] =
    "WITH oldest AS (SELECT id, created_at FROM postbox.outbox WHERE published_at IS NULL "
    "                ORDER BY id LIMIT 1), "
    "     newest AS (SELECT id FROM postbox.outbox WHERE published_at IS NULL "
    "                ORDER BY id DESC LIMIT 1) "
    "SELECT (SELECT count(*) FROM (SELECT 1 FROM postbox.outbox WHERE published_at IS NULL "
    "                              ORDER BY id LIMIT $1::bigint) s), "
    "       coalesce((SELECT id FROM oldest), 0), coalesce((SELECT id FROM newest), 0), "
    "       coalesce((SELECT extract(epoch FROM clock_timestamp() - created_at)::float8 "
    "                 FROM oldest), 0), "
    "       (SELECT count(*) FROM (SELECT 1 FROM postbox.outbox "
    "                              WHERE published_at IS NULL AND attempts > 0 "
    "                              LIMIT $1::bigint) r), "
    "       (SELECT count(*) FROM (SELECT 1 FROM postbox.dead_letters LIMIT $1::bigint) d)";

pb_status_t pb_stats_outbox(PGconn *conn, int64_t cap, pb_outbox_stats_t *out, pb_error_t *err)
{
    char cap_text[24];
    snprintf(cap_text, sizeof cap_text, "%lld", (long long)cap);
    const char *params[1] = {cap_text};
    PGresult *res = PQexecParams(conn, stats_sql, 1, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "sample the outbox", err);
    if (st != PB_OK)
        return st;
    int64_t bounded = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    int64_t min_id = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
    int64_t max_id = strtoll(PQgetvalue(res, 0, 2), NULL, 10);
    out->oldest_id = min_id;
    out->oldest_age_s = strtod(PQgetvalue(res, 0, 3), NULL);
    if (out->oldest_age_s < 0)
        out->oldest_age_s = 0;
    out->retrying = strtoll(PQgetvalue(res, 0, 4), NULL, 10);
    out->dead_letters = strtoll(PQgetvalue(res, 0, 5), NULL, 10);
    out->dead_exact = out->dead_letters < cap;
    out->backlog_exact = bounded < cap;
    out->backlog = bounded;
    if (!out->backlog_exact && max_id - min_id + 1 > bounded)
        out->backlog = max_id - min_id + 1;
    PQclear(res);
    return PB_OK;
}
