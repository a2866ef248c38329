/* pb_sink_prepare: the event's headers parsed once for every sink, then the sink's check. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink/sink.h"

static int checks;

static bool count_check(pb_sink_t *snk, const pb_event_t *ev, pb_result_t *res)
{
    (void)snk;
    checks++;
    if (ev->payload_len > 3) {
        pb_result_set(res, PB_OUT_REJECT, "too large");
        return false;
    }
    return true;
}

static const pb_sink_ops_t ops = {.name = "fake", .check = count_check};

static bool prepare(const char *headers, size_t payload_len, pb_result_t *res, pb_event_t *ev)
{
    pb_sink_t snk = {.ops = &ops};
    *ev = (pb_event_t){.headers = headers, .payload = "{}", .payload_len = payload_len};
    *res = (pb_result_t){0};
    return pb_sink_prepare(&snk, ev, res);
}

static void parses_headers_once(void **state)
{
    (void)state;
    pb_result_t res;
    pb_event_t ev;
    checks = 0;
    assert_true(prepare("{\"trace\": \"x\", \"n\": 2}", 2, &res, &ev));
    assert_non_null(ev.header_obj);
    assert_int_equal(json_object_size(ev.header_obj), 2);
    assert_string_equal(json_string_value(json_object_get(ev.header_obj, "trace")), "x");
    pb_sink_release(&ev);
    assert_null(ev.header_obj);
    pb_sink_release(&ev); /* twice is harmless */
    assert_int_equal(checks, 1);

    /* none, empty, JSON null: no object for the sinks */
    assert_true(prepare(NULL, 2, &res, &ev));
    assert_null(ev.header_obj);
    assert_true(prepare(" { } ", 2, &res, &ev));
    assert_null(ev.header_obj);
    assert_true(prepare("null", 2, &res, &ev));
    assert_null(ev.header_obj);
}

static void rejects_what_no_sink_can_send(void **state)
{
    (void)state;
    pb_result_t res;
    pb_event_t ev;
    checks = 0;
    assert_false(prepare("{\"a\": ", 2, &res, &ev));
    assert_int_equal(res.outcome, PB_OUT_REJECT);
    assert_non_null(strstr(res.error, "headers are not valid JSON"));
    assert_false(prepare("[1, 2]", 2, &res, &ev));
    assert_string_equal(res.error, "headers must be a JSON object");
    assert_null(ev.header_obj);
    assert_int_equal(checks, 0); /* the sink is not asked about an event already refused */
    assert_false(prepare("{\"a\": 1}", 10, &res, &ev));
    assert_string_equal(res.error, "too large");
    pb_sink_release(&ev);
    assert_int_equal(checks, 1);
}

/* "k=v;" of every header as pb_header_next gives it (non-strings as their JSON text) */
static const char *walk(const pb_event_t *ev)
{
    static char out[512];
    size_t k = 0;
    pb_header_iter_t it;
    pb_header_t h;
    out[0] = '\0';
    for (pb_header_iter_init(&it, ev); pb_header_next(&it, &h);) {
        if (h.val) {
            k += (size_t)snprintf(out + k, sizeof out - k, "%.*s=%.*s;", (int)h.klen, h.key,
                                  (int)h.vlen, h.val);
        } else {
            char *txt = json_dumps(h.json, JSON_COMPACT | JSON_ENCODE_ANY);
            k += (size_t)snprintf(out + k, sizeof out - k, "%.*s=%s;", (int)h.klen, h.key, txt);
            free(txt);
        }
    }
    return out;
}

/* An object of plain strings (the trace context, ids) is read in place, without a parse tree;
 * anything else is parsed; the sinks see the same headers either way. */
static void flat_headers_read_in_place(void **state)
{
    (void)state;
    pb_result_t res;
    pb_event_t ev;
    const char *val;
    size_t len;
    static const char tp[] = "{\"traceparent\": \"00-4bf9-00f0-01\", \"tracestate\": \"a=1, b=2\"}";
    assert_true(prepare(tp, 2, &res, &ev));
    assert_null(ev.header_obj);
    assert_int_equal(ev.flat_headers, 2);
    assert_int_equal(pb_header_count(&ev), 2);
    assert_string_equal(walk(&ev), "traceparent=00-4bf9-00f0-01;tracestate=a=1, b=2;");
    assert_true(pb_header_string(&ev, "tracestate", &val, &len));
    assert_int_equal(len, 8);
    assert_memory_equal(val, "a=1, b=2", 8);
    assert_false(pb_header_string(&ev, "trace", &val, &len));
    pb_sink_release(&ev);
    assert_int_equal(ev.flat_headers, 0);

    /* blanks anywhere, UTF-8, an empty string, an empty key */
    assert_true(prepare(" {\"caf\xc3\xa9\" :\"\",\"\":\"x\" } \n", 2, &res, &ev));
    assert_int_equal(ev.flat_headers, 2);
    assert_string_equal(walk(&ev), "caf\xc3\xa9=;=x;");

    /* parsed: an escape, a number, a nested object; the same walk */
    static const char *const parsed[][2] = {
        {"{\"a\": \"x\\\"y\", \"b\": \"z\"}", "a=x\"y;b=z;"},
        {"{\"a\": \"x\", \"n\": 2}", "a=x;n=2;"},
        {"{\"o\": {\"p\": \"q\"}}", "o={\"p\":\"q\"};"},
        {"{\"a\": \"\\u00e9\"}", "a=\xc3\xa9;"},
        {"{\"k\": \"a\", \"k\": \"b\"}", "k=b;"}, /* a repeated name: the parser keeps the last */
    };
    for (size_t i = 0; i < sizeof parsed / sizeof parsed[0]; i++) {
        assert_true(prepare(parsed[i][0], 2, &res, &ev));
        assert_int_equal(ev.flat_headers, 0);
        assert_non_null(ev.header_obj);
        assert_string_equal(walk(&ev), parsed[i][1]);
        pb_sink_release(&ev);
    }
    assert_true(prepare("{\"a\": \"x\", \"n\": 2}", 2, &res, &ev));
    assert_true(pb_header_string(&ev, "a", &val, &len));
    assert_false(pb_header_string(&ev, "n", &val, &len)); /* not a string */
    pb_sink_release(&ev);

    /* what jansson refuses is refused on the way in: not UTF-8, text after the object, a
     * control character, an unfinished object */
    static const char *const bad[] = {"{\"a\": \"\xff\"}", "{\"a\": \"b\"} x", "{\"a\": \"b\tc\"}",
                                      "{\"a\": \"b\"", "{\"a\" \"b\"}", "{\"a\": \"b\",}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (prepare(bad[i], 2, &res, &ev))
            fail_msg("accepted: %s", bad[i]);
        assert_non_null(strstr(res.error, "headers are not valid JSON"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_headers_once),
        cmocka_unit_test(rejects_what_no_sink_can_send),
        cmocka_unit_test(flat_headers_read_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
