/* W3C Trace Context (https://www.w3.org/TR/trace-context/): reading an event's `traceparent`
 * and `tracestate` headers into the ids a span link names. Pure functions, no allocation. */
#ifndef PB_OTLP_TRACEPARENT_H
#define PB_OTLP_TRACEPARENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest tracestate the W3C specification allows (32 list-members of at most 256 bytes
 * each are possible on the wire, but a vendor "SHOULD" keep it to 512 and may cut the rest). */
#define PB_TRACESTATE_MAX 512

typedef struct pb_trace_context {
    char trace_id[33]; /* 32 lowercase hex digits, NUL-terminated, never all zeros */
    char span_id[17];  /* 16 lowercase hex digits (the producer's span: parent-id) */
    uint8_t flags;     /* trace-flags (bit 0: sampled) */
} pb_trace_context_t;

/* Parses s[0..len) (not NUL-terminated) as a traceparent: version-traceid-parentid-flags.
 * Version 00 is exactly 55 characters; a later version (01..fe) may have more after a '-',
 * which is ignored as the specification says; version ff is invalid. Hex digits must be
 * lowercase; an all-zero trace id or parent id is invalid. False (*out untouched) when s is not
 * a valid traceparent. */
bool pb_traceparent_parse(const char *s, size_t len, pb_trace_context_t *out);

/* Whether s[0..len) can travel as a link's traceState: 1 to PB_TRACESTATE_MAX characters, each
 * printable ASCII (0x20..0x7e), as the specification's list-members are. */
bool pb_tracestate_valid(const char *s, size_t len);

#endif
