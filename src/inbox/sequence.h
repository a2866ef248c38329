/* Per-aggregate sequence numbers in the inbox: postbox.inbox_sequences holds, per (consumer,
 * aggregate), the sequence number of the last message handled (or dead-lettered, or given up
 * waiting for), written in the handler's transaction. With it the inbox tells, for a message
 * carrying header PB_SEQUENCE_HEADER:
 *   at or below the last one:  a duplicate (acknowledged without running the handler);
 *   the next one:              to be handled (and the one after it in the batch, and so on);
 *   beyond the next one:       early: held until the missing ones arrive (PB_INBOX_HOLD).
 * Messages without a sequence number or without aggregate_id are not looked at.
 *
 * Used by inbox.c on the connection of one lane; the arrays are per batch. */
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
    PB_SEQ_DUP,      /* at or below the last handled one */
    PB_SEQ_EARLY,    /* beyond the next one: expected[i] is missing */
} pb_seq_class_t;

typedef struct pb_inbox_seq {
    size_t *order;     /* the messages with a sequence number, grouped by aggregate */
    size_t n_order;
    int64_t *base;     /* per message: its aggregate's last handled number before the batch */
    int64_t *expected; /* per message, PB_SEQ_EARLY: the number its aggregate waits for */
    uint8_t *cls;      /* per message: pb_seq_class_t */
    size_t cap;
    pb_buf_t text[4];  /* array literals of a statement's parameters */
} pb_inbox_seq_t;

/* Prepares the statements on conn (after every reconnect). */
pb_status_t pb_inbox_seq_prepare(PGconn *conn, pb_error_t *err) PB_MUSTCHECK;
void pb_inbox_seq_free(pb_inbox_seq_t *sq);

/* Groups msgs[0..n) by aggregate; returns how many carry a sequence number. */
size_t pb_inbox_seq_group(pb_inbox_seq_t *sq, const pb_message_t *msgs, size_t n);

/* For the fast path, after pb_inbox_seq_group: true when every aggregate's numbers in the batch
 * are consecutive and none is flagged; then params[0..4] are the parameters of the statement
 * "pb_inbox_seq_advance" (after params[0] = consumer), which fails unless each aggregate's last
 * handled number is the one before its first in the batch, and moves it to its last. */
bool pb_inbox_seq_fast(pb_inbox_seq_t *sq, const pb_message_t *msgs, const uint8_t *flags,
                       size_t n, const char *consumer, const char *params[5]);

/* The careful path, after pb_inbox_seq_group, in the batch's transaction: reads (and locks) the
 * aggregates' rows and sets sq->cls (and base, expected) for every message. A message flagged
 * PB_INBOX_SKIP_GAP is taken as the next one, whatever is missing before it (logged). */
pb_status_t pb_inbox_seq_check(pb_inbox_seq_t *sq, PGconn *conn, const char *consumer,
                               const pb_message_t *msgs, const uint8_t *flags, size_t n,
                               pb_error_t *err) PB_MUSTCHECK;

/* After the handlers, in the same transaction: moves each aggregate's last handled number to
 * the highest of its messages with settled[i] (handled, duplicate or dead-lettered). */
pb_status_t pb_inbox_seq_store(pb_inbox_seq_t *sq, PGconn *conn, const char *consumer,
                               const pb_message_t *msgs, size_t n, const bool *settled,
                               pb_error_t *err) PB_MUSTCHECK;

#endif
