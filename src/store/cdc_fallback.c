#include "store/cdc_fallback.h"

#include <stdlib.h>
#include <string.h>

#include "common/str.h"
#include "store/pg.h"

static pb_status_t rows(PGconn *conn, const char *sql, int n, const char *const *params,
                        const char *what, PGresult **out, pb_error_t *err)
{
    PGresult *res = PQexecParams(conn, sql, n, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, what, err);
    if (st == PB_OK)
        *out = res;
    return st;
}

pb_status_t pb_cdc_fallback_active(PGconn *conn, const char *slot, bool *active, pb_error_t *err)
{
    const char *params[1] = {slot};
    PGresult *res;
    pb_status_t st = rows(conn, "SELECT 1 FROM postbox.cdc_fallback WHERE slot_name = $1", 1,
                          params, "look up the cdc fallback", &res, err);
    if (st != PB_OK)
        return st;
    *active = PQntuples(res) > 0;
    PQclear(res);
    return PB_OK;
}

/* One statement, so one transaction: the fallback is recorded with everything that goes with it
 * or not at all. */
static const char enter_sql[] =
    "WITH fb AS (INSERT INTO postbox.cdc_fallback (slot_name, reason) VALUES ($1, $2) "
    "            ON CONFLICT (slot_name) DO NOTHING RETURNING 1), "
    "pos AS (DELETE FROM postbox.cdc_slot_positions WHERE slot_name = $1 RETURNING 1), "
    "back AS (DELETE FROM postbox.cdc_deferred WHERE slot = $1 AND outbox_id IS NOT NULL "
    "         RETURNING 1) "
    "SELECT (SELECT count(*) FROM postbox.cdc_deferred WHERE slot = $1 AND outbox_id IS NULL), "
    "       (SELECT count(*) FROM fb), (SELECT count(*) FROM pos), (SELECT count(*) FROM back)";

pb_status_t pb_cdc_fallback_enter(PGconn *conn, const char *slot, const char *reason,
                                  int64_t *kept_emit, pb_error_t *err)
{
    const char *params[2] = {slot, reason};
    PGresult *res;
    pb_status_t st = rows(conn, enter_sql, 2, params, "record the cdc fallback", &res, err);
    if (st != PB_OK)
        return st;
    *kept_emit = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return pb_cdc_fallback_drop_slot(conn, slot, err);
}

pb_status_t pb_cdc_fallback_drop_slot(PGconn *conn, const char *slot, pb_error_t *err)
{
    const char *params[1] = {slot};
    PGresult *res;
    pb_status_t st = rows(conn,
                          "SELECT active_pid, CASE WHEN active_pid IS NULL THEN "
                          "pg_drop_replication_slot(slot_name) END IS NULL "
                          "FROM pg_replication_slots WHERE slot_name = $1",
                          1, params, "drop the replication slot", &res, err);
    if (st != PB_OK)
        return st;
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
        st = pb_fail(err, PB_TRANSIENT, "replication slot \"%s\" is still held by process %s",
                     slot, PQgetvalue(res, 0, 0));
    PQclear(res);
    return st;
}

pb_status_t pb_cdc_fallback_pending_in(PGconn *conn, const char *snapshot, int64_t **ids,
                                       size_t *n, bool *delayed, pb_error_t *err)
{
    *ids = NULL;
    *n = 0;
    *delayed = false;
    char *lit = NULL;
    pb_status_t st = pb_pg_quote_literal(conn, snapshot, "snapshot", &lit, err);
    if (st == PB_OK)
        st = pb_pg_exec(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", err);
    if (st != PB_OK) {
        PQfreemem(lit);
        return st;
    }
    pb_buf_t sql = {0};
    pb_buf_printf(&sql, "SET TRANSACTION SNAPSHOT %s", lit);
    PQfreemem(lit);
    st = pb_pg_exec(conn, sql.data, err);
    pb_buf_free(&sql);
    PGresult *res = NULL;
    if (st == PB_OK)
        st = rows(conn,
                  "SELECT id, coalesce(available_at > now(), false) FROM postbox.outbox "
                  "WHERE published_at IS NULL ORDER BY id",
                  0, NULL, "read the pending rows of the new slot's snapshot", &res, err);
    if (st == PB_OK) {
        *n = (size_t)PQntuples(res);
        *ids = pb_malloc((*n ? *n : 1) * sizeof **ids);
        for (size_t i = 0; i < *n; i++) {
            (*ids)[i] = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
            if (strcmp(PQgetvalue(res, (int)i, 1), "t") == 0)
                *delayed = true;
        }
        PQclear(res);
    }
    /* read only: a rollback ends it as well as a commit would, and also after an error */
    pb_error_t ignored;
    if (PQtransactionStatus(conn) != PQTRANS_IDLE && pb_pg_exec(conn, "ROLLBACK", &ignored) != PB_OK &&
        st == PB_OK)
        st = pb_fail(err, PB_TRANSIENT, "%s", ignored.msg);
    if (st != PB_OK) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    return st;
}

pb_status_t pb_cdc_fallback_left(PGconn *conn, const int64_t *ids, size_t n, int64_t *left,
                                 pb_error_t *err)
{
    pb_buf_t arr = {0};
    pb_buf_putc(&arr, '{');
    for (size_t i = 0; i < n; i++) {
        if (i)
            pb_buf_putc(&arr, ',');
        pb_buf_put_int64(&arr, ids[i]);
    }
    pb_buf_putc(&arr, '}');
    const char *params[1] = {arr.data};
    PGresult *res;
    pb_status_t st = rows(conn,
                          "SELECT count(*) FROM postbox.outbox "
                          "WHERE id = ANY($1::bigint[]) AND published_at IS NULL",
                          1, params, "count the rows left to the poll capture", &res, err);
    pb_buf_free(&arr);
    if (st != PB_OK)
        return st;
    *left = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return PB_OK;
}

pb_status_t pb_cdc_fallback_leave(PGconn *conn, const char *slot, pb_error_t *err)
{
    const char *params[1] = {slot};
    PGresult *res = PQexecParams(conn, "DELETE FROM postbox.cdc_fallback WHERE slot_name = $1", 1,
                                 NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, "end the cdc fallback", err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}
