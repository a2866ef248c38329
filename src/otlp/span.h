/* One OTLP span as JSON (the OTLP/HTTP JSON encoding: the protobuf JSON mapping of
 * opentelemetry/proto/trace/v1, ids as lowercase hex, times as decimal strings of unix
 * nanoseconds, enums as integers), and the ExportTraceServiceRequest around spans. Pure
 * functions over the caller's buffers: what is sent is tested without a collector. */
#ifndef PB_OTLP_SPAN_H
#define PB_OTLP_SPAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/str.h"
#include "otlp/traceparent.h"

/* Links one span carries at most (OpenTelemetry SDKs' default link count limit); further ones
 * are counted in droppedLinksCount. */
#define PB_OTLP_MAX_LINKS 128

/* A link to a producer's context: borrowed texts, read while the span is written. */
typedef struct pb_otlp_link {
    pb_trace_context_t ctx;
    const char *tracestate; /* NULL: none; must pass pb_tracestate_valid */
    size_t tracestate_len;
} pb_otlp_link_t;

/* A PRODUCER span of the relay's publish of a batch (OpenTelemetry messaging conventions). */
typedef struct pb_otlp_span {
    char trace_id[33];       /* lowercase hex: a trace of its own, not a producer's */
    char span_id[17];
    const char *name;        /* "<destination> publish" or "publish" */
    int64_t start_ns, end_ns; /* unix nanoseconds: send, and the last confirm */
    const char *system;      /* messaging.system: rabbitmq, nats, kafka, redis, stdout */
    const char *destination; /* messaging.destination.name, NULL when not one for the batch */
    size_t message_count;    /* messaging.batch.message_count: events sent */
    size_t failed;           /* of them, not confirmed: status ERROR when > 0 */
    const char *first_error; /* NULL or the reason of one failure, for the status message */
    const pb_otlp_link_t *links;
    size_t n_links;          /* at most PB_OTLP_MAX_LINKS */
    size_t dropped_links;    /* producer contexts beyond them */
} pb_otlp_span_t;

/* Appends the span as one JSON object (a member of scopeSpans[].spans) to out. */
void pb_otlp_span_json(const pb_otlp_span_t *span, pb_buf_t *out);

/* Appends a whole ExportTraceServiceRequest to out: one resource (service.name = service) and
 * one scope ("postbox", with version) holding spans, the text of span objects separated by
 * commas (as pb_otlp_span_json wrote them), spans_len bytes. */
void pb_otlp_request_json(const char *service, const char *version, const char *spans,
                          size_t spans_len, pb_buf_t *out);

/* Fills hex (2 * n + 1 bytes) with the lowercase hex of bytes[0..n), NUL-terminated. */
void pb_otlp_hex(const uint8_t *bytes, size_t n, char *hex);

#endif
