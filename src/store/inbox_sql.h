/* The inbox's SQL: the statements of src/inbox/ (named pb_inbox_*, prepared on each consumer
 * connection) and the one of the library's postbox_inbox_process. */
#ifndef PB_STORE_INBOX_SQL_H
#define PB_STORE_INBOX_SQL_H

#include <libpq-fe.h>

#include "common/err.h"
#include "store/pg.h"

/* Prepares every pb_inbox_* statement on conn (after every reconnect). */
pb_status_t pb_inbox_sql_prepare(PGconn *conn, pb_error_t *err) PB_MUSTCHECK;

/* postbox_inbox_process: $1 consumer, $2 message id, $3 type; a row when the id is new. */
#define PB_INBOX_CLAIM_ONE_SQL                                                                 \
    "INSERT INTO postbox.inbox (consumer, message_id, message_type, processed_at) "            \
    "VALUES ($1, $2, $3, now()) ON CONFLICT DO NOTHING RETURNING 1"

#endif
