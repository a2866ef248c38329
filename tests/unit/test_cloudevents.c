/* CloudEvents binary content mode (sink/cloudevents.c): the attributes of an event as each
 * binding names and writes them, the source's check and default, the time's format. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "sink/cloudevents.h"
#include "sink/sink.h"

#define ID "0b6b1d54-3c8f-4d8e-9a57-6a3f1a0e2b11"
#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

/* 2026-01-02T03:04:05.678901Z */
#define CREATED_US INT64_C(1767323045678901)

static pb_ce_t *make(pb_ce_binding_t binding, const char *prefix, const char *source)
{
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    assert_int_equal(pb_config_set(&cfg, "relay.cloudevents_source", source, PB_CFG_CLI, &err),
                     PB_OK);
    assert_int_equal(pb_config_set(&cfg, "postgres.dsn", "postgresql://app@db.example.com/shop",
                                   PB_CFG_CLI, &err), PB_OK);
    pb_ce_t *ce = NULL;
    assert_int_equal(pb_ce_new(&cfg, binding, prefix, &ce, &err), PB_OK);
    pb_config_free(&cfg); /* the state keeps copies of what it needs */
    return ce;
}

static pb_event_t event(const char *type, const char *agg_type, const char *agg_id,
                        const char *headers)
{
    pb_event_t ev = {.id = 7,
                     .event_id = ID,
                     .event_type = type,
                     .aggregate_type = agg_type,
                     .aggregate_id = agg_id,
                     .payload = "{}",
                     .payload_len = 2,
                     .headers = headers,
                     .created_at_us = CREATED_US,
                     .sequence = 42};
    if (headers) { /* kept as pb_sink_prepare keeps them: flat, or parsed */
        static const pb_sink_ops_t ops = {.name = "fake"};
        pb_sink_t snk = {.ops = &ops};
        pb_result_t res = {0};
        assert_true(pb_sink_prepare(&snk, &ev, &res));
    }
    return ev;
}

/* "name=value" lines of the attributes, for comparing a whole set at once */
static char *render(pb_ce_t *ce, const pb_event_t *ev)
{
    static char out[4096];
    pb_ce_attr_t a[PB_CE_NATTRS];
    size_t n = pb_ce_attrs(ce, ev, a), k = 0;
    assert_true(n <= PB_CE_NATTRS);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(strlen(a[i].name), a[i].name_len);
        k += (size_t)snprintf(out + k, sizeof out - k, "%s=%.*s\n", a[i].name, (int)a[i].len,
                              a[i].value);
    }
    return out;
}

static void kafka_attributes(void **state)
{
    (void)state;
    pb_ce_t *ce = make(PB_CE_KAFKA, NULL, "");
    pb_event_t ev = event("order.paid.v1", "order", "42", "{\"traceparent\": \"" TP "\", "
                                                         "\"tracestate\": \"congo=t61rcWkgMzE\"}");
    assert_string_equal(render(ce, &ev), "ce_specversion=1.0\n"
                                         "ce_id=" ID "\n"
                                         "ce_source=/postbox/shop\n"
                                         "ce_type=order.paid.v1\n"
                                         "ce_subject=order/42\n"
                                         "ce_time=2026-01-02T03:04:05.678901Z\n"
                                         "content-type=application/json\n"
                                         "ce_traceparent=" TP "\n"
                                         "ce_tracestate=congo=t61rcWkgMzE\n"
                                         "ce_aggregatesequence=42\n");
    /* without a trace context, a time or a sequence: those attributes are left out */
    json_decref(ev.header_obj);
    ev = event("order.paid.v1", "order", "42", "{\"tracestate\": \"x=1\", \"other\": 1}");
    ev.created_at_us = 0;
    ev.sequence = 0;
    assert_string_equal(render(ce, &ev), "ce_specversion=1.0\n"
                                         "ce_id=" ID "\n"
                                         "ce_source=/postbox/shop\n"
                                         "ce_type=order.paid.v1\n"
                                         "ce_subject=order/42\n"
                                         "content-type=application/json\n");
    /* a traceparent that is not a string, or holds a control character, is not an attribute */
    json_decref(ev.header_obj);
    ev = event("t", "a", "1", "{\"traceparent\": 7}");
    assert_null(strstr(render(ce, &ev), "traceparent"));
    json_decref(ev.header_obj);
    ev = event("t", "a", "1", "{\"traceparent\": \"00-x\\n\"}");
    assert_null(strstr(render(ce, &ev), "traceparent"));
    json_decref(ev.header_obj);
    pb_ce_free(ce);
}

static void amqp_attributes_and_prefixes(void **state)
{
    (void)state;
    static const char *const prefixes[3] = {"cloudEvents_", "cloudEvents:", "ce-"};
    for (int p = 0; p < 3; p++) {
        pb_ce_t *ce = make(PB_CE_AMQP, prefixes[p], "urn:example:shop");
        pb_event_t ev = event("order.paid.v1", "order", "42 b", NULL);
        char want[1024];
        /* datacontenttype is the content_type property, not a header */
        snprintf(want, sizeof want,
                 "%1$sspecversion=1.0\n%1$sid=" ID "\n%1$ssource=urn:example:shop\n"
                 "%1$stype=order.paid.v1\n%1$ssubject=order/42 b\n"
                 "%1$stime=2026-01-02T03:04:05.678901Z\n%1$saggregatesequence=42\n",
                 prefixes[p]);
        assert_string_equal(render(ce, &ev), want);
        pb_ce_free(ce);
    }
}

static void nats_percent_encodes(void **state)
{
    (void)state;
    pb_ce_t *ce = make(PB_CE_NATS, NULL, "/shop%20eu");
    pb_event_t ev = event("bestellung.bezahlt \"v1\"", "bestellung", "42/€ 5",
                          "{\"traceparent\": \"" TP "\", \"tracestate\": \"a=1, b=2\"}");
    assert_string_equal(render(ce, &ev), "ce-specversion=1.0\n"
                                         "ce-id=" ID "\n"
                                         "ce-source=/shop%2520eu\n"
                                         "ce-type=bestellung.bezahlt%20%22v1%22\n"
                                         "ce-subject=bestellung/42/%E2%82%AC%205\n"
                                         "ce-time=2026-01-02T03:04:05.678901Z\n"
                                         "ce-datacontenttype=application/json\n"
                                         "ce-traceparent=" TP "\n"
                                         "ce-tracestate=a=1,%20b=2\n"
                                         "ce-aggregatesequence=42\n");
    /* every value is readable one past its end (the sinks use that for C strings) */
    pb_ce_attr_t a[PB_CE_NATTRS];
    size_t n = pb_ce_attrs(ce, &ev, a);
    for (size_t i = 0; i < n; i++)
        (void)a[i].value[a[i].len];
    json_decref(ev.header_obj);

    pb_buf_t b = {0};
    assert_false(pb_ce_nats_encode(&b, "plain-text_1.0", 14));
    assert_string_equal(b.data, "plain-text_1.0");
    pb_buf_reset(&b);
    assert_true(pb_ce_nats_encode(&b, "Euro \xe2\x82\xac \xf0\x9f\x98\x80", 13));
    assert_string_equal(b.data, "Euro%20%E2%82%AC%20%F0%9F%98%80"); /* the binding's example */
    pb_buf_reset(&b);
    assert_true(pb_ce_nats_encode(&b, "100%\x7f", 5));
    assert_string_equal(b.data, "100%25%7F");
    pb_buf_free(&b);
    pb_ce_free(ce);
}

static void redis_fields(void **state)
{
    (void)state;
    /* only what postbox's own fields (event_id, event_type, created_at, traceparent, tracestate,
     * aggregate_sequence) do not hold already */
    pb_ce_t *ce = make(PB_CE_REDIS, NULL, "https://example.com/shop?x=1#f");
    pb_event_t ev = event("order.paid.v1", "order", "42", "{\"traceparent\": \"" TP "\"}");
    assert_string_equal(render(ce, &ev), "ce_specversion=1.0\n"
                                         "ce_source=https://example.com/shop?x=1#f\n"
                                         "ce_subject=order/42\n"
                                         "ce_datacontenttype=application/json\n");
    assert_false(pb_ce_owns(ce, "ce_id", 5));
    assert_true(pb_ce_owns(ce, "ce_subject", 10));
    pb_ce_free(ce);
}

static void owns_its_names(void **state)
{
    (void)state;
    pb_ce_t *k = make(PB_CE_KAFKA, NULL, "");
    assert_true(pb_ce_owns(k, "ce_id", 5));
    assert_true(pb_ce_owns(k, "CE_TYPE", 7));
    assert_true(pb_ce_owns(k, "content-type", 12));
    assert_true(pb_ce_owns(k, "ce_traceparent", 14));
    assert_false(pb_ce_owns(k, "ce_partitionkey", 15)); /* an extension of the producer's own */
    assert_false(pb_ce_owns(k, "traceparent", 11));
    assert_false(pb_ce_owns(k, "ce-id", 5));
    assert_false(pb_ce_owns(NULL, "ce_id", 5));
    pb_ce_free(k);
    pb_ce_t *a = make(PB_CE_AMQP, "cloudEvents_", "");
    assert_true(pb_ce_owns(a, "cloudevents_source", 18));
    assert_false(pb_ce_owns(a, "cloudEvents_datacontenttype", 27)); /* sent as content_type */
    assert_false(pb_ce_owns(a, "content-type", 12));
    pb_ce_free(a);
}

static void checks_events(void **state)
{
    (void)state;
    pb_result_t res = {0};
    pb_event_t ev = event("order.paid.v1", "order", "42", NULL);
    assert_true(pb_ce_check_event(&ev, &res));
    ev.aggregate_id = "42\n";
    assert_false(pb_ce_check_event(&ev, &res));
    assert_int_equal(res.outcome, PB_OUT_REJECT);
    assert_non_null(strstr(res.error, "aggregate_id holds a control character"));
    ev.aggregate_id = "4\xc2\x85" "2"; /* U+0085, a C1 control */
    assert_false(pb_ce_check_event(&ev, &res));
    ev.aggregate_id = "\xc3\xa9t\xc3\xa9"; /* été: fine */
    assert_true(pb_ce_check_event(&ev, &res));
    ev.event_type = "";
    assert_false(pb_ce_check_event(&ev, &res));
    assert_non_null(strstr(res.error, "no event_type"));
    ev.event_type = "x";
    ev.event_id = NULL;
    assert_false(pb_ce_check_event(&ev, &res));

    /* pb_sink_prepare runs the check only for a sink that sends CloudEvents */
    static const pb_sink_ops_t ops = {.name = "fake"};
    pb_sink_t snk = {.ops = &ops};
    ev = event("t", "a", "\x01", NULL);
    res = (pb_result_t){0};
    assert_true(pb_sink_prepare(&snk, &ev, &res));
    snk.ce = make(PB_CE_KAFKA, NULL, "");
    assert_false(pb_sink_prepare(&snk, &ev, &res));
    assert_int_equal(res.outcome, PB_OUT_REJECT);
    pb_ce_free(snk.ce);
}

static void source_is_a_uri_reference(void **state)
{
    (void)state;
    pb_error_t err;
    static const char *const good[] = {
        "",
        "/postbox/shop",
        "urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66",
        "https://github.com/cloudevents",
        "mailto:cncf-wg-serverless@lists.cncf.io",
        "/cloudevents/spec/pull/123",
        "/sensors/tn-1234567/alerts",
        "1-555-123-4567",
        "https://user:pw@[2001:db8::1]:8443/a/b?c=d&e#frag",
        "http://[v1.fe80::a+en1]/",
        "//example.com/shop",
        "shop",
        "./a:b",
        "/a%20b",
        "?q",
        "#f",
        "a/b;c=d",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        if (pb_ce_check_source(good[i], &err) != PB_OK)
            fail_msg("\"%s\" refused: %s", good[i], err.msg);
    }
    static const char *const bad[][2] = {
        {"my shop", "character ' ' at offset 2"},
        {"a:b c", "offset 3"},
        {"1a:b", "no scheme"},
        {":x", "no scheme"},
        {"/a%2", "malformed percent escape"},
        {"/a%zz", "malformed percent escape"},
        {"/a#b#c", "character '#' at offset 4: not allowed there"},
        {"/caf\xc3\xa9", "'\\xc3' at offset 4"},
        {"http://[::1/x", "without its closing"},
        {"http://[]/", "empty IP literal"},
        {"http://h:80a/", "not allowed in the port"},
        {"http://h[1]/", "not allowed in the host"},
        {"/a[1]", "offset 2"},
        {"/a\nb", "'\\n' at offset 2"},
        {"http://a@b@c/", "not allowed in the host"},
        {"/a\"b", "offset 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (pb_ce_check_source(bad[i][0], &err) != PB_FATAL)
            fail_msg("\"%s\" accepted", bad[i][0]);
        if (!strstr(err.msg, "is not a URI-reference (RFC 3986)") || !strstr(err.msg, bad[i][1]))
            fail_msg("\"%s\": message \"%s\" lacks \"%s\"", bad[i][0], err.msg, bad[i][1]);
    }

    /* and the sinks refuse to start with one */
    pb_config_t cfg;
    pb_config_init(&cfg);
    assert_int_equal(pb_config_set(&cfg, "relay.cloudevents_source", "a b", PB_CFG_CLI, &err),
                     PB_OK);
    pb_ce_t *ce = NULL;
    assert_int_equal(pb_ce_new(&cfg, PB_CE_NATS, NULL, &ce, &err), PB_FATAL);
    assert_null(ce);
    pb_config_free(&cfg);
}

static void default_source(void **state)
{
    (void)state;
    char out[256];
    unsetenv("PGDATABASE");
    unsetenv("PGUSER");
    pb_ce_default_source("postgresql://app@db.example.com:5432/shop?sslmode=require", out,
                         sizeof out);
    assert_string_equal(out, "/postbox/shop");
    pb_ce_default_source("host=db dbname='sales eu' user=app", out, sizeof out);
    assert_string_equal(out, "/postbox/sales%20eu");
    pb_ce_default_source("host=db dbname=caf\xc3\xa9/x#1", out, sizeof out);
    assert_string_equal(out, "/postbox/caf%C3%A9%2Fx%231");
    pb_ce_default_source("host=db user=app", out, sizeof out); /* libpq: the database is the user */
    assert_string_equal(out, "/postbox/app");
    setenv("PGDATABASE", "fromenv", 1);
    pb_ce_default_source("host=db user=app", out, sizeof out);
    assert_string_equal(out, "/postbox/fromenv");
    unsetenv("PGDATABASE");
    setenv("PGUSER", "envuser", 1);
    pb_ce_default_source("", out, sizeof out);
    assert_string_equal(out, "/postbox/envuser");
    unsetenv("PGUSER");
    pb_ce_default_source("", out, sizeof out); /* the login name */
    assert_true(strncmp(out, "/postbox/", 9) == 0 && strlen(out) > 9);
    pb_ce_default_source("not a dsn ===", out, sizeof out);
    assert_true(strncmp(out, "/postbox/", 9) == 0);
    /* whatever the database's name, the default is a valid source */
    pb_error_t err;
    pb_ce_default_source("dbname='a b:c@d[e]%f\"g'", out, sizeof out);
    assert_string_equal(out, "/postbox/a%20b:c@d%5Be%5D%25f%22g");
    assert_int_equal(pb_ce_check_source(out, &err), PB_OK);
    /* cut short, still a string */
    pb_ce_default_source("dbname=abcdefgh", out, 14); /* room kept for an escape and the NUL */
    assert_string_equal(out, "/postbox/ab");
}

/* The time: the hand-written formatter agrees with gmtime_r + strftime. */
static void time_is_rfc3339(void **state)
{
    (void)state;
    char got[PB_UTC_TEXT_LEN];
    pb_format_utc_us(CREATED_US, got, sizeof got);
    assert_string_equal(got, "2026-01-02T03:04:05.678901Z");
    pb_format_utc_us(0, got, sizeof got);
    assert_string_equal(got, "1970-01-01T00:00:00.000000Z");
    pb_format_utc_us(-1, got, sizeof got);
    assert_string_equal(got, "1969-12-31T23:59:59.999999Z");
    pb_format_utc_us(INT64_C(951782400) * 1000000, got, sizeof got); /* 2000-02-29 */
    assert_string_equal(got, "2000-02-29T00:00:00.000000Z");
    pb_format_utc_us(INT64_C(253402300799999999), got, sizeof got);
    assert_string_equal(got, "9999-12-31T23:59:59.999999Z");

    uint64_t x = 88172645463325252u; /* xorshift: seconds from year 0001 to 9999 */
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int64_t sec = (int64_t)(x % INT64_C(315537897600)) - INT64_C(62135596800);
        int64_t us = sec * 1000000 + (int64_t)(x % 1000000);
        time_t t = (time_t)sec;
        struct tm tm;
        char want[64];
        gmtime_r(&t, &tm);
        size_t k = strftime(want, sizeof want, "%Y-%m-%dT%H:%M:%S", &tm);
        if (tm.tm_year + 1900 < 1000) /* strftime does not pad %Y */
            k = (size_t)snprintf(want, sizeof want, "%04d-%02d-%02dT%02d:%02d:%02d",
                                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                                 tm.tm_min, tm.tm_sec);
        snprintf(want + k, sizeof want - k, ".%06dZ", (int)(x % 1000000));
        pb_format_utc_us(us, got, sizeof got);
        if (strcmp(got, want) != 0)
            fail_msg("%lld us: got %s, want %s", (long long)us, got, want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kafka_attributes),
        cmocka_unit_test(amqp_attributes_and_prefixes),
        cmocka_unit_test(nats_percent_encodes),
        cmocka_unit_test(redis_fields),
        cmocka_unit_test(owns_its_names),
        cmocka_unit_test(checks_events),
        cmocka_unit_test(source_is_a_uri_reference),
        cmocka_unit_test(default_source),
        cmocka_unit_test(time_is_rfc3339),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
