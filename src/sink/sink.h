/* The sink interface: one broker client per implementation (amqp.c, stdout.c, ...).
 *
 * The relay owns the sink and calls it from its one thread. A sink publishes a whole batch
 * pipelined and reports an outcome per event; it never decides about the database. */
#ifndef PB_SINK_SINK_H
#define PB_SINK_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "common/err.h"
#include "common/event.h"
#include "config/config.h"

typedef struct pb_sink pb_sink_t;

/* A batch handed to a sink: the events in publish order and one result per event. The caller
 * owns all three and keeps them unchanged from send until its await returned. On entry every
 * result the sink is to publish is PB_OUT_UNTRIED; the others (held back by the relay, rejected
 * by check) are left alone. */
typedef struct pb_sink_batch {
    const pb_event_t *events;
    pb_result_t *results;
    size_t n;
} pb_sink_batch_t;

/* What a sink can do beyond the contract (pb_sink_ops_t.caps). */
typedef enum pb_sink_caps {
    /* The broker drops a message whose id (the event id) it stored within a window, so a batch
     * published again after a relay crash is not stored twice (NATS Nats-Msg-Id). */
    PB_SINK_DEDUPS_BY_ID = 1u << 0,
} pb_sink_caps_t;

typedef struct pb_sink_ops {
    const char *name;      /* "amqp", "nats", "stdout": used in logs and metrics */
    unsigned caps;         /* pb_sink_caps_t flags */
    size_t max_in_flight;  /* batches that may be sent before the first is awaited (>= 1; the
                            * relay driver keeps one in flight and overlaps database work) */

    /* Opens the connection and prepares publishing (channel, confirms, exchange). Returns
     * PB_TRANSIENT when the broker cannot be reached (the caller retries with backoff) and
     * PB_FATAL for what a retry cannot fix: refused credentials, a missing exchange that is not
     * to be declared, a bad URL. Called again after send or await reported the connection lost. */
    pb_status_t (*connect)(pb_sink_t *snk, pb_error_t *err);

    /* Publishes every UNTRIED event of the batch, pipelined, without waiting for the broker's
     * acknowledgements. Returns PB_OK when the batch is out (some events may already have an
     * outcome: RETRY or REJECT with a reason) and await must follow; PB_TRANSIENT when the
     * connection is lost (every event without an outcome is then RETRY; await must not be
     * called; the caller connects again before the next batch). */
    pb_status_t (*send)(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err);

    /* Waits for the acknowledgements of a batch sent (in send order when several are in flight)
     * and sets every result of it to PUBLISHED, RETRY or REJECT with a reason. Returns PB_OK
     * when the connection is still usable, PB_TRANSIENT when it was lost (events without a
     * confirm are then RETRY). */
    pb_status_t (*await)(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err);

    /* Optional (may be NULL). Tells, before anything is published, whether an event can never
     * be published by this sink (too large, routing key too long): then fills result with
     * PB_OUT_REJECT and a reason and returns false. The relay calls it once per event and
     * dead-letters what it refuses; send does not repeat it. */
    bool (*check)(pb_sink_t *snk, const pb_event_t *event, pb_result_t *result);

    /* Sends heartbeats / notices a dead connection while the relay is idle. Cheap. */
    pb_status_t (*idle)(pb_sink_t *snk, pb_error_t *err);

    /* Closes the connection (if any) and frees the sink. Accepts NULL. */
    void (*free)(pb_sink_t *snk);
} pb_sink_ops_t;

struct pb_ce;

/* Every implementation embeds this header first in its own struct. */
struct pb_sink {
    const pb_sink_ops_t *ops;
    const pb_config_t *cfg; /* borrowed; outlives the sink */
    struct pb_ce *ce;       /* CloudEvents binary content mode (<sink>.cloudevents = binary;
                             * sink/cloudevents.h), NULL when off; owned by the sink */
};

/* Sets a result's outcome and reason (NULL: none); the reason is cut to fit. */
void pb_result_set(pb_result_t *r, pb_outcome_t outcome, const char *reason);
void pb_result_setf(pb_result_t *r, pb_outcome_t outcome, const char *fmt, ...) PB_PRINTF(3, 4);

/* Creates the sink named by cfg->relay_sink, unconnected. Fails only on configuration errors. */
pb_status_t pb_sink_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err) PB_MUSTCHECK;

/* Readies one event for the sink, once, before its batch is sent: parses its JSON headers into
 * ev->header_obj (what every sink reads), checks that it makes a CloudEvent when the sink sends
 * CloudEvents, and runs the sink's check. Returns false with result set to PB_OUT_REJECT and the
 * reason when the event can never be published (headers that are not a JSON object, too large,
 * unroutable). */
bool pb_sink_prepare(pb_sink_t *snk, pb_event_t *ev, pb_result_t *result);

/* Releases what pb_sink_prepare attached to the event (accepts an event never prepared). */
void pb_sink_release(pb_event_t *ev);

/* One of an event's own headers (its JSON headers), as pb_header_next gives them to a sink. */
typedef struct pb_header {
    const char *key;            /* not NUL-terminated in general: key[klen] is readable */
    size_t klen;
    const char *val;            /* a string value's bytes (val[vlen] readable), NULL when the
                                 * value is not a string */
    size_t vlen;
    const struct json_t *json;  /* the value, when the headers were parsed into a tree (not
                                 * flat); always set for a value that is not a string */
} pb_header_t;

typedef struct pb_header_iter {
    const pb_event_t *ev;
    size_t pos;                 /* flat: offset into ev->headers */
    void *jit;                  /* parsed: the jansson iterator */
} pb_header_iter_t;

/* Iterates the headers of a prepared event in their order, whichever way pb_sink_prepare kept
 * them: for (pb_header_iter_init(&it, ev); pb_header_next(&it, &h);) ... */
void pb_header_iter_init(pb_header_iter_t *it, const pb_event_t *ev);
bool pb_header_next(pb_header_iter_t *it, pb_header_t *h);

/* How many headers a prepared event has. */
size_t pb_header_count(const pb_event_t *ev);

/* Whether h is named `name` (exactly). */
static inline bool pb_header_is(const pb_header_t *h, const char *name)
{
    return strlen(name) == h->klen && memcmp(h->key, name, h->klen) == 0;
}

/* The string header `key` of a prepared event: *val and *len, false when it has none or it is
 * not a string. */
bool pb_header_string(const pb_event_t *ev, const char *key, const char **val, size_t *len);

/* Publishes a batch and waits for it: send, then await when send returned PB_OK. */
pb_status_t pb_sink_publish(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err) PB_MUSTCHECK;

/* A sink's constructor; one per implementation file, listed in sink.c's table. */
typedef pb_status_t (*pb_sink_new_fn)(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err);

pb_status_t pb_sink_amqp_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_sink_nats_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_sink_redis_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_sink_kafka_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_sink_stdout_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err) PB_MUSTCHECK;

static inline void pb_sink_free(pb_sink_t *snk)
{
    if (snk)
        snk->ops->free(snk);
}

#endif
