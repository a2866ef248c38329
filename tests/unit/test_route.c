/* Unit tests for routing templates. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "common/route.h"

static pb_event_t sample(void)
{
    pb_event_t ev = {0};
    ev.event_id = "3f1c2a9e-0000-4000-8000-000000000001";
    ev.aggregate_type = "order";
    ev.aggregate_id = "42";
    ev.event_type = "order.paid.v1";
    ev.payload = "{}";
    return ev;
}

static void renders_placeholders(void **state)
{
    (void)state;
    pb_event_t ev = sample();
    char out[256];
    assert_true(pb_route_render("{aggregate_type}.{event_type}", &ev, out, sizeof out));
    assert_string_equal(out, "order.order.paid.v1");
    assert_true(pb_route_render("x.{aggregate_id}.{event_id}", &ev, out, sizeof out));
    assert_string_equal(out, "x.42.3f1c2a9e-0000-4000-8000-000000000001");
    assert_true(pb_route_render("static", &ev, out, sizeof out));
    assert_string_equal(out, "static");
}

static void destination_overrides_template(void **state)
{
    (void)state;
    pb_event_t ev = sample();
    ev.destination = "billing.special";
    char out[256];
    assert_true(pb_route_render("{aggregate_type}.{event_type}", &ev, out, sizeof out));
    assert_string_equal(out, "billing.special");
    ev.destination = ""; /* empty means none */
    assert_true(pb_route_render("{aggregate_type}", &ev, out, sizeof out));
    assert_string_equal(out, "order");
}

static void reports_overflow(void **state)
{
    (void)state;
    pb_event_t ev = sample();
    char out[8];
    assert_false(pb_route_render("{aggregate_type}.{event_type}", &ev, out, sizeof out));
    assert_int_equal(strlen(out), 7);
    assert_true(pb_route_render("{aggregate_type}", &ev, out, sizeof out));
    assert_string_equal(out, "order");
}

static void checks_templates(void **state)
{
    (void)state;
    pb_error_t err;
    assert_int_equal(pb_route_check_template("{aggregate_type}.{event_type}", &err), PB_OK);
    assert_int_equal(pb_route_check_template("plain.key", &err), PB_OK);
    assert_int_equal(pb_route_check_template("", &err), PB_FATAL);
    assert_int_equal(pb_route_check_template("{aggregate}.x", &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "unknown placeholder"));
    assert_int_equal(pb_route_check_template("a}b", &err), PB_FATAL);
    assert_int_equal(pb_route_check_template("{event_type", &err), PB_FATAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(renders_placeholders),
        cmocka_unit_test(destination_overrides_template),
        cmocka_unit_test(reports_overflow),
        cmocka_unit_test(checks_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
