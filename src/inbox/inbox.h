/* The inbox writer of `postbox consume`: handles a batch of messages in one transaction.
 *
 * Fast path, for a batch of first deliveries that all have an id and a handler: one pipeline,
 * one round trip: BEGIN, the inbox rows of the whole batch in one INSERT that fails unless every
 * row is new, each message's SQL handler, COMMIT. If anything fails, nothing is committed and the
 * batch goes the careful way: the INSERT ... ON CONFLICT DO NOTHING tells the new messages from
 * the duplicates, then the handlers of the new ones follow, pipelined. Handlers run without
 * savepoints while nothing fails; a failure makes the batch run again with a savepoint around
 * each handler, so that only the failing one is undone. A failing handler is rolled back to its
 * savepoint and recorded in inbox_failures; after max_attempts the message moves to inbox_dead.
 * The caller commits nothing: pb_inbox_handle commits, and only then may the caller acknowledge
 * to the broker. */
#ifndef PB_INBOX_INBOX_H
#define PB_INBOX_INBOX_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/str.h"
#include "config/config.h"
#include "inbox/disorder.h"
#include "inbox/screen.h"
#include "inbox/sequence.h"
#include "otlp/traceparent.h"
#include "source/source.h"

typedef enum pb_inbox_action {
    PB_INBOX_DONE = 0,  /* handled or a duplicate: settled done */
    PB_INBOX_DEAD,      /* moved to postbox.inbox_dead: settled dead */
    PB_INBOX_REQUEUE,   /* handler failed, will be tried again after delay_ms */
    PB_INBOX_HOLD,      /* not handled (nothing of it committed): an earlier message of its
                         * aggregate failed in this batch, or (expected > 0) the aggregate's
                         * sequence number `expected` has not been handled yet */
} pb_inbox_action_t;

typedef struct pb_inbox_verdict {
    pb_inbox_action_t action;
    int64_t delay_ms; /* REQUEUE: when to try it again */
    int64_t expected; /* HOLD: the sequence number its aggregate waits for, 0 if none */
} pb_inbox_verdict_t;

/* Whether v settles its message (done or dead), rather than keeping it for later. */
static inline bool pb_inbox_settles(const pb_inbox_verdict_t *v)
{
    return v->action == PB_INBOX_DONE || v->action == PB_INBOX_DEAD;
}

/* Per-message flags of pb_inbox_handle. */
#define PB_INBOX_SKIP_GAP 1 /* the missing sequence numbers before this message are given up */

/* True when a and b belong to one aggregate (both have an aggregate_id): the messages of one
 * aggregate are handled in their order, a failed one holds back the later ones. */
bool pb_inbox_same_aggregate(const pb_message_t *a, const pb_message_t *b);

typedef struct pb_inbox_counts {
    uint64_t processed;  /* handler ran and committed */
    uint64_t duplicates; /* already in the inbox: acknowledged without running the handler */
    uint64_t failed;     /* handler failures (each retried or dead-lettered) */
    uint64_t dead;       /* moved to inbox_dead */
    uint64_t late;       /* handled with a sequence number at or below one handled already */
    uint64_t gap_skipped; /* handled without the missing sequence numbers before it */
} pb_inbox_counts_t;

typedef struct pb_inbox {
    PGconn *conn; /* borrowed */
    const pb_config_t *cfg;
    size_t n_handlers;
    char **handler_types; /* message type per handler, NULL for the default one */
    char (*handler_names)[32]; /* prepared statement per handler */
    pb_buf_t scratch;     /* array literals, metadata JSON */
    int *handler_of;      /* per message in the batch: handler index, -1 none */
    int *state;           /* per message: internal progress */
    char (*errors)[256];  /* per message: failure text */
    bool *settled;        /* per message: acknowledged (its sequence number is done with) */
    size_t cap;
    pb_inbox_seq_t seq;   /* sequence numbers of the batch */
    const char *seq_stmt;      /* the fast path's advance */
    const char *seq_params[5];
    pb_disorder_t disorder;    /* out-of-order warnings, once a minute per aggregate */
    pb_screen_t screen;        /* the batch as PostgreSQL can take it */
    /* The trace context the open transaction holds (send_message): when known, a message
     * with the same one (most often the next event of the same producer transaction) sends
     * none; unknown after a rollback to a savepoint. "" for none. */
    bool trace_known;
    char trace_parent[128]; /* version 00 has 55 characters; a longer one stays unknown */
    char trace_state[PB_TRACESTATE_MAX + 1];
    int careful_batches; /* how many more batches run with a savepoint per message */
    int slow_batches;    /* how many more batches skip the fast path (it met duplicates) */
    void (*wait_fn)(void *arg, int pg_fd); /* see pb_inbox_set_wait */
    void *wait_arg;
} pb_inbox_t;

/* Prepares statements on conn (call after every reconnect). Fails when a handler's SQL does not
 * prepare (a clear error naming the message type). */
pb_status_t pb_inbox_init(pb_inbox_t *ib, PGconn *conn, const pb_config_t *cfg,
                          pb_error_t *err) PB_MUSTCHECK;
void pb_inbox_free(pb_inbox_t *ib);

/* While the fast path waits for PostgreSQL, fn(arg, socket of conn) is called instead of
 * sleeping; it may do other work and returns once the socket may be readable (spurious returns
 * are fine). Call after pb_inbox_init; fn runs on the thread calling pb_inbox_handle. */
static inline void pb_inbox_set_wait(pb_inbox_t *ib, void (*fn)(void *arg, int pg_fd), void *arg)
{
    ib->wait_fn = fn;
    ib->wait_arg = arg;
}

/* Handles msgs[0..n) in one transaction and commits. verdicts[i] says what to tell the broker
 * about msgs[i] once this returned PB_OK. On an error nothing was committed: acknowledge nothing
 * (PB_TRANSIENT: the connection is gone, reconnect). The messages of one aggregate must come in
 * their order; a message of an aggregate whose earlier message fails in this batch is not run
 * (PB_INBOX_HOLD). flags (NULL: none) holds PB_INBOX_* flags per message. */
pb_status_t pb_inbox_handle(pb_inbox_t *ib, const pb_message_t *msgs, const uint8_t *flags, size_t n,
                            pb_inbox_verdict_t *verdicts, pb_inbox_counts_t *counts,
                            pb_error_t *err) PB_MUSTCHECK;

#endif
