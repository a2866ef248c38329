/* libpostbox producer API: enqueue events on the caller's connection and transaction. */
#include "postbox/postbox.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/str.h"

static const char enqueue_one_sql[] =
    "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, headers, "
    "destination) VALUES ($1, $2, $3, $4::jsonb, coalesce($5::jsonb, '{}'::jsonb), $6) "
    "RETURNING event_id";

/* ORDER BY ord makes identity values follow the caller's order; the ids are read back in id
 * order, so event_ids[i] belongs to evs[i]. */
static const char enqueue_batch_sql[] =
    "WITH ins AS (INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, "
    "  headers, destination) "
    "  SELECT a, i, t, p, coalesce(h, '{}'::jsonb), d "
    "  FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $6::text[]) "
    "       WITH ORDINALITY AS u(a, i, t, p, h, d, ord) ORDER BY ord "
    "  RETURNING id, event_id) "
    "SELECT event_id FROM ins ORDER BY id";

/* The same with the two times, unix microseconds ($7, $8; NULL: none), turned into timestamps
 * exactly (no float on the way). */
static const char enqueue_one_timed_sql[] =
    "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, headers, "
    "destination, available_at, expires_at) VALUES ($1, $2, $3, $4::jsonb, "
    "coalesce($5::jsonb, '{}'::jsonb), $6, "
    "'epoch'::timestamptz + $7::bigint * interval '1 microsecond', "
    "'epoch'::timestamptz + $8::bigint * interval '1 microsecond') RETURNING event_id";

static const char enqueue_batch_timed_sql[] =
    "WITH ins AS (INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, "
    "  headers, destination, available_at, expires_at) "
    "  SELECT a, i, t, p, coalesce(h, '{}'::jsonb), d, "
    "         'epoch'::timestamptz + av * interval '1 microsecond', "
    "         'epoch'::timestamptz + ex * interval '1 microsecond' "
    "  FROM unnest($1::text[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $6::text[], "
    "              $7::bigint[], $8::bigint[]) "
    "       WITH ORDINALITY AS u(a, i, t, p, h, d, av, ex, ord) ORDER BY ord "
    "  RETURNING id, event_id) "
    "SELECT event_id FROM ins ORDER BY id";

static int check_ready(PGconn *conn, char *errbuf, size_t errlen)
{
    if (!conn || PQstatus(conn) != CONNECTION_OK) {
        pb_errbuf_set(errbuf, errlen, "postbox_enqueue: connection is not open");
        return -1;
    }
    switch (PQtransactionStatus(conn)) {
    case PQTRANS_INTRANS:
        return 0;
    case PQTRANS_INERROR:
        pb_errbuf_set(errbuf, errlen, "postbox_enqueue: the transaction has failed; roll it back");
        return -1;
    default:
        pb_errbuf_set(errbuf, errlen,
                      "postbox_enqueue: no transaction open on this connection (BEGIN first, so "
                      "the event commits with the business change)");
        return -1;
    }
}

static int check_event(const postbox_event_t *ev, char *errbuf, size_t errlen)
{
    if (!ev->aggregate_type || !*ev->aggregate_type || !ev->aggregate_id || !*ev->aggregate_id ||
        !ev->event_type || !*ev->event_type || !ev->payload) {
        pb_errbuf_set(errbuf, errlen,
                      "postbox_enqueue: aggregate_type, aggregate_id, event_type and payload are required");
        return -1;
    }
    return 0;
}

static int check_timing(const postbox_timing_t *t, char *errbuf, size_t errlen)
{
    if (t && (t->available_at_us < 0 || t->expires_at_us < 0)) {
        pb_errbuf_set(errbuf, errlen, "postbox_enqueue: available_at_us and expires_at_us are "
                                      "unix times in microseconds, or 0 for none");
        return -1;
    }
    if (t && t->available_at_us && t->expires_at_us && t->expires_at_us <= t->available_at_us) {
        pb_errbuf_set(errbuf, errlen, "postbox_enqueue: expires_at_us is not later than "
                                      "available_at_us: the event could never be published");
        return -1;
    }
    return 0;
}

/* A time as the text of a bigint parameter, NULL for 0 (none). */
static const char *time_param(int64_t us, char *buf, size_t len)
{
    if (us == 0)
        return NULL;
    snprintf(buf, len, "%lld", (long long)us);
    return buf;
}

int postbox_enqueue(PGconn *conn, const postbox_event_t *ev, char event_id[POSTBOX_EVENT_ID_SIZE],
                    char *errbuf, size_t errlen)
{
    return postbox_enqueue_timed(conn, ev, NULL, event_id, errbuf, errlen);
}

int postbox_enqueue_timed(PGconn *conn, const postbox_event_t *ev, const postbox_timing_t *timing,
                          char event_id[POSTBOX_EVENT_ID_SIZE], char *errbuf, size_t errlen)
{
    if (check_ready(conn, errbuf, errlen) || check_event(ev, errbuf, errlen) ||
        check_timing(timing, errbuf, errlen))
        return -1;
    /* without times, the statement of every schema version (no new column named) */
    if (timing && !timing->available_at_us && !timing->expires_at_us)
        timing = NULL;
    /* An unnamed statement each time, not a named one prepared once per connection: whether a
     * session still holds a named statement cannot be known on the client (DISCARD ALL,
     * DEALLOCATE ALL, a pooler's server reset, a reused PGconn address) nor checked without a
     * round trip, and a wrong guess is an error that aborts the caller's business transaction.
     * The price is a parse and plan per call: about twice the server time of a prepared
     * execution, with the same round trips; postbox_enqueue_batch() writes many events in one
     * statement. */
    char av[24], ex[24];
    const char *params[8] = {ev->aggregate_type, ev->aggregate_id, ev->event_type,
                             ev->payload,        ev->headers,      ev->destination,
                             timing ? time_param(timing->available_at_us, av, sizeof av) : NULL,
                             timing ? time_param(timing->expires_at_us, ex, sizeof ex) : NULL};
    PGresult *res = timing ? PQexecParams(conn, enqueue_one_timed_sql, 8, NULL, params, NULL, NULL, 0)
                           : PQexecParams(conn, enqueue_one_sql, 6, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
        pb_errbuf_set(errbuf, errlen, "postbox_enqueue: %s", PQresultErrorMessage(res));
        PQclear(res);
        return -1;
    }
    if (event_id)
        snprintf(event_id, POSTBOX_EVENT_ID_SIZE, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return 0;
}

static void append_element(pb_buf_t *b, size_t i, const char *s)
{
    if (i)
        pb_buf_putc(b, ',');
    if (s)
        pb_buf_append_array_text(b, s);
    else
        pb_buf_puts(b, "NULL");
}

int postbox_enqueue_batch(PGconn *conn, const postbox_event_t *evs, size_t n,
                          char (*event_ids)[POSTBOX_EVENT_ID_SIZE], char *errbuf, size_t errlen)
{
    return postbox_enqueue_batch_timed(conn, evs, NULL, n, event_ids, errbuf, errlen);
}

int postbox_enqueue_batch_timed(PGconn *conn, const postbox_event_t *evs,
                                const postbox_timing_t *timings, size_t n,
                                char (*event_ids)[POSTBOX_EVENT_ID_SIZE], char *errbuf,
                                size_t errlen)
{
    if (check_ready(conn, errbuf, errlen))
        return -1;
    if (n == 0)
        return 0;
    /* without times, the statement of every schema version (no new column named) */
    bool timed = false;
    for (size_t i = 0; timings && i < n; i++)
        timed = timed || timings[i].available_at_us || timings[i].expires_at_us;
    int ncols = timed ? 8 : 6;
    pb_buf_t cols[8] = {{0}};
    for (int c = 0; c < ncols; c++)
        pb_buf_putc(&cols[c], '{');
    int rc = -1;
    for (size_t i = 0; i < n; i++) {
        if (check_event(&evs[i], errbuf, errlen) ||
            check_timing(timings ? &timings[i] : NULL, errbuf, errlen))
            goto out;
        append_element(&cols[0], i, evs[i].aggregate_type);
        append_element(&cols[1], i, evs[i].aggregate_id);
        append_element(&cols[2], i, evs[i].event_type);
        append_element(&cols[3], i, evs[i].payload);
        append_element(&cols[4], i, evs[i].headers);
        append_element(&cols[5], i, evs[i].destination);
        if (timed) {
            char t[24];
            append_element(&cols[6], i, time_param(timings[i].available_at_us, t, sizeof t));
            append_element(&cols[7], i, time_param(timings[i].expires_at_us, t, sizeof t));
        }
    }
    const char *params[8];
    for (int c = 0; c < ncols; c++) {
        pb_buf_putc(&cols[c], '}');
        params[c] = cols[c].data;
    }
    PGresult *res = PQexecParams(conn, timed ? enqueue_batch_timed_sql : enqueue_batch_sql, ncols,
                                 NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || (size_t)PQntuples(res) != n) {
        pb_errbuf_set(errbuf, errlen, "postbox_enqueue_batch: %s", PQresultErrorMessage(res));
    } else {
        for (size_t i = 0; event_ids && i < n; i++)
            snprintf(event_ids[i], POSTBOX_EVENT_ID_SIZE, "%s", PQgetvalue(res, (int)i, 0));
        rc = 0;
    }
    PQclear(res);
out:
    for (int c = 0; c < 8; c++)
        pb_buf_free(&cols[c]);
    return rc;
}

const char *postbox_version(void)
{
    return POSTBOX_VERSION_STRING;
}
