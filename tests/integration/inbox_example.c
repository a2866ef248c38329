/* Example and test of libpostbox's inbox API: a consumer applies each message exactly once.
 * Usage: inbox_example DSN (the postbox schema must exist). Exits 0 when every check holds. */
#include <postbox/postbox.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct deposit {
    const char *account;
    const char *amount;
} deposit_t;

/* The business effect: add an amount to an account balance, on the caller's transaction. */
static int apply_deposit(PGconn *conn, void *arg, char *errbuf, size_t errlen)
{
    const deposit_t *d = arg;
    const char *params[2] = {d->account, d->amount};
    PGresult *res = PQexecParams(conn,
                                 "INSERT INTO inbox_example_balance (account, balance) "
                                 "VALUES ($1, $2::numeric) ON CONFLICT (account) DO UPDATE "
                                 "SET balance = inbox_example_balance.balance + EXCLUDED.balance",
                                 2, NULL, params, NULL, NULL, 0);
    int rc = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : -1;
    if (rc)
        snprintf(errbuf, errlen, "%s", PQresultErrorMessage(res));
    PQclear(res);
    return rc;
}

static int exec_ok(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK;
    if (!ok)
        fprintf(stderr, "%s: %s", sql, PQerrorMessage(conn));
    PQclear(res);
    return ok;
}

static const char *balance(PGconn *conn, const char *account, char *buf, size_t n)
{
    const char *params[1] = {account};
    PGresult *res = PQexecParams(conn, "SELECT balance FROM inbox_example_balance WHERE account = $1",
                                 1, NULL, params, NULL, NULL, 0);
    snprintf(buf, n, "%s", PQntuples(res) == 1 ? PQgetvalue(res, 0, 0) : "none");
    PQclear(res);
    return buf;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL: " __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

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
    int failures = 0;
    char err[512], buf[64];
    if (!exec_ok(conn, "DROP TABLE IF EXISTS inbox_example_balance") ||
        !exec_ok(conn, "CREATE TABLE inbox_example_balance (account text PRIMARY KEY, "
                       "balance numeric NOT NULL CHECK (balance >= 0))") ||
        !exec_ok(conn, "DELETE FROM postbox.inbox WHERE consumer = 'inbox-example'"))
        return 1;

    deposit_t d = {"alice", "10"};
    /* the same message delivered twice: applied once */
    for (int round = 0; round < 2; round++) {
        exec_ok(conn, "BEGIN");
        int rc = postbox_inbox_process(conn, "inbox-example", "msg-1", "deposit.v1", apply_deposit,
                                       &d, err, sizeof err);
        exec_ok(conn, "COMMIT");
        CHECK(rc == (round == 0 ? POSTBOX_INBOX_PROCESSED : POSTBOX_INBOX_DUPLICATE),
              "round %d: got %d (%s)", round, rc, err);
    }
    CHECK(strcmp(balance(conn, "alice", buf, sizeof buf), "10") == 0, "alice has %s, want 10", buf);

    /* a failing handler inside a batch transaction: rolled back alone, the others commit */
    exec_ok(conn, "BEGIN");
    deposit_t bad = {"bob", "-5"}; /* violates the CHECK constraint */
    deposit_t good = {"bob", "7"};
    int r1 = postbox_inbox_process(conn, "inbox-example", "msg-2", "deposit.v1", apply_deposit,
                                   &bad, err, sizeof err);
    printf("failing handler reported: %s\n", err);
    int r2 = postbox_inbox_process(conn, "inbox-example", "msg-3", "deposit.v1", apply_deposit,
                                   &good, err, sizeof err);
    exec_ok(conn, "COMMIT");
    CHECK(r1 == POSTBOX_INBOX_FAILED, "bad deposit: got %d", r1);
    CHECK(r2 == POSTBOX_INBOX_PROCESSED, "good deposit after a failure: got %d (%s)", r2, err);
    CHECK(strcmp(balance(conn, "bob", buf, sizeof buf), "7") == 0, "bob has %s, want 7", buf);

    /* the failed message left no inbox row: a retry runs the handler */
    exec_ok(conn, "BEGIN");
    bad.amount = "1";
    int r3 = postbox_inbox_process(conn, "inbox-example", "msg-2", "deposit.v1", apply_deposit,
                                   &bad, err, sizeof err);
    exec_ok(conn, "COMMIT");
    CHECK(r3 == POSTBOX_INBOX_PROCESSED, "retry of msg-2: got %d (%s)", r3, err);
    CHECK(strcmp(balance(conn, "bob", buf, sizeof buf), "8") == 0, "bob has %s, want 8", buf);

    /* a rolled-back transaction forgets the message: redelivery processes it */
    exec_ok(conn, "BEGIN");
    deposit_t carol = {"carol", "3"};
    postbox_inbox_process(conn, "inbox-example", "msg-4", "deposit.v1", apply_deposit, &carol, err,
                          sizeof err);
    exec_ok(conn, "ROLLBACK");
    exec_ok(conn, "BEGIN");
    int r4 = postbox_inbox_process(conn, "inbox-example", "msg-4", "deposit.v1", apply_deposit,
                                   &carol, err, sizeof err);
    exec_ok(conn, "COMMIT");
    CHECK(r4 == POSTBOX_INBOX_PROCESSED, "msg-4 after rollback: got %d", r4);
    CHECK(strcmp(balance(conn, "carol", buf, sizeof buf), "3") == 0, "carol has %s, want 3", buf);

    /* without a transaction the library refuses */
    int r5 = postbox_inbox_process(conn, "inbox-example", "msg-5", NULL, apply_deposit, &carol,
                                   err, sizeof err);
    CHECK(r5 == POSTBOX_INBOX_FAILED, "outside a transaction: got %d", r5);

    PQfinish(conn);
    printf("%s\n", failures ? "inbox example FAILED" : "inbox example passed");
    return failures ? 1 : 0;
}
