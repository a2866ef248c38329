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
    struct json_t *header_obj;  /* headers parsed once for every sink (pb_sink_prepare), NULL
                                 * when there are none or they are flat; released by
                                 * pb_sink_release */
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
} pb_outcome_t;

typedef struct pb_result {
    pb_outcome_t outcome;
    bool duplicate;  /* PUBLISHED: the broker had it already and did not store it again
                      * (PB_SINK_DEDUPS_BY_ID) */
    char error[240]; /* reason for RETRY/REJECT */
} pb_result_t;

#endif
