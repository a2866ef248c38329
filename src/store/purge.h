/* Retention: deletes published outbox rows and handled inbox rows older than an age, in small
 * batches, each its own short transaction (autocommit), so that the purge never holds many locks
 * or a long transaction (which would hold back vacuum and the relay's own work).
 *
 * Outbox: rows with published_at before the cutoff (walks the partial index
 * outbox_published_at). Inbox: rows received before the cutoff that were processed, or that
 * were never processed and have no postbox.inbox_dead entry (a dead message keeps its inbox row
 * so that a redelivery is not handled again: `postbox dlq --inbox` replays or drops it). Dead
 * letters (postbox.dead_letters, postbox.inbox_dead): rows dead before the cutoff, the age
 * taken per event type from retention rules (store/retention_rules.h) where one matches; once a
 * dead inbox message's entry is gone, its inbox row goes with the next inbox purge. Sequence
 * rows (postbox.aggregate_sequences, postbox.inbox_sequences): those of aggregates idle since the
 * cutoff, on the conditions sql/018 gives (no pending event; no purged number received since).
 *
 * The partitioned layout (sql/020, `postbox init --partition-by`): published history and the
 * dead-letter tables lose whole partitions instead, those whose interval ended before the
 * cutoff (dead letters: before the longest of their ages; none while an age of 0 keeps rows),
 * in the first step; the DELETE then takes only what the partitions cannot: rows of the DEFAULT
 * partition, and dead letters whose type's age is shorter than the longest.
 *
 * Usage: pb_purge_begin fixes the cutoff (now() - older_than on the server's clock), then
 * pb_purge_step deletes one batch per call until *done: callers interleave other work (the
 * relay's janitor samples metrics between batches) or stop between batches. */
#ifndef PB_STORE_PURGE_H
#define PB_STORE_PURGE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "store/retention_rules.h"

#define PB_PURGE_DEFAULT_BATCH 5000

typedef enum pb_purge_target {
    PB_PURGE_OUTBOX = 0,
    PB_PURGE_INBOX,
    PB_PURGE_DEAD_LETTERS, /* the relay's: postbox.dead_letters */
    PB_PURGE_INBOX_DEAD,   /* the consumers': postbox.inbox_dead */
    PB_PURGE_AGGREGATE_SEQUENCES, /* the producers' numbering of idle aggregates (sql/018) */
    PB_PURGE_INBOX_SEQUENCES,     /* the consumers' highest numbers of idle aggregates */
} pb_purge_target_t;

typedef struct pb_purge {
    PGconn *conn; /* borrowed; must be outside any transaction */
    pb_purge_target_t target;
    char cutoff[64];      /* timestamptz text: now() - older_than, on the server's clock */
    char asof[64];        /* now() at the start: dead letters' ages count from it */
    int64_t older_than_ms;
    const pb_retention_rules_t *rules; /* dead letters: per-type ages (borrowed); NULL: none */
    const char *consumer; /* inbox, inbox_sequences: only this consumer's rows (borrowed); NULL:
                          * every consumer */
    int batch;
    uint64_t deleted;      /* rows so far */
    uint64_t batches;      /* statements so far */
    double max_batch_ms;   /* longest batch so far */
    bool partitioned;        /* the table is on the partitioned layout (sql/020) */
    bool partitions_checked; /* partitioned: the old partitions were dropped (first step) */
    uint64_t partitions_dropped;
    bool done;
} pb_purge_t;

/* Fixes the cutoff. older_than_ms >= 0 (0 only for dead letters with rules: the types no rule
 * names are kept); batch 0 means PB_PURGE_DEFAULT_BATCH; rules only for the dead-letter
 * targets (NULL: older_than_ms for every type). */
pb_status_t pb_purge_begin(pb_purge_t *p, PGconn *conn, pb_purge_target_t target,
                           int64_t older_than_ms, const pb_retention_rules_t *rules,
                           const char *consumer, int batch, pb_error_t *err) PB_MUSTCHECK;

/* Deletes one batch (one transaction); sets p->done when fewer than batch rows were left. */
pb_status_t pb_purge_step(pb_purge_t *p, uint64_t *rows, pb_error_t *err) PB_MUSTCHECK;

/* "outbox_published" | "inbox" | "dead_letters" | "inbox_dead" | "aggregate_sequences" |
 * "inbox_sequences" */
const char *pb_purge_table(pb_purge_target_t target);

#endif
