/* Example and test of libpostbox's producer API: a business change and its events commit or
 * roll back together. Usage: producer_example DSN (the postbox schema must exist).
 * Commits 1 single + a batch of 3 events (aggregate_type "producer-test"), rolls back 2 more;
 * then, with times (schema version 16), commits 1 single event available in an hour and
 * expiring in two, and a batch of 2 (aggregate_type "producer-timed": one expiring in an hour,
 * one without times: both later events of the delayed one's aggregate, so they wait behind it),
 * and sees an expiry not after the available time refused. */
#include <postbox/postbox.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int exec_ok(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "%s: %s", sql, PQerrorMessage(conn));
    PQclear(res);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DSN\n", argv[0]);
        return 2;
    }
    PGconn *conn = PQconnectdb(argv[1]);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "connect: %s", PQerrorMessage(conn));
        return 1;
    }
    char err[512];
    char id[POSTBOX_EVENT_ID_SIZE];
    postbox_event_t ev = {
        .aggregate_type = "producer-test",
        .aggregate_id = "order-1",
        .event_type = "order.created.v1",
        .payload = "{\"amount\": 10}",
        .headers = "{\"trace_id\": \"abc\"}",
    };
    int failures = 0;

    /* Outside a transaction the library refuses: the event would commit on its own. */
    if (postbox_enqueue(conn, &ev, id, err, sizeof err) == 0) {
        fprintf(stderr, "FAIL: enqueue without a transaction succeeded\n");
        failures++;
    } else {
        printf("refused outside a transaction: %s\n", err);
    }

    /* Committed: one single event and a batch of three. */
    if (!exec_ok(conn, "BEGIN"))
        return 1;
    if (postbox_enqueue(conn, &ev, id, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL: enqueue: %s\n", err);
        return 1;
    }
    printf("committed %s\n", id);
    postbox_event_t batch[3];
    char ids[3][POSTBOX_EVENT_ID_SIZE];
    const char *types[3] = {"order.paid.v1", "order.packed.v1", "order.shipped.v1"};
    for (int i = 0; i < 3; i++) {
        batch[i] = ev;
        batch[i].event_type = types[i];
        batch[i].headers = NULL;
        batch[i].destination = i == 2 ? "shipping.override" : NULL;
    }
    if (postbox_enqueue_batch(conn, batch, 3, ids, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL: enqueue_batch: %s\n", err);
        return 1;
    }
    for (int i = 0; i < 3; i++)
        printf("committed %s\n", ids[i]);
    if (!exec_ok(conn, "COMMIT"))
        return 1;

    /* Rolled back: these two never become messages. */
    if (!exec_ok(conn, "BEGIN"))
        return 1;
    ev.aggregate_id = "order-2";
    if (postbox_enqueue(conn, &ev, id, err, sizeof err) != 0 ||
        postbox_enqueue_batch(conn, batch, 1, ids, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL: enqueue in the rolled-back transaction: %s\n", err);
        return 1;
    }
    if (!exec_ok(conn, "ROLLBACK"))
        return 1;

    /* Bad JSON is an error that aborts the caller's transaction, not a silent loss. */
    if (!exec_ok(conn, "BEGIN"))
        return 1;
    ev.payload = "{not json";
    if (postbox_enqueue(conn, &ev, id, err, sizeof err) == 0) {
        fprintf(stderr, "FAIL: bad JSON accepted\n");
        failures++;
    } else {
        printf("bad payload refused: %s\n", err);
    }
    exec_ok(conn, "ROLLBACK");

    /* With times: wait an hour, expire in two; a batch with an expiry on its first event only. */
    const int64_t hour_us = INT64_C(3600000000);
    int64_t now_us = (int64_t)time(NULL) * 1000000;
    postbox_event_t timed = ev;
    timed.aggregate_type = "producer-timed";
    timed.payload = "{\"reminder\": true}";
    postbox_timing_t later = {.available_at_us = now_us + hour_us, .expires_at_us = now_us + 2 * hour_us};
    postbox_event_t tbatch[2] = {timed, timed};
    postbox_timing_t ttimes[2] = {{.expires_at_us = now_us + hour_us}, {0}};
    if (!exec_ok(conn, "BEGIN"))
        return 1;
    if (postbox_enqueue_timed(conn, &timed, &later, id, err, sizeof err) != 0 ||
        postbox_enqueue_batch_timed(conn, tbatch, ttimes, 2, ids, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL: timed enqueue: %s\n", err);
        return 1;
    }
    printf("committed timed %s, %s, %s\n", id, ids[0], ids[1]);
    if (!exec_ok(conn, "COMMIT"))
        return 1;
    /* expiring when it becomes available: it could never be published */
    postbox_timing_t never = {.available_at_us = now_us + hour_us, .expires_at_us = now_us + hour_us};
    if (!exec_ok(conn, "BEGIN"))
        return 1;
    if (postbox_enqueue_timed(conn, &timed, &never, id, err, sizeof err) == 0) {
        fprintf(stderr, "FAIL: an expiry not after the available time was accepted\n");
        failures++;
    } else {
        printf("timing refused: %s\n", err);
    }
    exec_ok(conn, "ROLLBACK");

    PQfinish(conn);
    return failures ? 1 : 0;
}
