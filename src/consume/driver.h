/* The consume driver: the one loop of `postbox consume`, for every source.
 *
 * take the held messages whose aggregate may go on -> receive fresh ones from the source ->
 * keep back those of held aggregates -> the inbox handles the batch, split over the lanes by
 * aggregate, each lane one transaction -> acknowledge what is settled, hold what failed (and
 * what waits behind it) for its retry.
 * Around it: reconnecting to PostgreSQL (the inbox) and the broker (the source) with backoff,
 * stop (the batch in flight is finished first) and drain, the bounds of what is held (count and
 * bytes), metrics and logs.
 *
 * The inbox is reached through pb_consume_inbox_ops_t, so that unit tests drive the loop with a
 * fake inbox and a fake source (tests/unit/test_consume_driver.c). */
#ifndef PB_CONSUME_DRIVER_H
#define PB_CONSUME_DRIVER_H

#include <signal.h>
#include <stdbool.h>

#include "common/err.h"
#include "config/config.h"
#include "inbox/inbox.h"
#include "source/source.h"

typedef struct pb_consume_inbox_ops {
    /* Connects (and prepares) the database connection of every lane, once, no retry: the
     * driver retries PB_TRANSIENT with backoff. PB_FATAL for what no retry fixes. */
    pb_status_t (*connect)(void *ctx, int n_lanes, pb_error_t *err);
    /* Closes them all (after a lost connection, and at the end). */
    void (*disconnect)(void *ctx);
    /* Handles msgs[0..n) on lane's connection in one transaction: see pb_inbox_handle. Runs on
     * the lane's thread. */
    pb_status_t (*handle)(void *ctx, int lane, const pb_message_t *msgs, const uint8_t *flags,
                          size_t n, pb_inbox_verdict_t *verdicts, pb_inbox_counts_t *counts,
                          pb_error_t *err);
    /* Optional: while lane 0 waits for its database, fn(arg, socket) is called (it reads the
     * broker ahead); see pb_inbox_set_wait. */
    void (*set_wait)(void *ctx, void (*fn)(void *arg, int fd), void *arg);
    /* Optional: where the inbox is, for the start-up log. */
    void (*describe)(void *ctx, char *buf, size_t n);
} pb_consume_inbox_ops_t;

typedef struct pb_consume_setup {
    const pb_config_t *cfg;
    pb_source_t *src; /* borrowed, unconnected */
    const pb_consume_inbox_ops_t *inbox;
    void *inbox_ctx;
    bool drain; /* return once the broker has nothing left for us and nothing is held */
    volatile sig_atomic_t *stop;
} pb_consume_setup_t;

/* Runs until *stop or, with drain, drained. PB_OK on a clean stop, PB_FATAL (err) for an error
 * no retry fixes. */
pb_status_t pb_consume_drive(const pb_consume_setup_t *s, pb_error_t *err) PB_MUSTCHECK;

#endif
