/* The relay's publish span (relay.otlp_endpoint): one OTLP span of kind PRODUCER per send of a
 * batch to the broker, from the send to the last confirm, in a trace of its own, with a link
 * (not a parent) to the producer's context of each event that carries a valid W3C traceparent
 * (and its tracestate): one publish serves events of many traces, so it is a child of none of
 * them (OpenTelemetry messaging conventions for batch publishing).
 *
 * Per send rather than per event: a span per event would multiply the export by the batch size
 * for one broker round trip that the events share; the links keep each producer's trace
 * reachable from it. @thread the driver's thread. */
#ifndef PB_RELAY_PUBLISH_SPAN_H
#define PB_RELAY_PUBLISH_SPAN_H

#include <stddef.h>
#include <stdint.h>

#include "common/event.h"
#include "config/config.h"
#include "otlp/exporter.h"

typedef struct pb_publish_span {
    pb_otlp_t *otlp;      /* borrowed; NULL: off, and begin/end do nothing */
    const char *system;   /* messaging.system of the sink */
    const char *destination; /* the sink's one destination (the AMQP exchange), or NULL */
    char name[300];
    int64_t start_ns;
    size_t *sent;         /* indexes of the events handed to the sink this round */
    size_t n_sent, cap;
    pb_otlp_link_t links[PB_OTLP_MAX_LINKS];
} pb_publish_span_t;

/* Sets ps up for the sink named sink ("amqp", ...) of cfg, exporting through otlp (borrowed,
 * NULL: off). */
void pb_publish_span_init(pb_publish_span_t *ps, const pb_config_t *cfg, const char *sink,
                          pb_otlp_t *otlp);

/* Just before the send: notes the events the sink is to publish (their result UNTRIED) and the
 * time. */
void pb_publish_span_begin(pb_publish_span_t *ps, const pb_result_t *results, size_t n);

/* Once the send and its confirms are over (results decided): queues the span of the events
 * noted by begin, linked to their producers' contexts. The events must still be prepared
 * (pb_sink_prepare: their headers are read). */
void pb_publish_span_end(pb_publish_span_t *ps, const pb_event_t *events,
                         const pb_result_t *results);

void pb_publish_span_free(pb_publish_span_t *ps);

/* messaging.system of a sink: rabbitmq, nats, kafka, redis; the sink's own name otherwise. */
const char *pb_publish_span_system(const char *sink);

#endif
