/* libpostbox producer API: enqueue events on the caller's connection and transaction. */
#include "postbox/postbox.h"

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

int postbox_enqueue(PGconn *conn, const postbox_event_t *ev, char event_id[POSTBOX_EVENT_ID_SIZE],
                    char *errbuf, size_t errlen)
{
    if (check_ready(conn, errbuf, errlen) || check_event(ev, errbuf, errlen))
        return -1;
    /* An unnamed statement each time, not a named one prepared once per connection: whether a
     * session still holds a named statement cannot be known on the client (DISCARD ALL,
     * DEALLOCATE ALL, a pooler's server reset, a reused PGconn address) nor checked without a
     * round trip, and a wrong guess is an error that aborts the caller's business transaction.
     * The price is a parse and plan per call: about twice the server time of a prepared
     * execution, with the same round trips; postbox_enqueue_batch() writes many events in one
     * statement. */
    const char *params[6] = {ev->aggregate_type, ev->aggregate_id, ev->event_type,
                             ev->payload,        ev->headers,      ev->destination};
    PGresult *res = PQexecParams(conn, enqueue_one_sql, 6, NULL, params, NULL, NULL, 0);
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
    if (check_ready(conn, errbuf, errlen))
        return -1;
    if (n == 0)
        return 0;
    pb_buf_t cols[6] = {{0}};
    for (int c = 0; c < 6; c++)
        pb_buf_putc(&cols[c], '{');
    int rc = -1;
    for (size_t i = 0; i < n; i++) {
        if (check_event(&evs[i], errbuf, errlen))
            goto out;
        append_element(&cols[0], i, evs[i].aggregate_type);
        append_element(&cols[1], i, evs[i].aggregate_id);
        append_element(&cols[2], i, evs[i].event_type);
        append_element(&cols[3], i, evs[i].payload);
        append_element(&cols[4], i, evs[i].headers);
        append_element(&cols[5], i, evs[i].destination);
    }
    const char *params[6];
    for (int c = 0; c < 6; c++) {
        pb_buf_putc(&cols[c], '}');
        params[c] = cols[c].data;
    }
    PGresult *res = PQexecParams(conn, enqueue_batch_sql, 6, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || (size_t)PQntuples(res) != n) {
        pb_errbuf_set(errbuf, errlen, "postbox_enqueue_batch: %s", PQresultErrorMessage(res));
    } else {
        for (size_t i = 0; event_ids && i < n; i++)
            snprintf(event_ids[i], POSTBOX_EVENT_ID_SIZE, "%s", PQgetvalue(res, (int)i, 0));
        rc = 0;
    }
    PQclear(res);
out:
    for (int c = 0; c < 6; c++)
        pb_buf_free(&cols[c]);
    return rc;
}

const char *postbox_version(void)
{
    return POSTBOX_VERSION_STRING;
}
