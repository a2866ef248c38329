#include "store/dead_letters.h"

#include <stdio.h>

#include "store/pg.h"

static const char dead_event_sql[] =
    "WITH gone AS (DELETE FROM postbox.outbox WHERE id = $1::bigint) "
    "INSERT INTO postbox.dead_letters (outbox_id, event_id, aggregate_type, aggregate_id, "
    "    event_type, payload, headers, destination, created_at, attempts, last_error, reason) "
    "VALUES (nullif($1::bigint, 0), $2::uuid, $3, $4, $5, $6::jsonb, coalesce($7::jsonb, '{}'), $8, "
    "        to_timestamp($9::bigint / 1000000.0), $10::integer, $11, $11)";

pb_status_t pb_dead_letter_event(PGconn *conn, const pb_event_t *ev, int attempts,
                                 const char *reason, pb_error_t *err)
{
    char id[24], created[24], att[16];
    snprintf(id, sizeof id, "%lld", (long long)ev->id);
    snprintf(created, sizeof created, "%lld", (long long)ev->created_at_us);
    snprintf(att, sizeof att, "%d", attempts);
    const char *params[11] = {id,          ev->event_id, ev->aggregate_type, ev->aggregate_id,
                              ev->event_type, ev->payload, ev->headers,     ev->destination,
                              created,     att,          reason};
    PGresult *res = PQexecParams(conn, dead_event_sql, 11, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, "write dead letter", err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}
