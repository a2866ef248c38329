/* An outbox event as the relay sees it: borrowed strings, valid while the claimed batch lives. */
#ifndef PB_COMMON_EVENT_H
#define PB_COMMON_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The header naming an event's aggregate sequence on every broker. */
#define PB_SEQUENCE_HEADER "aggregate_sequence"

typedef struct pb_event {
    int64_t id;                 /* outbox.id: publish order */
    const char *event_id;       /* uuid text, 36 chars: the message id end to end */
    const char *aggregate_type;
    const char *aggregate_id;
    const char *event_type;
    const char *payload;        /* JSON text */
    size_t payload_len;
    const char *headers;        /* JSON object text, or NULL */
    const char *destination;    /* routing override, or NULL */
    int64_t created_at_us;      /* unix microseconds */
    int attempts;               /* attempts before this one */
    int64_t sequence;           /* the event's place among its aggregate's committed events
                                 * (1, 2, ...), assigned in the producer's transaction; 0 when
                                 * unknown. Every sink sends it as header PB_SEQUENCE_HEADER. */
    int64_t available_at_us;    /* not published before (unix microseconds); 0: at once */
    int64_t expires_at_us;      /* not published from then on (unix microseconds): dead-lettered
                                 * with reason PB_EXPIRED_REASON; 0: never */
    struct json_t *header_obj;  /* headers parsed once for every sink (pb_sink_prepare), NULL
                                 * when there are none or they are flat; released by
                                 * pb_sink_release */
    bool store_masked;          /* payload and headers are [mask]'s copies, to be stored so in
                                 * the history and dead letters (relay.mask_stored) */
    bool masked;                /* payload and headers were masked before they were stored
                                 * (a cdc event set aside masked, relay.mask_stored): published
                                 * and stored as they are, never masked again */
    unsigned flat_headers;      /* > 0: headers is an object of that many members, every one a
                                 * string without escapes, which the sinks read in place
                                 * (pb_header_next), with no parse tree; set by pb_sink_prepare */
} pb_event_t;

/* What happened to one event of a batch. */
typedef enum pb_outcome {
    PB_OUT_UNTRIED = 0, /* to be published */
    PB_OUT_HELD,        /* held back behind a failed event of its aggregate: left pending as is */
    PB_OUT_PUBLISHED,   /* the broker confirmed it */
    PB_OUT_RETRY,       /* failed, may succeed later: attempts+1, backoff */
    PB_OUT_REJECT,      /* can never be published (too large, ...): dead letter now */
    PB_OUT_EXPIRED,     /* past its expires_at before it went out: dead letter, never sent */
    PB_OUT_DEFERRED,    /* not due yet (available_at to come), or behind such an event of its
                         * aggregate: set aside by the capture until its time, not sent now */
} pb_outcome_t;

/* The dead-letter reason of an event that expired before it could be published. */
#define PB_EXPIRED_REASON "expired"

/* The largest per-message TTL RabbitMQ takes in the `expiration` property (ms, 2^32 - 1: its
 * timers' limit); a larger value makes it close the channel. */
#define PB_AMQP_MAX_TTL_MS INT64_C(4294967295)

/* Times before 1970 as the event fields take them: an available_at then is long due (0), an
 * expires_at then long past (1 microsecond after the epoch; 0 would mean "never"). */
static inline void pb_event_fix_times(pb_event_t *ev)
{
    if (ev->available_at_us < 0)
        ev->available_at_us = 0;
    if (ev->expires_at_us < 0)
        ev->expires_at_us = 1;
}

/* Whether ev is past its expires_at at now_us (unix microseconds). */
static inline bool pb_event_expired(const pb_event_t *ev, int64_t now_us)
{
    return ev->expires_at_us > 0 && now_us >= ev->expires_at_us;
}

/* The lifetime ev has left at now_us, in whole milliseconds rounded down (so that a broker
 * dropping the message after that many ms never holds it past its expiry; 0 once expired), for a
 * broker's per-message TTL; -1 when it never expires. */
static inline int64_t pb_event_ttl_ms(const pb_event_t *ev, int64_t now_us)
{
    if (ev->expires_at_us <= 0)
        return -1;
    return now_us >= ev->expires_at_us ? 0 : (ev->expires_at_us - now_us) / 1000;
}

/* When ev became publishable (unix microseconds): its commit, or its available_at when later;
 * what its publish latency is measured from. */
static inline int64_t pb_event_due_us(const pb_event_t *ev)
{
    return ev->available_at_us > ev->created_at_us ? ev->available_at_us : ev->created_at_us;
}

typedef struct pb_result {
    pb_outcome_t outcome;
    bool duplicate;  /* PUBLISHED: the broker had it already and did not store it again
                      * (PB_SINK_DEDUPS_BY_ID) */
    char error[240]; /* reason for RETRY/REJECT */
} pb_result_t;

#endif
