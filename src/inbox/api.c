/* libpostbox inbox API: process one message exactly once on the caller's connection. */
#include "postbox/postbox.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "common/err.h"
#include "store/inbox_sql.h"

static bool run(PGconn *conn, const char *sql, char *errbuf, size_t errlen)
{
    PGresult *res = PQexec(conn, sql);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok)
        pb_errbuf_set(errbuf, errlen, "%s: %s", sql, PQresultErrorMessage(res));
    PQclear(res);
    return ok;
}

int postbox_inbox_process(PGconn *conn, const char *consumer, const char *message_id,
                          const char *message_type, postbox_inbox_handler_fn handler, void *arg,
                          char *errbuf, size_t errlen)
{
    if (!conn || PQtransactionStatus(conn) != PQTRANS_INTRANS) {
        pb_errbuf_set(errbuf, errlen,
                      "postbox_inbox_process: no usable transaction open on this connection (BEGIN "
                      "first, so the inbox row commits with the handler's work)");
        return POSTBOX_INBOX_FAILED;
    }
    if (!consumer || !*consumer || !message_id || !*message_id || !handler) {
        pb_errbuf_set(errbuf, errlen, "postbox_inbox_process: consumer, message_id and handler are required");
        return POSTBOX_INBOX_FAILED;
    }
    if (!run(conn, "SAVEPOINT postbox_inbox", errbuf, errlen))
        return POSTBOX_INBOX_FAILED;
    const char *params[3] = {consumer, message_id, message_type};
    PGresult *res = PQexecParams(conn, PB_INBOX_CLAIM_ONE_SQL, 3, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        pb_errbuf_set(errbuf, errlen, "postbox_inbox_process: inbox write: %s",
                      PQresultErrorMessage(res));
        PQclear(res);
        run(conn, "ROLLBACK TO SAVEPOINT postbox_inbox", NULL, 0);
        return POSTBOX_INBOX_FAILED;
    }
    bool fresh = PQntuples(res) == 1;
    PQclear(res);
    if (!fresh)
        return run(conn, "RELEASE SAVEPOINT postbox_inbox", errbuf, errlen)
                   ? POSTBOX_INBOX_DUPLICATE
                   : POSTBOX_INBOX_FAILED;
    char herr[512] = "";
    if (handler(conn, arg, herr, sizeof herr) != 0) {
        pb_errbuf_set(errbuf, errlen, "handler failed: %s", *herr ? herr : "no reason given");
        /* undo the handler's work and the inbox row; the caller's transaction goes on */
        if (!run(conn, "ROLLBACK TO SAVEPOINT postbox_inbox", NULL, 0) ||
            !run(conn, "RELEASE SAVEPOINT postbox_inbox", NULL, 0))
            pb_errbuf_set(errbuf, errlen, "handler failed (%s) and the rollback to its savepoint "
                                          "failed: roll the transaction back",
                          *herr ? herr : "no reason given");
        return POSTBOX_INBOX_FAILED;
    }
    return run(conn, "RELEASE SAVEPOINT postbox_inbox", errbuf, errlen) ? POSTBOX_INBOX_PROCESSED
                                                                        : POSTBOX_INBOX_FAILED;
}
