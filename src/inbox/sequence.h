/* Per-aggregate sequence numbers in the inbox: postbox.inbox_sequences holds, per (consumer,
 * aggregate), the highest sequence number handled (or dead-lettered, or given up waiting for),
 * written in the handler's transaction. With it the inbox tells, for a message carrying header
 * PB_SEQUENCE_HEADER:
 *   at or below the highest one: late (delivered late, a producer whose numbering restarted, a
 *                                forged number before it): handled if its id is new, and
 *                                counted as out of order, unless the retention purge saw its
 *                                number handled (pb_inbox_seq_purged);
 *   the next one:                to be handled (and the one after it in the batch, and so on);
 *   beyond the next one:         when the consumer waits for gaps (its subscription takes every
 *                                event of the aggregate), early: held until the missing ones
 *                                arrive (PB_INBOX_HOLD); otherwise to be handled.
 * Messages without a sequence number or without aggregate_id are not looked at.
 *
 * Used by inbox.c on the connection of one lane; the arrays are per batch. The statements
 * (pb_inbox_seq_*) are in store/inbox_sql.c. */
#ifndef PB_INBOX_SEQUENCE_H
#define PB_INBOX_SEQUENCE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/str.h"
#include "source/source.h"

typedef enum pb_seq_class {
    PB_SEQ_NONE = 0, /* no sequence number (or no aggregate): as without sequences */
    PB_SEQ_NEXT,     /* to be handled: the next of its aggregate if the ones before it succeed */
    PB_SEQ_LATE,     /* at or below the highest handled one: handled if its id is new */
    PB_SEQ_EARLY,    /* beyond the next one while waiting for gaps: expected[i] is missing */
} pb_seq_class_t;

/* Why a message is handled out of its aggregate's order (postbox_consumer_out_of_order_total). */
typedef enum pb_seq_disorder {
    PB_DISORDER_NONE = 0,
    PB_DISORDER_LATE,        /* its number is at or below one handled already */
    PB_DISORDER_GAP_SKIPPED, /* handled without the missing numbers before it (gap_timeout) */
} pb_seq_disorder_t;

/* The order key's type part (aggregate_type, "" when none), and whether m is looked at. */
static inline const char *pb_inbox_seq_type(const pb_message_t *m)
{
    return m->aggregate_type ? m->aggregate_type : "";
}

static inline bool pb_inbox_seq_has(const pb_message_t *m)
{
    return m->sequence > 0 && m->aggregate_id;
}

typedef struct pb_inbox_seq {
    size_t *order;     /* the messages with a sequence number, grouped by aggregate */
    size_t n_order;
    int64_t *base;     /* per message: its aggregate's last handled number before the batch */
    int64_t *expected; /* per message, PB_SEQ_EARLY: the number its aggregate waits for */
    uint8_t *cls;      /* per message: pb_seq_class_t */
    uint8_t *disorder; /* per message: pb_seq_disorder_t */
    uint8_t *purged;   /* per message: its aggregate has numbers the retention purge folded */
    size_t cap;
    bool wait_for_gaps; /* set by the owner: the subscription takes every event of an aggregate */
    pb_buf_t text[4];  /* array literals of a statement's parameters */
} pb_inbox_seq_t;

void pb_inbox_seq_free(pb_inbox_seq_t *sq);

/* Groups msgs[0..n) by aggregate; returns how many carry a sequence number. */
size_t pb_inbox_seq_group(pb_inbox_seq_t *sq, const pb_message_t *msgs, size_t n);

/* For the fast path, after pb_inbox_seq_group: true when every aggregate's numbers in the batch
 * rise (consecutive ones when waiting for gaps) and none is flagged; then *stmt and
 * params[0..4] are the statement and its parameters (after params[0] = consumer) that fail
 * unless each aggregate's highest handled number is the one before its first in the batch
 * (waiting for gaps) or below it (not waiting), and move it to its last. */
bool pb_inbox_seq_fast(pb_inbox_seq_t *sq, const pb_message_t *msgs, const uint8_t *flags,
                       size_t n, const char *consumer, const char **stmt, const char *params[5]);

/* The careful path, after pb_inbox_seq_group, in the batch's transaction: reads (and locks) the
 * aggregates' rows and sets sq->cls, sq->disorder (and base, expected) for every message. A
 * message flagged PB_INBOX_SKIP_GAP is taken as the next one, whatever is missing before it
 * (logged). */
pb_status_t pb_inbox_seq_check(pb_inbox_seq_t *sq, PGconn *conn, const char *consumer,
                               const pb_message_t *msgs, const uint8_t *flags, size_t n,
                               pb_error_t *err) PB_MUSTCHECK;

/* The careful path, after pb_inbox_seq_check: the late messages that the retention purge saw
 * handled (sql/012). In: look[i] for the messages whose id is new to the inbox. Out: look[i]
 * stays true only for a late message whose number is in its aggregate's purged set and which
 * is stamped (pb_message_t.timestamp) no later than an hour after the latest purged row's
 * receipt: a duplicate. A message without a stamp is never one. */
pb_status_t pb_inbox_seq_purged(pb_inbox_seq_t *sq, PGconn *conn, const char *consumer,
                                const pb_message_t *msgs, size_t n, bool *look,
                                pb_error_t *err) PB_MUSTCHECK;

/* After the handlers, in the same transaction: moves each aggregate's last handled number to
 * the highest of its messages with settled[i] (handled, duplicate or dead-lettered). */
pb_status_t pb_inbox_seq_store(pb_inbox_seq_t *sq, PGconn *conn, const char *consumer,
                               const pb_message_t *msgs, size_t n, const bool *settled,
                               pb_error_t *err) PB_MUSTCHECK;

#endif
