/* The janitor: one background thread with its own PostgreSQL connection that, for the relay or
 * the consumer, samples the outbox for the metrics (backlog, oldest pending age, dead letters:
 * store/stats.h) and runs the periodic retention purge (store/purge.h) one batch at a time,
 * interleaved with the samples.
 *
 * It never touches the owner's connections or state; it purges only while the process is ready
 * (pb_metrics_ready: connected and owning its work), so a standby relay leaves the purge to the
 * active one. Failures are logged and retried at the next tick; they never stop the owner. */
#ifndef PB_JANITOR_JANITOR_H
#define PB_JANITOR_JANITOR_H

#include <stdint.h>

#include "common/err.h"
#include "store/purge.h"

typedef struct pb_janitor_opts {
    const char *dsn;            /* borrowed, must outlive the janitor */
    int64_t sample_interval_ms; /* 0: no sampling */
    pb_purge_target_t target;   /* what the purge deletes */
    int64_t retention_ms;       /* 0: no purge */
    int64_t purge_interval_ms;  /* between the end of one purge and the start of the next */
    const char *consumer;       /* inbox purge: only this consumer's rows (borrowed) */
} pb_janitor_opts_t;

typedef struct pb_janitor pb_janitor_t;

/* Starts the thread; *out is NULL (and PB_OK) when there is nothing to do. */
pb_status_t pb_janitor_start(const pb_janitor_opts_t *opts, pb_janitor_t **out,
                             pb_error_t *err) PB_MUSTCHECK;

/* Stops the thread (after the statement in flight) and frees it. Accepts NULL. */
void pb_janitor_stop(pb_janitor_t *jan);

#endif
