#include "store/slot_position.h"

#include <stdlib.h>
#include <string.h>

#include "cdc/stream.h"
#include "store/pg.h"

/* One row whether or not the slot and the record exist. */
static const char load_sql[] =
    "SELECT s.slot_name IS NOT NULL, coalesce(s.wal_status = 'lost', false), s.restart_lsn, "
    "       s.confirmed_flush_lsn, p.confirmed_lsn, "
    "       (pg_current_wal_lsn() - s.confirmed_flush_lsn)::bigint "
    "FROM (SELECT $1::text AS name) n "
    "LEFT JOIN pg_replication_slots s ON s.slot_name = n.name "
    "LEFT JOIN postbox.cdc_slot_positions p ON p.slot_name = n.name";

static uint64_t lsn_at(PGresult *res, int col)
{
    uint64_t lsn = 0;
    if (!PQgetisnull(res, 0, col) && !pb_lsn_parse(PQgetvalue(res, 0, col), &lsn))
        lsn = 0;
    return lsn;
}

pb_status_t pb_slot_position_load(PGconn *conn, const char *slot_name, pb_slot_state_t *slot,
                                  pb_slot_record_t *rec, int64_t *lag_bytes, pb_error_t *err)
{
    const char *params[1] = {slot_name};
    PGresult *res = PQexecParams(conn, load_sql, 1, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "read the replication slot's state", err);
    if (st != PB_OK)
        return st;
    slot->exists = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    slot->lost = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    slot->restart_lsn = lsn_at(res, 2);
    slot->confirmed_lsn = lsn_at(res, 3);
    rec->exists = !PQgetisnull(res, 0, 4);
    rec->confirmed_lsn = lsn_at(res, 4);
    *lag_bytes = PQgetisnull(res, 0, 5) ? -1 : strtoll(PQgetvalue(res, 0, 5), NULL, 10);
    PQclear(res);
    return PB_OK;
}

/* Runs a statement with text parameters and no result rows. */
static pb_status_t command(PGconn *conn, const char *sql, int n, const char *const *params,
                           const char *what, pb_error_t *err)
{
    PGresult *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, what, err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}

pb_status_t pb_slot_position_record(PGconn *conn, const char *slot_name, uint64_t lsn,
                                    pb_error_t *err)
{
    char text[32];
    pb_lsn_format(lsn, text, sizeof text);
    const char *params[2] = {slot_name, text};
    return command(conn,
                   "INSERT INTO postbox.cdc_slot_positions (slot_name, confirmed_lsn) "
                   "VALUES ($1, $2::pg_lsn) ON CONFLICT (slot_name) DO UPDATE "
                   "SET confirmed_lsn = EXCLUDED.confirmed_lsn, updated_at = now()",
                   2, params, "record the slot's confirmed position", err);
}

pb_status_t pb_slot_position_forget(PGconn *conn, const char *slot_name, pb_error_t *err)
{
    const char *params[1] = {slot_name};
    return command(conn, "DELETE FROM postbox.cdc_slot_positions WHERE slot_name = $1", 1, params,
                   "forget the slot's recorded position", err);
}

/* The oldest pending outbox row in id order that the relay of the slot has not set aside in
 * postbox.cdc_deferred (those are behind the slot already). */
static const char unrelayed_age_sql[] =
    "SELECT (extract(epoch FROM clock_timestamp() - o.created_at) * 1000)::bigint "
    "FROM postbox.outbox o "
    "WHERE o.published_at IS NULL "
    "  AND NOT EXISTS (SELECT FROM postbox.cdc_deferred d WHERE d.slot = $1 AND d.outbox_id = o.id) "
    "ORDER BY o.id LIMIT 1";

pb_status_t pb_slot_unrelayed_age(PGconn *conn, const char *slot_name, int64_t *age_ms,
                                  pb_error_t *err)
{
    const char *params[1] = {slot_name};
    PGresult *res = PQexecParams(conn, unrelayed_age_sql, 1, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "read the oldest unrelayed outbox row",
                                 err);
    if (st != PB_OK)
        return st;
    *age_ms = PQntuples(res) == 1 ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : -1;
    if (*age_ms < -1)
        *age_ms = 0; /* created by a clock ahead of the server's */
    PQclear(res);
    return PB_OK;
}
