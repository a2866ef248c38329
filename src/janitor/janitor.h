/* The janitor: one background thread with its own PostgreSQL connection that, for the relay or
 * the consumer, samples the outbox for the metrics (backlog, oldest pending age, dead letters:
 * store/stats.h) and runs the periodic retention purge (store/purge.h) one batch at a time,
 * interleaved with the samples; on the partitioned layout it makes the partitions ahead, and a
 * consumer's janitor moves the rows of an inbox migrated online (store/inbox_legacy.h).
 *
 * It never touches the owner's connections or state; it purges only while the process is ready
 * (pb_metrics_ready: connected and owning its work), so a standby relay leaves the purge to the
 * active one. Failures are logged and retried at the next tick; they never stop the owner. */
#ifndef PB_JANITOR_JANITOR_H
#define PB_JANITOR_JANITOR_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "store/purge.h"

/* One table's retention: rows older than retention_ms go (dead letters: per type by rules). */
typedef struct pb_janitor_purge {
    pb_purge_target_t target;
    int64_t retention_ms;              /* 0: none, unless a rule gives an age */
    const pb_retention_rules_t *rules; /* dead letters only (borrowed); NULL: none */
} pb_janitor_purge_t;

#define PB_JANITOR_PURGES_MAX 3

typedef struct pb_janitor_opts {
    const char *dsn;            /* borrowed, must outlive the janitor */
    int64_t sample_interval_ms; /* 0: no sampling */
    pb_janitor_purge_t purges[PB_JANITOR_PURGES_MAX]; /* run one after the other */
    size_t n_purges;
    int64_t purge_interval_ms;  /* between the end of one round of purges and the next */
    const char *consumer;       /* inbox purges: only this consumer's rows (borrowed) */
    bool make_partitions;       /* the partitioned layout's partitions ahead (sql/020): looked
                                 * for at start; on the default layout this alone keeps no
                                 * connection open */
    bool move_inbox_legacy;     /* the consumer's: looks for an online migration of the inbox
                                 * (sql/025) every few seconds and moves its rows; keeps a
                                 * connection open */
} pb_janitor_opts_t;

typedef struct pb_janitor pb_janitor_t;

/* Starts the thread; *out is NULL (and PB_OK) when there is nothing to do. */
pb_status_t pb_janitor_start(const pb_janitor_opts_t *opts, pb_janitor_t **out,
                             pb_error_t *err) PB_MUSTCHECK;

/* Stops the thread (after the statement in flight) and frees it. Accepts NULL. */
void pb_janitor_stop(pb_janitor_t *jan);

#endif
