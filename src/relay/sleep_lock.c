/* The poll relay's "asleep" lock: see sleep_lock.h and sql/027_wake_when_asleep.sql. */
#include "relay/sleep_lock.h"

#include <string.h>

#include "store/pg.h"

/* Must name the key the outbox's NOTIFY trigger tries (sql/027). */
#define SLEEP_KEY "pg_catalog.hashtext('postbox.relay.asleep'), 0"
#define SQLSTATE_QUERY_CANCELED "57014"

static pb_status_t lost(pb_sleep_lock_t *sl, pb_error_t *err)
{
    return pb_fail(err, PB_TRANSIENT, "postgresql connection lost: %s", PQerrorMessage(sl->conn));
}

pb_status_t pb_sleep_lock_ask(pb_sleep_lock_t *sl, PGconn *conn, pb_error_t *err)
{
    PB_ASSERT(sl->state == PB_SLEEP_AWAKE);
    sl->conn = conn;
    if (!PQsendQuery(conn, "SELECT pg_catalog.pg_advisory_lock(" SLEEP_KEY ")") ||
        PQflush(conn) != 0)
        return lost(sl, err);
    sl->state = PB_SLEEP_ASKED;
    return PB_OK;
}

/* Reads the request's answer (the caller knows it is there, or waits for it). A cancelled
 * request leaves the lock to others: AWAKE. */
static pb_status_t read_answer(pb_sleep_lock_t *sl, pb_error_t *err)
{
    PGresult *res = PQgetResult(sl->conn);
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    bool cancelled = state && strcmp(state, SQLSTATE_QUERY_CANCELED) == 0;
    if (!cancelled) {
        pb_status_t st =
            pb_pg_check(sl->conn, res, PGRES_TUPLES_OK, "ask for the relay's sleep lock", err);
        if (st != PB_OK)
            return st;
    }
    PQclear(res);
    while ((res = PQgetResult(sl->conn)) != NULL) /* the end of the query */
        PQclear(res);
    sl->state = cancelled ? PB_SLEEP_AWAKE : PB_SLEEP_HELD;
    return PB_OK;
}

pb_status_t pb_sleep_lock_poll(pb_sleep_lock_t *sl, pb_error_t *err)
{
    if (sl->state != PB_SLEEP_ASKED)
        return PB_OK;
    if (!PQconsumeInput(sl->conn))
        return lost(sl, err);
    return PQisBusy(sl->conn) ? PB_OK : read_answer(sl, err);
}

pb_status_t pb_sleep_lock_withdraw(pb_sleep_lock_t *sl, pb_error_t *err)
{
    if (sl->state != PB_SLEEP_ASKED)
        return PB_OK;
    /* Sent on a connection of its own; a grant that came first answers the request anyway. */
    PGcancel *cancel = PQgetCancel(sl->conn);
    char why[256] = "";
    bool sent = cancel && PQcancel(cancel, why, sizeof why);
    PQfreeCancel(cancel);
    if (!sent)
        return pb_fail(err, PB_TRANSIENT, "could not withdraw the relay's sleep lock request: %s",
                       *why ? why : "out of memory");
    return read_answer(sl, err);
}

pb_status_t pb_sleep_lock_release(pb_sleep_lock_t *sl, pb_error_t *err)
{
    if (sl->state != PB_SLEEP_HELD)
        return PB_OK;
    PGresult *res = PQexec(sl->conn, "SELECT pg_catalog.pg_advisory_unlock(" SLEEP_KEY ")");
    pb_status_t st = pb_pg_check(sl->conn, res, PGRES_TUPLES_OK,
                                 "let go of the relay's sleep lock", err);
    if (st != PB_OK)
        return st;
    PQclear(res);
    sl->state = PB_SLEEP_AWAKE;
    return PB_OK;
}

void pb_sleep_lock_reset(pb_sleep_lock_t *sl)
{
    sl->conn = NULL;
    sl->state = PB_SLEEP_AWAKE;
}
