#include "store/inbox_legacy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/str.h"
#include "store/pg.h"

void pb_inbox_legacy_reset(pb_inbox_legacy_t *mv)
{
    free(mv->after_consumer);
    free(mv->after_id);
    mv->after_consumer = mv->after_id = NULL;
}

/* The end: true when the legacy table is gone (dropped now, or by another janitor). */
static pb_status_t finish(PGconn *conn, bool *over, pb_error_t *err)
{
    return pb_pg_query_bool(conn, "SELECT postbox.inbox_legacy_finish()",
                            "finish the inbox migration", over, err);
}

pb_status_t pb_inbox_legacy_step(PGconn *conn, pb_inbox_legacy_t *mv, int limit,
                                 pb_inbox_legacy_outcome_t *out, pb_error_t *err)
{
    char limit_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *params[3] = {limit_text, mv->after_consumer, mv->after_id};
    PGresult *res = PQexecParams(conn,
                                 "SELECT moved, last_consumer, last_message_id, gone "
                                 "FROM postbox.inbox_legacy_move($1::integer, $2, $3)",
                                 3, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "move inbox rows of the migration",
                                 err);
    if (st != PB_OK)
        return st;
    bool gone = strcmp(PQgetvalue(res, 0, 3), "t") == 0;
    long moved = strtol(PQgetvalue(res, 0, 0), NULL, 10);
    if (gone) {
        PQclear(res);
        pb_inbox_legacy_reset(mv);
        mv->active = false;
        *out = PB_LEGACY_NONE;
        return PB_OK;
    }
    mv->active = true;
    if (moved > 0) {
        pb_inbox_legacy_reset(mv);
        mv->after_consumer = pb_strdup(PQgetvalue(res, 0, 1));
        mv->after_id = pb_strdup(PQgetvalue(res, 0, 2));
        mv->moved += (uint64_t)moved;
        PQclear(res);
        *out = PB_LEGACY_MOVED;
        return PB_OK;
    }
    PQclear(res);
    if (mv->after_consumer) {
        /* the end of a pass: rows skipped (a consumer held them) or given back by a rollback
         * lie behind the position; the next pass starts from the first key */
        pb_inbox_legacy_reset(mv);
        *out = PB_LEGACY_MOVED;
        return PB_OK;
    }
    bool over = false;
    if ((st = finish(conn, &over, err)) != PB_OK)
        return st;
    if (over)
        mv->active = false;
    *out = over ? PB_LEGACY_FINISHED : PB_LEGACY_WAITING;
    return PB_OK;
}

pb_status_t pb_inbox_legacy_rows(PGconn *conn, int64_t *rows, pb_error_t *err)
{
    *rows = -1;
    const char *what = "look for an inbox migration";
    /* a schema older than version 25 has neither the function nor a migration */
    bool known = false, none = true;
    pb_status_t st = pb_pg_query_bool(
        conn, "SELECT to_regprocedure('postbox.inbox_legacy_rows()') IS NOT NULL", what, &known, err);
    if (st != PB_OK || !known)
        return st;
    int64_t count;
    if ((st = pb_pg_query_int64(conn, "SELECT postbox.inbox_legacy_rows()", what, &count, &none,
                                err)) != PB_OK)
        return st;
    if (!none)
        *rows = count;
    return PB_OK;
}
