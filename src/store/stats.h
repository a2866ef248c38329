/* Cheap figures about the outbox, for the metrics sampler and `postbox status`.
 *
 * Cost stays flat however large the backlog: every probe walks the outbox's primary key (the
 * table holds pending rows only since schema version 4) for at most `cap` entries.
 *   - oldest pending: the first entry of the primary key (ORDER BY id LIMIT 1); its age is
 *     now() - created_at. Ids are assigned at insert, so this is the oldest event give or take
 *     the length of the transactions that wrote it;
 *   - backlog: counted exactly while it is below cap (a bounded index scan: SELECT 1 ... ORDER
 *     BY id LIMIT cap); at or above cap it is the id span max(id) - min(id) + 1 of the pending
 *     rows, two more index probes. The span is an upper bound (published rows and sequence gaps
 *     inside the span count too), precise for the usual large backlog, a relay falling behind,
 *     whose pending rows are the tail of the table. count(*) is never run on the outbox;
 *   - dead letters: bounded count of postbox.dead_letters the same way. */
#ifndef PB_STORE_STATS_H
#define PB_STORE_STATS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

/* Exact counts up to this many rows. */
#define PB_STATS_DEFAULT_CAP 100000

typedef struct pb_outbox_stats {
    int64_t backlog;     /* pending rows (published_at IS NULL) */
    bool backlog_exact;  /* false: the id-span bound */
    int64_t oldest_id;   /* 0 when nothing is pending */
    double oldest_age_s; /* 0 when nothing is pending */
    int64_t retrying;    /* pending rows that failed at least once (bounded like backlog) */
    int64_t dead_letters;
    bool dead_exact;
} pb_outbox_stats_t;

/* One round trip, outside or inside a transaction. */
pb_status_t pb_stats_outbox(PGconn *conn, int64_t cap, pb_outbox_stats_t *out,
                            pb_error_t *err) PB_MUSTCHECK;

#endif
