/* The capture interface: how the relay driver (driver.h) gets batches of committed events and
 * settles them. Two implementations: poll (capture_poll.c: claims from postbox.outbox) and cdc
 * (capture_cdc.c: the logical replication stream).
 *
 * A capture knows only how to produce the next batch and how to record or confirm its outcomes;
 * the driver owns the loop, the sink, the retry / dead-letter / hold-back decision, metrics and
 * logs. Per batch the driver calls next, then (while the sink publishes) overlap once, then
 * settle once. @thread the driver's thread only. */
#ifndef PB_RELAY_CAPTURE_H
#define PB_RELAY_CAPTURE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/event.h"
#include "config/config.h"
#include "store/outbox.h"

typedef struct pb_capture pb_capture_t;

/* A batch from next: the events to publish, in order, owned by the capture until settle. */
typedef struct pb_capture_batch {
    pb_event_t *events;    /* the driver may change attempts (in-place retries) */
    size_t n;
    /* claimed while the batches before it were still unsettled: the driver holds its events
     * back behind their failures (holdback.h); false when every earlier outcome is committed */
    bool behind_unsettled;
    /* The driver defers (PB_OUT_DEFERRED) an event whose available_at is still to come by the
     * relay's clock. False when the capture hands out due events only (a claim decided that by
     * the database's clock: the poll capture, the cdc capture's set-aside events). */
    bool check_due;
    /* NULL, or per event: it comes after an event of its aggregate that the capture set aside
     * in an earlier batch and has not published yet (cdc): the driver defers it too. */
    const bool *behind_deferred;
    /* the capture took as many events as one batch may hold (relay.batch_size, or
     * relay.batch_bytes for the poll capture): more may be waiting */
    bool full;
} pb_capture_batch_t;

/* Called by wait while it waits for work; returns false to end the wait early. */
typedef bool (*pb_capture_tick_fn)(void *arg);

typedef struct pb_capture_ops {
    const char *name; /* "poll", "cdc" */
    /* The capture cannot leave a failed event behind and go on (a stream): the driver retries it
     * in place until it is published or dead, keeping the capture alive with keepalive. */
    bool retries_in_place;

    /* Connects to PostgreSQL (and whatever the capture needs: shard locks, the stream), waiting
     * with backoff or standing by as long as it takes, unless told to stop. PB_FATAL for what
     * no retry can fix. */
    pb_status_t (*connect)(pb_capture_t *cap, pb_error_t *err);
    bool (*connected)(const pb_capture_t *cap);
    /* Drops every connection; what was not settled is found again after the next connect. */
    void (*disconnect)(pb_capture_t *cap);

    /* Whether a batch is in hand (read or claimed ahead), so that next returns it at once. */
    bool (*ready)(const pb_capture_t *cap);
    /* The next batch (b->n == 0: nothing now, after waiting at most a short while). */
    pb_status_t (*next)(pb_capture_t *cap, pb_capture_batch_t *b, pb_error_t *err);
    /* Work that overlaps the broker's acknowledgements of the batch (poll: the settle of the
     * batch before and the claim of the next; cdc: decoding the next batch). */
    pb_status_t (*overlap)(pb_capture_t *cap, pb_error_t *err);
    /* The outcomes of the batch from next: PUBLISHED, HELD (left as it is), RETRY with
     * plans[i].retry_delay_ms, DEFERRED (to be published once due, after the earlier set-aside
     * events of its aggregate), or dead (plans[i].dead, with the reason; EXPIRED is always
     * dead). With retries_in_place every outcome is final (PUBLISHED, DEFERRED or dead). */
    pb_status_t (*settle)(pb_capture_t *cap, const pb_result_t *results,
                          const pb_settle_plan_t *plans, pb_error_t *err);

    /* Nothing came: waits for work up to relay.poll_interval (or returns at once when next
     * waits by itself), calling tick now and then. */
    pb_status_t (*wait)(pb_capture_t *cap, pb_capture_tick_fn tick, void *arg, pb_error_t *err);
    /* Keeps the source alive while the driver backs off between in-place retries. */
    pb_status_t (*keepalive)(pb_capture_t *cap, pb_error_t *err);
    /* Between batches: periodic work (shard balance, slot lag). */
    pb_status_t (*tick)(pb_capture_t *cap, pb_error_t *err);
    /* With nothing in hand: whether every event committed so far has been relayed. */
    pb_status_t (*drained)(pb_capture_t *cap, bool *done, pb_error_t *err);
    /* Writes every outcome in hand and lets go of the rest (stop, broker lost). */
    pb_status_t (*finish)(pb_capture_t *cap, pb_error_t *err);
    void (*free)(pb_capture_t *cap);
} pb_capture_ops_t;

/* Every implementation embeds this header first. */
struct pb_capture {
    const pb_capture_ops_t *ops;
    const pb_config_t *cfg;       /* borrowed */
    volatile sig_atomic_t *stop;  /* borrowed: set by a signal */
};

pb_status_t pb_capture_poll_new(const pb_config_t *cfg, volatile sig_atomic_t *stop,
                                pb_capture_t **out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_capture_cdc_new(const pb_config_t *cfg, volatile sig_atomic_t *stop,
                               pb_capture_t **out, pb_error_t *err) PB_MUSTCHECK;

/* The cdc capture's last slot lag measured was over cdc.max_slot_lag or cdc.max_slot_lag_age
 * (slot_guard.h); then why says which, by how much. */
bool pb_capture_cdc_over_limit(const pb_capture_t *cap, char *why, size_t n);
/* The batch with the driver is given up unsettled (the driver has let go of it: nothing of it is
 * confirmed, so the stream or the outbox has all of it again); then finish: the marks of the
 * batches before are written and their position confirmed, and the stream is closed. For the
 * fallback while a failed batch is retried in place. */
pb_status_t pb_capture_cdc_give_up(pb_capture_t *cap, pb_error_t *err) PB_MUSTCHECK;
/* The cdc capture's last check of its slot found it missing, lost or replaced: its PB_FATAL. */
bool pb_capture_cdc_slot_gone(const pb_capture_t *cap);
/* cdc with its poll fallback (capture_fallback.c, cdc.on_excess_lag = poll): owns both. */
pb_status_t pb_capture_fallback_new(const pb_config_t *cfg, volatile sig_atomic_t *stop,
                                    pb_capture_t **out, pb_error_t *err) PB_MUSTCHECK;

static inline void pb_capture_free(pb_capture_t *cap)
{
    if (cap)
        cap->ops->free(cap);
}


#endif
