/* Unit tests for the per-type retention rules (relay.dead_letter_retention_types). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "store/retention_rules.h"

static void parses_rules_in_order(void **state)
{
    (void)state;
    pb_retention_rules_t r;
    pb_error_t err;
    assert_int_equal(pb_retention_rules_parse("opt", " payment.* = 90d, debug.tick=1h ,*=0",
                                              &r, &err), PB_OK);
    assert_int_equal(r.n, 3);
    assert_string_equal(r.like.data, "{\"payment.%\",\"debug.tick\",\"%\"}");
    assert_string_equal(r.ages.data, "{7776000000,3600000,0}");
    pb_retention_rules_free(&r);
}

static void empty_spec_gives_no_rules(void **state)
{
    (void)state;
    pb_retention_rules_t r;
    pb_error_t err;
    assert_int_equal(pb_retention_rules_parse("opt", "", &r, &err), PB_OK);
    assert_int_equal(r.n, 0);
    assert_string_equal(r.like.data, "{}");
    assert_string_equal(r.ages.data, "{}");
    pb_retention_rules_free(&r);
    assert_int_equal(pb_retention_rules_parse("opt", "   ", &r, &err), PB_OK);
    assert_int_equal(r.n, 0);
    pb_retention_rules_free(&r);
}

/* LIKE's own characters in a type are literal; quotes and backslashes survive the array. */
static void escapes_like_and_array(void **state)
{
    (void)state;
    pb_retention_rules_t r;
    pb_error_t err;
    assert_int_equal(pb_retention_rules_parse("opt", "a_b%c\\d\"e*=2d", &r, &err), PB_OK);
    assert_string_equal(r.like.data, "{\"a\\\\_b\\\\%c\\\\\\\\d\\\"e%\"}");
    pb_retention_rules_free(&r);
}

static void refuses_bad_rules(void **state)
{
    (void)state;
    const char *bad[] = {"payment.*", "=1d", "a=", "a=soon", "a*b=1d", "a=1d,,b=1d", "a=1d,",
                         ",a=1d", "a b=1d", "a=-1d"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        pb_retention_rules_t r;
        pb_error_t err;
        assert_int_equal(pb_retention_rules_parse("relay.dead_letter_retention_types", bad[i], &r,
                                                  &err), PB_FATAL);
        assert_non_null(strstr(err.msg, "relay.dead_letter_retention_types"));
        assert_null(r.like.data);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_rules_in_order),
        cmocka_unit_test(empty_spec_gives_no_rules),
        cmocka_unit_test(escapes_like_and_array),
        cmocka_unit_test(refuses_bad_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
