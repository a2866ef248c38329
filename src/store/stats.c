#include "store/stats.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/str.h"
#include "store/pg.h"

/* ORDER BY id makes the planner walk an index in id order: since schema version 4 the outbox
 * holds pending rows only, so the first entries qualify (a sequential scan could read the whole
 * table before it meets the oldest one). $1: the cap. Columns: 0 backlog (bounded), 1 first
 * pending id, 2 last pending id, 3 oldest due id, 4 its age (s), 5 the most overdue waiting
 * row's id, 6 how long it is overdue (s), 7 retrying (bounded), 8 dead letters (bounded),
 * 9 delayed (bounded), 10 rows of postbox.cdc_deferred (bounded). */
static const char stats_sql[] =
    "WITH first AS (SELECT id FROM postbox.outbox WHERE published_at IS NULL ORDER BY id LIMIT 1), "
    "     newest AS (SELECT id FROM postbox.outbox WHERE published_at IS NULL "
    "                ORDER BY id DESC LIMIT 1), "
    "     ready AS (SELECT id FROM postbox.outbox WHERE published_at IS NULL AND NOT waiting "
    "               ORDER BY id LIMIT 1), "
    "     retrying AS (SELECT count(*) AS n, min(id) AS first "
    "                  FROM (SELECT id FROM postbox.outbox "
    "                        WHERE published_at IS NULL AND attempts > 0 LIMIT $1::bigint) r), "
    "     oldest AS (SELECT o.id, greatest(o.created_at, o.available_at) AS since "
    "                FROM postbox.outbox o "
    "                WHERE o.id = least((SELECT id FROM ready), (SELECT first FROM retrying))), "
    "     overdue AS (SELECT id, next_attempt_at FROM postbox.outbox "
    "                 WHERE waiting AND next_attempt_at <= now() "
    "                 ORDER BY next_attempt_at, id LIMIT 1) "
    "SELECT (SELECT count(*) FROM (SELECT 1 FROM postbox.outbox WHERE published_at IS NULL "
    "                              ORDER BY id LIMIT $1::bigint) s), "
    "       coalesce((SELECT id FROM first), 0), coalesce((SELECT id FROM newest), 0), "
    "       coalesce((SELECT id FROM oldest), 0), "
    "       coalesce((SELECT extract(epoch FROM clock_timestamp() - since)::float8 FROM oldest), 0), "
    "       coalesce((SELECT id FROM overdue), 0), "
    "       coalesce((SELECT extract(epoch FROM clock_timestamp() - next_attempt_at)::float8 "
    "                 FROM overdue), 0), "
    "       (SELECT n FROM retrying), "
    "       (SELECT count(*) FROM (SELECT 1 FROM postbox.dead_letters LIMIT $1::bigint) d), "
    "       (SELECT count(*) FROM (SELECT 1 FROM postbox.outbox "
    "                              WHERE waiting AND next_attempt_at > now() AND attempts = 0 "
    "                              LIMIT $1::bigint) w), "
    "       (SELECT count(*) FROM (SELECT 1 FROM postbox.cdc_deferred LIMIT $1::bigint) c)";

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
    int64_t oldest_id = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
    double oldest_age = strtod(PQgetvalue(res, 0, 4), NULL);
    int64_t overdue_id = strtoll(PQgetvalue(res, 0, 5), NULL, 10);
    double overdue_age = strtod(PQgetvalue(res, 0, 6), NULL);
    if (overdue_id && (!oldest_id || overdue_age > oldest_age)) {
        oldest_id = overdue_id;
        oldest_age = overdue_age;
    }
    out->oldest_id = oldest_id;
    out->oldest_age_s = oldest_age > 0 ? oldest_age : 0;
    out->retrying = strtoll(PQgetvalue(res, 0, 7), NULL, 10);
    out->dead_letters = strtoll(PQgetvalue(res, 0, 8), NULL, 10);
    out->dead_exact = out->dead_letters < cap;
    out->delayed = strtoll(PQgetvalue(res, 0, 9), NULL, 10);
    out->cdc_deferred = strtoll(PQgetvalue(res, 0, 10), NULL, 10);
    out->backlog_exact = bounded < cap;
    out->backlog = bounded;
    if (!out->backlog_exact && max_id - min_id + 1 > bounded)
        out->backlog = max_id - min_id + 1;
    PQclear(res);
    return PB_OK;
}

static const char inbox_sql[] =
    "WITH i AS (SELECT consumer, count(*) FILTER (WHERE processed_at IS NOT NULL) AS processed, "
    "                  count(*) FILTER (WHERE processed_at IS NULL) AS unprocessed, "
    "                  extract(epoch FROM clock_timestamp() - max(received_at))::float8 AS idle "
    "           FROM postbox.inbox GROUP BY consumer), "
    "     f AS (SELECT consumer, count(*) AS retrying FROM postbox.inbox_failures GROUP BY consumer), "
    "     d AS (SELECT consumer, count(*) AS dead FROM postbox.inbox_dead GROUP BY consumer) "
    "SELECT consumer, coalesce(i.processed, 0), coalesce(i.unprocessed, 0), "
    "       coalesce(f.retrying, 0), coalesce(d.dead, 0), i.idle "
    "FROM i FULL JOIN f USING (consumer) FULL JOIN d USING (consumer) ORDER BY consumer";

pb_status_t pb_stats_inbox(PGconn *conn, pb_inbox_stats_t **out, size_t *n, pb_error_t *err)
{
    *out = NULL;
    *n = 0;
    PGresult *res = PQexec(conn, inbox_sql);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "inbox counts", err);
    if (st != PB_OK)
        return st;
    size_t rows = (size_t)PQntuples(res);
    pb_inbox_stats_t *s = pb_malloc((rows ? rows : 1) * sizeof *s);
    for (size_t i = 0; i < rows; i++) {
        int r = (int)i;
        s[i] = (pb_inbox_stats_t){
            .consumer = pb_strdup(PQgetvalue(res, r, 0)),
            .processed = strtoll(PQgetvalue(res, r, 1), NULL, 10),
            .unprocessed = strtoll(PQgetvalue(res, r, 2), NULL, 10),
            .retrying = strtoll(PQgetvalue(res, r, 3), NULL, 10),
            .dead = strtoll(PQgetvalue(res, r, 4), NULL, 10),
            .has_idle = !PQgetisnull(res, r, 5),
            .idle_s = PQgetisnull(res, r, 5) ? 0 : strtod(PQgetvalue(res, r, 5), NULL),
        };
    }
    PQclear(res);
    *out = s;
    *n = rows;
    return PB_OK;
}

void pb_stats_inbox_free(pb_inbox_stats_t *stats, size_t n)
{
    for (size_t i = 0; stats && i < n; i++)
        free(stats[i].consumer);
    free(stats);
}
