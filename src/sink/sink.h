/* The sink interface: one broker client per implementation (amqp.c, stdout.c, ...).
 *
 * The relay owns the sink and calls it from its one thread. A sink publishes a whole batch
 * pipelined and reports an outcome per event; it never decides about the database. */
#ifndef PB_SINK_SINK_H
#define PB_SINK_SINK_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/event.h"
#include "config/config.h"

typedef struct pb_sink pb_sink_t;

typedef struct pb_sink_ops {
    const char *name; /* "amqp", "stdout": used in logs and metrics */

    /* Opens the connection and prepares publishing (channel, confirms, exchange). Returns
     * PB_TRANSIENT when the broker cannot be reached (the caller retries with backoff) and
     * PB_FATAL for what a retry cannot fix: refused credentials, a missing exchange that is not
     * to be declared, a bad URL. Called again after a publish reported the connection lost. */
    pb_status_t (*connect)(pb_sink_t *snk, pb_error_t *err);

    /* Publishes events[i] for every i whose results[i].outcome is PB_OUT_UNTRIED on entry
     * (others are left alone: the relay holds them back), pipelined, then waits for every
     * confirm. Sets results[i] to PUBLISHED, RETRY or REJECT with a reason. Returns PB_OK when
     * the connection is still usable, PB_TRANSIENT when it was lost (events without a confirm
     * are then RETRY; the relay calls connect again before the next batch). */
    pb_status_t (*publish)(pb_sink_t *snk, const pb_event_t *events, size_t n,
                           pb_result_t *results, pb_error_t *err);

    /* Optional pair (both NULL, or both set): publish split in two, so that the caller can do
     * other work while the broker acknowledges. send publishes like publish but returns without
     * waiting; await (called once after every send that returned PB_OK) waits for the
     * acknowledgements and sets the results, returning what publish would have. */
    pb_status_t (*send)(pb_sink_t *snk, const pb_event_t *events, size_t n, pb_result_t *results,
                        pb_error_t *err);
    pb_status_t (*await)(pb_sink_t *snk, pb_error_t *err);

    /* Optional (may be NULL). Tells, before anything is published, whether an event can never
     * be published by this sink (too large, routing key too long): then fills result with
     * PB_OUT_REJECT and a reason and returns false. The relay then holds back the later events of
     * the same aggregate in the batch, so the order survives a dead letter. */
    bool (*check)(pb_sink_t *snk, const pb_event_t *event, pb_result_t *result);

    /* Sends heartbeats / notices a dead connection while the relay is idle. Cheap. */
    pb_status_t (*idle)(pb_sink_t *snk, pb_error_t *err);

    /* Closes the connection (if any) and frees the sink. Accepts NULL. */
    void (*free)(pb_sink_t *snk);
} pb_sink_ops_t;

/* Every implementation embeds this header first in its own struct. */
struct pb_sink {
    const pb_sink_ops_t *ops;
    const pb_config_t *cfg; /* borrowed; outlives the sink */
};

/* Sets a result's outcome and reason (NULL: none); the reason is cut to fit. */
void pb_result_set(pb_result_t *r, pb_outcome_t outcome, const char *reason);
void pb_result_setf(pb_result_t *r, pb_outcome_t outcome, const char *fmt, ...) PB_PRINTF(3, 4);

/* Creates the sink named by cfg->relay_sink, unconnected. Fails only on configuration errors. */
pb_status_t pb_sink_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err) PB_MUSTCHECK;

/* Constructors, one per implementation file. */
pb_status_t pb_sink_amqp_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_sink_nats_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_sink_stdout_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err) PB_MUSTCHECK;

static inline void pb_sink_free(pb_sink_t *snk)
{
    if (snk)
        snk->ops->free(snk);
}

#endif
