/* Unit tests for the OTLP export's pure parts: the W3C traceparent / tracestate reader
 * (otlp/traceparent.c), the span and request JSON (otlp/span.c), the endpoint check and the
 * bound on spans waiting (otlp/exporter.c, without a collector: nothing is polled). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <string.h>

#include "common/str.h"
#include "config/config.h"
#include "metrics/metrics.h"
#include "otlp/exporter.h"
#include "otlp/span.h"
#include "otlp/traceparent.h"

#define TP_VALID "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static bool parse(const char *s, pb_trace_context_t *ctx)
{
    return pb_traceparent_parse(s, strlen(s), ctx);
}

static void traceparent_valid(void **state)
{
    (void)state;
    pb_trace_context_t ctx;
    assert_true(parse(TP_VALID, &ctx));
    assert_string_equal(ctx.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_string_equal(ctx.span_id, "00f067aa0ba902b7");
    assert_int_equal(ctx.flags, 1);
    assert_true(parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", &ctx));
    assert_int_equal(ctx.flags, 0);
    /* a later version may carry more after a '-', which is ignored */
    assert_true(parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-what-comes", &ctx));
    assert_string_equal(ctx.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_int_equal(ctx.flags, 3);
    assert_true(parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", &ctx));
    /* not NUL-terminated: only len bytes are read */
    const char *longer = TP_VALID "ignored";
    assert_true(pb_traceparent_parse(longer, 55, &ctx));
}

static void traceparent_invalid(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "00",
        /* all-zero ids are invalid (W3C Trace Context 3.2.2.3, 3.2.2.4) */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        /* version ff is forbidden; versions are hex */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        /* uppercase hex is not allowed */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
        /* version 00 has nothing after the flags */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        /* a later version's extra part starts with '-' */
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        /* wrong lengths and separators */
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01",
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
        " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pb_trace_context_t ctx = {.flags = 77};
        if (parse(bad[i], &ctx))
            fail_msg("accepted \"%s\"", bad[i]);
        assert_int_equal(ctx.flags, 77); /* untouched */
    }
    pb_trace_context_t ctx;
    /* a NUL inside the value */
    assert_false(pb_traceparent_parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\0",
                                      55, &ctx));
}

static void tracestate_checked(void **state)
{
    (void)state;
    assert_true(pb_tracestate_valid("congo=t61rcWkgMzE", 17));
    assert_true(pb_tracestate_valid("a=\"b\\c", 6));
    assert_false(pb_tracestate_valid("", 0));
    assert_false(pb_tracestate_valid("a=b\nc=d", 7));
    assert_false(pb_tracestate_valid("a=\xc3\xa9", 4));
    char big[PB_TRACESTATE_MAX + 1];
    memset(big, 'x', sizeof big);
    assert_true(pb_tracestate_valid(big, PB_TRACESTATE_MAX));
    assert_false(pb_tracestate_valid(big, PB_TRACESTATE_MAX + 1));
}

/* The value of kind ("stringValue", "intValue": an int64 is a string in JSON) of attribute key. */
static const char *attr_of(json_t *attrs, const char *key, const char *kind)
{
    size_t i;
    json_t *a;
    json_array_foreach(attrs, i, a)
        if (strcmp(json_string_value(json_object_get(a, "key")), key) == 0)
            return json_string_value(json_object_get(json_object_get(a, "value"), kind));
    return NULL;
}

static const char *attr_string(json_t *attrs, const char *key)
{
    return attr_of(attrs, key, "stringValue");
}

static void span_json_shape(void **state)
{
    (void)state;
    pb_otlp_link_t links[2];
    assert_true(parse(TP_VALID, &links[0].ctx));
    links[0].tracestate = "congo=t61\"rc";
    links[0].tracestate_len = strlen(links[0].tracestate);
    assert_true(parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", &links[1].ctx));
    links[1].tracestate = NULL;
    pb_otlp_span_t span = {.name = "postbox.events publish", .start_ns = 1700000000123456000,
                           .end_ns = 1700000000223456000, .system = "rabbitmq",
                           .destination = "postbox.events", .message_count = 3, .failed = 1,
                           .first_error = "nack \"x\"", .links = links, .n_links = 2,
                           .dropped_links = 5};
    strcpy(span.trace_id, "11112222333344445555666677778888");
    strcpy(span.span_id, "aaaabbbbccccdddd");
    pb_buf_t b = {0};
    pb_otlp_span_json(&span, &b);
    json_error_t jerr;
    json_t *s = json_loads(b.data, 0, &jerr);
    if (!s)
        fail_msg("not JSON: %s in %s", jerr.text, b.data);
    assert_string_equal(json_string_value(json_object_get(s, "traceId")),
                        "11112222333344445555666677778888");
    assert_string_equal(json_string_value(json_object_get(s, "spanId")), "aaaabbbbccccdddd");
    assert_null(json_object_get(s, "parentSpanId")); /* linked, not a child */
    assert_string_equal(json_string_value(json_object_get(s, "name")), "postbox.events publish");
    assert_int_equal(json_integer_value(json_object_get(s, "kind")), 4); /* PRODUCER */
    assert_string_equal(json_string_value(json_object_get(s, "startTimeUnixNano")),
                        "1700000000123456000");
    assert_string_equal(json_string_value(json_object_get(s, "endTimeUnixNano")),
                        "1700000000223456000");
    json_t *attrs = json_object_get(s, "attributes");
    assert_string_equal(attr_string(attrs, "messaging.system"), "rabbitmq");
    assert_string_equal(attr_string(attrs, "messaging.operation"), "publish");
    assert_string_equal(attr_string(attrs, "messaging.destination.name"), "postbox.events");
    assert_string_equal(attr_of(attrs, "messaging.batch.message_count", "intValue"), "3");
    json_t *l = json_object_get(s, "links");
    assert_int_equal(json_array_size(l), 2);
    json_t *l0 = json_array_get(l, 0);
    assert_string_equal(json_string_value(json_object_get(l0, "traceId")),
                        "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_string_equal(json_string_value(json_object_get(l0, "spanId")), "00f067aa0ba902b7");
    assert_string_equal(json_string_value(json_object_get(l0, "traceState")), "congo=t61\"rc");
    assert_int_equal(json_integer_value(json_object_get(l0, "flags")), 0x301);
    json_t *l1 = json_array_get(l, 1);
    assert_null(json_object_get(l1, "traceState"));
    assert_int_equal(json_integer_value(json_object_get(l1, "flags")), 0x300);
    assert_int_equal(json_integer_value(json_object_get(s, "droppedLinksCount")), 5);
    json_t *st = json_object_get(s, "status");
    assert_int_equal(json_integer_value(json_object_get(st, "code")), 2); /* ERROR */
    assert_string_equal(json_string_value(json_object_get(st, "message")),
                        "1 of 3 events not confirmed: nack \"x\"");
    json_decref(s);

    /* all confirmed, no destination, no links: no status, no destination, an empty list */
    span.failed = 0;
    span.destination = NULL;
    span.n_links = 0;
    span.dropped_links = 0;
    pb_buf_reset(&b);
    pb_otlp_span_json(&span, &b);
    s = json_loads(b.data, 0, &jerr);
    assert_non_null(s);
    assert_null(json_object_get(s, "status"));
    assert_null(json_object_get(s, "droppedLinksCount"));
    assert_null(attr_string(json_object_get(s, "attributes"), "messaging.destination.name"));
    assert_int_equal(json_array_size(json_object_get(s, "links")), 0);
    json_decref(s);
    pb_buf_free(&b);
}

static void request_json_wraps_spans(void **state)
{
    (void)state;
    pb_buf_t b = {0};
    const char *spans = "{\"name\":\"a\"},{\"name\":\"b\"}";
    pb_otlp_request_json("shop \"relay\"", "0.1.0", spans, strlen(spans), &b);
    json_error_t jerr;
    json_t *r = json_loads(b.data, 0, &jerr);
    if (!r)
        fail_msg("not JSON: %s in %s", jerr.text, b.data);
    json_t *rs = json_array_get(json_object_get(r, "resourceSpans"), 0);
    json_t *attrs = json_object_get(json_object_get(rs, "resource"), "attributes");
    assert_string_equal(attr_string(attrs, "service.name"), "shop \"relay\"");
    json_t *ss = json_array_get(json_object_get(rs, "scopeSpans"), 0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(ss, "scope"), "name")),
                        "postbox");
    json_t *list = json_object_get(ss, "spans");
    assert_int_equal(json_array_size(list), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(list, 1), "name")), "b");
    json_decref(r);
    pb_buf_free(&b);
}

static void hex_of_bytes(void **state)
{
    (void)state;
    const uint8_t bytes[] = {0x00, 0x0f, 0xa0, 0xff};
    char hex[9];
    pb_otlp_hex(bytes, 4, hex);
    assert_string_equal(hex, "000fa0ff");
}

static void endpoint_checked(void **state)
{
    (void)state;
    pb_error_t err;
    assert_int_equal(pb_otlp_check_endpoint("", &err), PB_OK);
    assert_int_equal(pb_otlp_check_endpoint("http://127.0.0.1:4318", &err), PB_OK);
    assert_int_equal(pb_otlp_check_endpoint("https://collector.example:4318/otlp/", &err), PB_OK);
    assert_int_equal(pb_otlp_check_endpoint("127.0.0.1:4318", &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "relay.otlp_endpoint"));
    assert_int_equal(pb_otlp_check_endpoint("localhost:4318", &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "is not a URL"));
    assert_int_equal(pb_otlp_check_endpoint("grpc://127.0.0.1:4317", &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "http or https"));
    assert_int_equal(pb_otlp_check_endpoint("http://", &err), PB_FATAL);
    assert_int_equal(pb_otlp_check_endpoint("http://[::1", &err), PB_FATAL);
    assert_int_equal(pb_otlp_check_endpoint("http://h:4318/?x=1", &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "query or fragment"));
    assert_int_equal(pb_otlp_check_endpoint("http://h:4318\n", &err), PB_FATAL);
    /* a password in the URL never shows in the message */
    assert_int_equal(pb_otlp_check_endpoint("ftp://user:s3cret@h:4318", &err), PB_FATAL);
    assert_null(strstr(err.msg, "s3cret"));
}

/* Spans waiting for the collector are bounded in bytes: what does not fit is dropped and
 * counted, the spans before it stay. Nothing is polled: no request is made. */
static void waiting_spans_bounded(void **state)
{
    (void)state;
    pb_metrics_reset();
    pb_config_t cfg;
    pb_config_init(&cfg);
    pb_error_t err;
    assert_int_equal(pb_config_set(&cfg, "relay.otlp_endpoint", "http://127.0.0.1:9", PB_CFG_CLI,
                                   &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "relay.otlp_max_pending", "64kB", PB_CFG_CLI, &err),
                     PB_OK);
    pb_otlp_t *otlp = NULL;
    assert_int_equal(pb_otlp_new(&cfg, &otlp, &err), PB_OK);
    assert_non_null(otlp);
    pb_otlp_span_t span = {.name = "publish", .system = "nats", .message_count = 1};
    strcpy(span.trace_id, "11112222333344445555666677778888");
    strcpy(span.span_id, "aaaabbbbccccdddd");
    pb_buf_t one = {0};
    pb_otlp_span_json(&span, &one);
    size_t fit = 65536 / (one.len + 1); /* one comma between spans */
    for (size_t i = 0; i < fit + 10; i++)
        pb_otlp_add(otlp, &span);
    pb_buf_t out = {0};
    pb_metrics_render(&out);
    assert_non_null(strstr(out.data, "postbox_otlp_spans_dropped_total 10\n"));
    assert_non_null(strstr(out.data, "postbox_otlp_spans_exported_total 0\n"));
    pb_buf_free(&out);
    pb_buf_free(&one);
    pb_otlp_free(otlp);
    pb_config_free(&cfg);

    /* off: no exporter, and the calls accept NULL */
    pb_config_init(&cfg);
    assert_int_equal(pb_otlp_new(&cfg, &otlp, &err), PB_OK);
    assert_null(otlp);
    pb_otlp_add(NULL, &span);
    pb_otlp_poll(NULL);
    pb_otlp_flush(NULL);
    pb_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(traceparent_valid),
        cmocka_unit_test(traceparent_invalid),
        cmocka_unit_test(tracestate_checked),
        cmocka_unit_test(span_json_shape),
        cmocka_unit_test(request_json_wraps_spans),
        cmocka_unit_test(hex_of_bytes),
        cmocka_unit_test(endpoint_checked),
        cmocka_unit_test(waiting_spans_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
