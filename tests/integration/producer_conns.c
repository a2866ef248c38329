/* Test of libpostbox's producer API on many connections and after the server forgot the session's
 * prepared statements. Usage: producer_conns DSN (the postbox schema must exist).
 *
 * - 70 connections in one process, each with a transaction open, enqueue twice each (one round
 *   over all of them, then a second): 140 events (aggregate_type "producer-conns") commit.
 * - On one connection: an event committed, then DISCARD ALL; an event committed, then
 *   DEALLOCATE ALL; an event after DEALLOCATE ALL inside the same transaction; a batch after
 *   DISCARD ALL: 4 single events and a batch of 2 (aggregate_type "producer-discard") commit.
 * Exits 0 when every enqueue and commit succeeded. */
#include <postbox/postbox.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCONNS 70

static int exec_ok(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        fprintf(stderr, "%s: %s", sql, PQerrorMessage(conn));
    PQclear(res);
    return ok;
}

static int enqueue(PGconn *conn, const char *type, const char *id, const char *what)
{
    char err[512], event_id[POSTBOX_EVENT_ID_SIZE];
    postbox_event_t ev = {.aggregate_type = type,
                          .aggregate_id = id,
                          .event_type = "conn.tested.v1",
                          .payload = "{}"};
    if (postbox_enqueue(conn, &ev, event_id, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL: enqueue %s: %s\n", what, err);
        return 0;
    }
    return 1;
}

static int many_connections(const char *dsn)
{
    PGconn *conns[NCONNS];
    int failures = 0;
    for (int i = 0; i < NCONNS; i++) {
        conns[i] = PQconnectdb(dsn);
        if (PQstatus(conns[i]) != CONNECTION_OK) {
            fprintf(stderr, "connect %d: %s", i, PQerrorMessage(conns[i]));
            return 1;
        }
        if (!exec_ok(conns[i], "BEGIN"))
            return 1;
    }
    char id[32], what[64];
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < NCONNS; i++) {
            snprintf(id, sizeof id, "conn-%d", i);
            snprintf(what, sizeof what, "round %d on connection %d", round + 1, i);
            failures += !enqueue(conns[i], "producer-conns", id, what);
        }
    for (int i = 0; i < NCONNS; i++) {
        if (!exec_ok(conns[i], "COMMIT"))
            failures++;
        PQfinish(conns[i]);
    }
    printf("%d connections: %d failure(s)\n", NCONNS, failures);
    return failures;
}

/* BEGIN; an enqueue; SQL in the transaction when not NULL, then another enqueue; COMMIT. Rolls
 * back after a failure, so that the next case starts clean. Returns the number of failures. */
static int committed(PGconn *conn, const char *id, const char *in_tx_sql, const char *what)
{
    int ok = exec_ok(conn, "BEGIN") && enqueue(conn, "producer-discard", id, what) &&
             (!in_tx_sql || (exec_ok(conn, in_tx_sql) &&
                             enqueue(conn, "producer-discard", id, what))) &&
             exec_ok(conn, "COMMIT");
    if (PQtransactionStatus(conn) != PQTRANS_IDLE)
        exec_ok(conn, "ROLLBACK");
    return !ok;
}

static int discarded_statements(const char *dsn)
{
    PGconn *conn = PQconnectdb(dsn);
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "connect: %s", PQerrorMessage(conn));
        return 1;
    }
    int failures = committed(conn, "d-1", NULL, "before DISCARD ALL");
    failures += !exec_ok(conn, "DISCARD ALL");
    failures += committed(conn, "d-2", NULL, "after DISCARD ALL");
    failures += !exec_ok(conn, "DEALLOCATE ALL");
    /* and DEALLOCATE ALL inside the caller's transaction, between two enqueues */
    failures += committed(conn, "d-3", "DEALLOCATE ALL", "after DEALLOCATE ALL");
    failures += !exec_ok(conn, "DISCARD ALL");
    postbox_event_t batch[2] = {
        {.aggregate_type = "producer-discard", .aggregate_id = "d-4",
         .event_type = "conn.tested.v1", .payload = "{}"},
        {.aggregate_type = "producer-discard", .aggregate_id = "d-4",
         .event_type = "conn.tested.v1", .payload = "{}"},
    };
    char err[512];
    failures += !exec_ok(conn, "BEGIN");
    if (postbox_enqueue_batch(conn, batch, 2, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL: enqueue_batch after DISCARD ALL: %s\n", err);
        failures++;
    }
    failures += !exec_ok(conn, "COMMIT");
    PQfinish(conn);
    printf("DISCARD ALL / DEALLOCATE ALL: %d failure(s)\n", failures);
    return failures;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DSN\n", argv[0]);
        return 2;
    }
    int failures = many_connections(argv[1]);
    failures += discarded_statements(argv[1]);
    printf("%s\n", failures ? "producer_conns FAILED" : "producer_conns passed");
    return failures ? 1 : 0;
}
