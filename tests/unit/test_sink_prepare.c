/* pb_sink_prepare: the event's headers parsed once for every sink, then the sink's check. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_headers_once),
        cmocka_unit_test(rejects_what_no_sink_can_send),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
