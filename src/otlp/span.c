#include "otlp/span.h"

#include <stdio.h>

/* Enum values of opentelemetry/proto/trace/v1/trace.proto: the JSON encoding of OTLP takes
 * integers only. */
#define SPAN_KIND_PRODUCER 4
#define STATUS_CODE_ERROR 2
/* Link.flags: the W3C trace flags in bits 0-7; bit 8 says whether bit 9 (the linked context is
 * remote, as a producer's in another process always is) is known. */
#define LINK_FLAGS_HAS_IS_REMOTE 0x100u
#define LINK_FLAGS_IS_REMOTE 0x200u

static void put_string_attr(pb_buf_t *out, bool *first, const char *key, const char *value)
{
    pb_buf_puts(out, *first ? "{\"key\":" : ",{\"key\":");
    pb_buf_append_json_string(out, key);
    pb_buf_puts(out, ",\"value\":{\"stringValue\":");
    pb_buf_append_json_string(out, value);
    pb_buf_puts(out, "}}");
    *first = false;
}

/* An int64 is a JSON string in the protobuf JSON mapping. */
static void put_int_attr(pb_buf_t *out, bool *first, const char *key, int64_t value)
{
    pb_buf_puts(out, *first ? "{\"key\":" : ",{\"key\":");
    pb_buf_append_json_string(out, key);
    pb_buf_puts(out, ",\"value\":{\"intValue\":\"");
    pb_buf_put_int64(out, value);
    pb_buf_puts(out, "\"}}");
    *first = false;
}

static void put_link(pb_buf_t *out, const pb_otlp_link_t *link)
{
    pb_buf_puts(out, "{\"traceId\":\"");
    pb_buf_puts(out, link->ctx.trace_id);
    pb_buf_puts(out, "\",\"spanId\":\"");
    pb_buf_puts(out, link->ctx.span_id);
    pb_buf_putc(out, '"');
    if (link->tracestate) {
        pb_buf_puts(out, ",\"traceState\":\"");
        /* printable ASCII (pb_tracestate_valid): only '"' and '\\' need escapes */
        for (size_t i = 0; i < link->tracestate_len; i++) {
            char c = link->tracestate[i];
            if (c == '"' || c == '\\')
                pb_buf_putc(out, '\\');
            pb_buf_putc(out, c);
        }
        pb_buf_putc(out, '"');
    }
    pb_buf_printf(out, ",\"flags\":%u}",
                  (unsigned)link->ctx.flags | LINK_FLAGS_HAS_IS_REMOTE | LINK_FLAGS_IS_REMOTE);
}

void pb_otlp_span_json(const pb_otlp_span_t *span, pb_buf_t *out)
{
    pb_buf_puts(out, "{\"traceId\":\"");
    pb_buf_puts(out, span->trace_id);
    pb_buf_puts(out, "\",\"spanId\":\"");
    pb_buf_puts(out, span->span_id);
    pb_buf_puts(out, "\",\"name\":");
    pb_buf_append_json_string(out, span->name);
    pb_buf_printf(out, ",\"kind\":%d,\"startTimeUnixNano\":\"", SPAN_KIND_PRODUCER);
    pb_buf_put_int64(out, span->start_ns);
    pb_buf_puts(out, "\",\"endTimeUnixNano\":\"");
    pb_buf_put_int64(out, span->end_ns);
    pb_buf_puts(out, "\",\"attributes\":[");
    bool first = true;
    put_string_attr(out, &first, "messaging.system", span->system);
    /* messaging.operation is the name of conventions before 1.26, the two others of later ones */
    put_string_attr(out, &first, "messaging.operation", "publish");
    put_string_attr(out, &first, "messaging.operation.name", "publish");
    put_string_attr(out, &first, "messaging.operation.type", "send");
    put_int_attr(out, &first, "messaging.batch.message_count", (int64_t)span->message_count);
    if (span->destination)
        put_string_attr(out, &first, "messaging.destination.name", span->destination);
    if (span->failed)
        put_string_attr(out, &first, "error.type", "publish_failed");
    pb_buf_puts(out, "],\"links\":[");
    for (size_t i = 0; i < span->n_links; i++) {
        if (i)
            pb_buf_putc(out, ',');
        put_link(out, &span->links[i]);
    }
    pb_buf_putc(out, ']');
    if (span->dropped_links)
        pb_buf_printf(out, ",\"droppedLinksCount\":%zu", span->dropped_links);
    if (span->failed) {
        char msg[320];
        snprintf(msg, sizeof msg, "%zu of %zu events not confirmed%s%s", span->failed,
                 span->message_count, span->first_error ? ": " : "",
                 span->first_error ? span->first_error : "");
        pb_buf_printf(out, ",\"status\":{\"code\":%d,\"message\":", STATUS_CODE_ERROR);
        pb_buf_append_json_string(out, msg);
        pb_buf_putc(out, '}');
    }
    pb_buf_putc(out, '}');
}

void pb_otlp_request_json(const char *service, const char *version, const char *spans,
                          size_t spans_len, pb_buf_t *out)
{
    pb_buf_puts(out, "{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
    bool first = true;
    put_string_attr(out, &first, "service.name", service);
    pb_buf_puts(out, "]},\"scopeSpans\":[{\"scope\":{\"name\":\"postbox\",\"version\":");
    pb_buf_append_json_string(out, version);
    pb_buf_puts(out, "},\"spans\":[");
    pb_buf_append(out, spans, spans_len);
    pb_buf_puts(out, "]}]}]}");
}

void pb_otlp_hex(const uint8_t *bytes, size_t n, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[bytes[i] >> 4];
        hex[2 * i + 1] = digits[bytes[i] & 15];
    }
    hex[2 * n] = '\0';
}
