/* The source interface: the consuming side of a broker (amqp.c, nats.c, redis.c, kafka.c).
 *
 * The consumer owns the source and calls it from its one thread. A source hands out batches of
 * messages and settles them when told (done, retry later, dead); it never decides about the
 * database.
 *
 * Settlements come in any order and late: the consumer keeps a failed message, and the later
 * messages of its aggregate, unsettled across any number of receives (copies of them: the
 * strings need not outlive the next receive) and settles each by its tag when it is done, while
 * later messages of other aggregates are settled at once. So a source must keep every tag valid
 * until it is settled or the source reconnects; keep such messages from being redelivered
 * behind the consumer's back where the broker would after a timeout (NATS: "in progress" within
 * ack_wait); and, where the broker only takes a position (a Kafka offset, say), never commit
 * past the oldest message not settled yet. receive is called at least every 500 ms while
 * messages are held, also with max = 0 when the consumer takes no new ones (at
 * consume.max_held), so a source can do such upkeep there. */
#ifndef PB_SOURCE_SOURCE_H
#define PB_SOURCE_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "config/config.h"

/* One received message. Strings are NUL-terminated and owned by the source: valid until the
 * next receive on it (or until it reconnects). */
typedef struct pb_message {
    uint64_t tag;            /* opaque: what settle takes (a stale one fails, never settles another) */
    const char *message_id;  /* message_id property or consume.message_id_header; NULL if none */
    const char *type;        /* type property, else header "event_type"; NULL if none */
    const char *aggregate_type; /* header "aggregate_type"; NULL if none */
    const char *aggregate_id; /* header "aggregate_id"; NULL if none. With aggregate_type the
                               * order key: one aggregate's messages are handled in order */
    int64_t sequence;        /* header PB_SEQUENCE_HEADER (common/event.h), 0 if none or invalid */
    const char *routing_key;
    const char *exchange;
    const char *body;        /* the payload, NUL-terminated for convenience */
    size_t body_len;
    uint64_t body_dropped;   /* > 0: the body had this many bytes, above consume.max_message_size,
                              * and was not kept (body is "", body_len 0) */
    const char *headers;     /* JSON object text of the message headers ("{}" if none) */
    const char *traceparent; /* W3C trace context from the headers (source/envelope.h), NULL if
                              * none; set by the consumer, not by the source */
    const char *tracestate;  /* likewise, only with a traceparent */
    bool redelivered;
    int64_t timestamp;       /* timestamp property (unix seconds), 0 if none */
    int deliveries;          /* times the broker has handed it out, this time included, where
                              * it counts them (Redis Streams); 0 when it does not say. Above
                              * consume.max_attempts the inbox dead-letters the message without
                              * running its handler: its consumers kept dying before the commit */
} pb_message_t;

typedef struct pb_source pb_source_t;

/* What becomes of a message handed out (settle). */
typedef enum pb_settle_how {
    PB_SETTLE_DONE = 0, /* handled, or a duplicate */
    PB_SETTLE_RETRY,    /* not now: to be handed out again later */
    PB_SETTLE_DEAD,     /* moved to postbox.inbox_dead, never to be handled */
} pb_settle_how_t;

typedef struct pb_settle {
    uint64_t tag;
    pb_settle_how_t how;
} pb_settle_t;

typedef struct pb_source_ops {
    const char *name; /* "amqp" */

    /* Connects, declares/binds the queue when configured, sets the prefetch and starts
     * consuming. PB_TRANSIENT when the broker cannot be reached, PB_FATAL for what a retry
     * cannot fix (credentials, missing queue that is not to be declared, bad arguments). After
     * a reconnect, messages that were not acknowledged are delivered again by the broker. */
    pb_status_t (*connect)(pb_source_t *src, pb_error_t *err);

    /* Receives up to max messages into msgs: waits up to wait_ms for the first one, then up to
     * batch_wait_ms more for the rest (returns at once when max is reached). *n may be 0.
     * PB_TRANSIENT when the connection was lost (messages not acked are redelivered later). */
    pb_status_t (*receive)(pb_source_t *src, pb_message_t *msgs, size_t max, int64_t wait_ms,
                           int64_t batch_wait_ms, size_t *n, pb_error_t *err);

    /* Settles list[0..n), each by its tag: done (the broker forgets it), retry later (the broker
     * hands it out again after about a second) or dead (the consumer keeps it in
     * postbox.inbox_dead; the broker forgets it, and is told it failed where it has such a
     * notion). The tags may come in any order; a source batches the frames as its broker
     * allows. A tag from before a reconnect fails the call with PB_TRANSIENT before anything is
     * settled (its message is redelivered anyway); PB_TRANSIENT also when the connection is
     * lost meanwhile (what was not settled is redelivered, and the inbox absorbs it). */
    pb_status_t (*settle)(pb_source_t *src, const pb_settle_t *list, size_t n, pb_error_t *err);

    /* Optional (NULL: none). Called while the consumer waits for the database: decodes the
     * deliveries that can be read without waiting and keeps them, at most max in all, for the
     * next receive, which hands them out first. The strings of the batch handed out last stay
     * valid. PB_TRANSIENT when the connection was lost. */
    pb_status_t (*prefetch)(pb_source_t *src, size_t max, pb_error_t *err);

    /* With prefetch: the socket to poll for readability before calling it; -1 when there is
     * nothing to wait for (disconnected, or max messages kept already). */
    int (*prefetch_fd)(pb_source_t *src, size_t max);

    /* Optional (NULL: an empty receive is taken for the end). For `consume --drain`, called
     * when a receive came back empty and the consumer holds nothing: *pending gets how many
     * messages the broker still has for this consumer, counting those delivered and not
     * acknowledged (e.g. a killed consumer's, redelivered after a timeout) and any already
     * received but not handed out yet. The drain ends only at 0. PB_FATAL when the source
     * gives the drain up (kafka: nothing moved within its bound, see kafka.c): the run ends
     * with that error. */
    pb_status_t (*pending)(pb_source_t *src, int64_t *pending, pb_error_t *err);

    /* Optional (NULL: it cannot tell, so the consumer does not wait for gaps). Whether this
     * subscription takes every event of an aggregate, judged from the source's configuration:
     * only then can every aggregate_sequence number come, so that the consumer may wait for a
     * missing one (consume.wait_for_gaps = auto). why[0..n) says on what grounds. */
    bool (*takes_every_event)(const pb_source_t *src, char *why, size_t n);

    /* Closes the connection (if any) and frees the source. Accepts NULL. */
    void (*free)(pb_source_t *src);
} pb_source_ops_t;

struct pb_source {
    const pb_source_ops_t *ops;
    const pb_config_t *cfg; /* borrowed; outlives the source */
};

/* The value of header PB_SEQUENCE_HEADER, text[0..len) in decimal: a number from 1 up, else 0
 * (none or not a sequence number). For every source. */
int64_t pb_source_sequence(const char *text, size_t len);

/* A destination template (redis.stream, kafka.topic) judged for takes_every_event: false when
 * it sends one aggregate's events to several places ({event_type} or {event_id} in it). */
bool pb_source_template_keeps_aggregate(const char *option, const char *template, char *why,
                                        size_t n);

/* Creates the source named by cfg->consume_source, unconnected. */
pb_status_t pb_source_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err) PB_MUSTCHECK;

pb_status_t pb_source_amqp_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_source_nats_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_source_redis_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_source_kafka_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err) PB_MUSTCHECK;

static inline void pb_source_free(pb_source_t *src)
{
    if (src)
        src->ops->free(src);
}

#endif
