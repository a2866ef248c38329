/* The inbox writer of `postbox consume`: handles a batch of messages in one transaction.
 *
 * The inbox rows of the whole batch go in with one INSERT ... ON CONFLICT DO NOTHING; for every
 * message whose row is new the SQL handler for its type follows, pipelined (one round trip for
 * the whole batch). Handlers run without savepoints while nothing fails; a failure makes the
 * batch run again with a savepoint around each handler, so that only the failing one is undone. A failing handler is rolled back to its savepoint and recorded in inbox_failures; after
 * max_attempts the message moves to inbox_dead. The caller commits nothing: pb_inbox_handle
 * commits, and only then may the caller acknowledge to the broker. */
#ifndef PB_INBOX_INBOX_H
#define PB_INBOX_INBOX_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/str.h"
#include "config/config.h"
#include "source/source.h"

typedef enum pb_inbox_action {
    PB_INBOX_ACK = 0,   /* handled, duplicate or dead-lettered: acknowledge */
    PB_INBOX_REQUEUE,   /* handler failed, will be tried again after delay_ms */
} pb_inbox_action_t;

typedef struct pb_inbox_verdict {
    pb_inbox_action_t action;
    int64_t delay_ms; /* REQUEUE: when to give it back to the broker */
} pb_inbox_verdict_t;

typedef struct pb_inbox_counts {
    uint64_t processed;  /* handler ran and committed */
    uint64_t duplicates; /* already in the inbox: acknowledged without running the handler */
    uint64_t failed;     /* handler failures (each retried or dead-lettered) */
    uint64_t dead;       /* moved to inbox_dead */
} pb_inbox_counts_t;

typedef struct pb_inbox {
    PGconn *conn; /* borrowed */
    const pb_config_t *cfg;
    size_t n_handlers;
    char **handler_types; /* message type per handler, NULL for the default one */
    pb_buf_t scratch;     /* array literals, metadata JSON */
    int *handler_of;      /* per message in the batch: handler index, -1 none */
    int *state;           /* per message: internal progress */
    char (*errors)[256];  /* per message: failure text */
    size_t cap;
    int careful_batches; /* how many more batches run with a savepoint per message */
} pb_inbox_t;

/* Prepares statements on conn (call after every reconnect). Fails when a handler's SQL does not
 * prepare (a clear error naming the message type). */
pb_status_t pb_inbox_init(pb_inbox_t *ib, PGconn *conn, const pb_config_t *cfg,
                          pb_error_t *err) PB_MUSTCHECK;
void pb_inbox_free(pb_inbox_t *ib);

/* Handles msgs[0..n) in one transaction and commits. verdicts[i] says what to tell the broker
 * about msgs[i] once this returned PB_OK. On an error nothing was committed: acknowledge nothing
 * (PB_TRANSIENT: the connection is gone, reconnect). */
pb_status_t pb_inbox_handle(pb_inbox_t *ib, const pb_message_t *msgs, size_t n,
                            pb_inbox_verdict_t *verdicts, pb_inbox_counts_t *counts,
                            pb_error_t *err) PB_MUSTCHECK;

#endif
