/* Cheap figures about the outbox, for the metrics sampler and `postbox status`.
 *
 * Cost stays flat however large the backlog: every probe walks the outbox's primary key (the
 * table holds pending rows only since schema version 4) for at most `cap` entries.
 *   - oldest pending: of the events that are due, the one waiting longest. Events not due yet
 *     (delayed by their available_at, or set aside behind an earlier event of their aggregate
 *     without having failed themselves) are no lag, so it is the older of the first ready row
 *     (outbox_ready, ORDER BY id LIMIT 1), aged since its commit or its available_at, and the
 *     first failed row among those the retrying count reads, and the waiting row longest past
 *     its due time (outbox_waiting_due: a delayed event the relay has not taken yet), aged since
 *     that time. Ids are assigned at insert, so the first ready row is the oldest give or take
 *     the length of the transactions that wrote it;
 *   - backlog: counted exactly while it is below cap (a bounded index scan: SELECT 1 ... ORDER
 *     BY id LIMIT cap); at or above cap it is the id span max(id) - min(id) + 1 of the pending
 *     rows, two more index probes. The span is an upper bound (published rows and sequence gaps
 *     inside the span count too), precise for the usual large backlog, a relay falling behind,
 *     whose pending rows are the tail of the table. count(*) is never run on the outbox;
 *   - dead letters: bounded count of postbox.dead_letters the same way;
 *   - delayed: bounded count of the waiting rows whose time is to come and that never failed
 *     (outbox_waiting_due from now() on); cdc_deferred: bounded count of postbox.cdc_deferred. */
#ifndef PB_STORE_STATS_H
#define PB_STORE_STATS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Exact counts up to this many rows. */
#define PB_STATS_DEFAULT_CAP 100000

typedef struct pb_outbox_stats {
    int64_t backlog;     /* pending rows (published_at IS NULL) */
    bool backlog_exact;  /* false: the id-span bound */
    int64_t oldest_id;   /* of the oldest pending event that is due; 0 when none */
    double oldest_age_s; /* how long it has waited since its commit or its due time; 0: none */
    int64_t retrying;    /* pending rows that failed at least once (bounded like backlog) */
    int64_t dead_letters;
    bool dead_exact;
    int64_t delayed;      /* pending rows not due yet, never failed (bounded like backlog) */
    int64_t cdc_deferred; /* rows of postbox.cdc_deferred (bounded like backlog) */
} pb_outbox_stats_t;

/* One round trip, outside or inside a transaction. */
pb_status_t pb_stats_outbox(PGconn *conn, int64_t cap, pb_outbox_stats_t *out,
                            pb_error_t *err) PB_MUSTCHECK;

/* The inbox per consumer, exact (one pass over postbox.inbox, postbox.inbox_failures and
 * postbox.inbox_dead, which retention keeps bounded), for `postbox status`. */
typedef struct pb_inbox_stats {
    char *consumer;
    int64_t processed;   /* inbox rows handled */
    int64_t unprocessed; /* inbox rows not handled (claimed, or kept for a dead message) */
    int64_t retrying;    /* postbox.inbox_failures entries */
    int64_t dead;        /* postbox.inbox_dead entries */
    bool has_idle;       /* false: the consumer has no inbox row (only failures or dead letters) */
    double idle_s;       /* age of its newest inbox row */
} pb_inbox_stats_t;

/* *out: *n entries ordered by consumer, freed with pb_stats_inbox_free (NULL, 0 on failure). */
pb_status_t pb_stats_inbox(PGconn *conn, pb_inbox_stats_t **out, size_t *n,
                           pb_error_t *err) PB_MUSTCHECK;
void pb_stats_inbox_free(pb_inbox_stats_t *stats, size_t n);

#endif
