/* Unit tests for the log rate limit (common/log_limit.c): one line per interval, each with the
 * count of what was held back since the previous one. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/log_limit.h"

static void first_passes_then_one_per_interval(void **state)
{
    (void)state;
    pb_log_limit_t lim;
    pb_log_limit_init(&lim, 60000);
    uint64_t skipped = 99;
    assert_true(pb_log_limit_pass(&lim, 1000, &skipped));
    assert_int_equal(skipped, 0);
    /* a flood within the minute: nothing written, everything counted */
    for (int i = 0; i < 5000; i++)
        assert_false(pb_log_limit_pass(&lim, 1000 + i * 10, &skipped));
    assert_false(pb_log_limit_pass(&lim, 60999, &skipped));
    /* a minute after the last line: the next one passes and tells the count */
    assert_true(pb_log_limit_pass(&lim, 61000, &skipped));
    assert_int_equal(skipped, 5001);
    /* the count started again */
    assert_false(pb_log_limit_pass(&lim, 61001, &skipped));
    assert_true(pb_log_limit_pass(&lim, 200000, &skipped));
    assert_int_equal(skipped, 1);
    /* after a quiet stretch an occurrence passes at once, with nothing skipped */
    assert_true(pb_log_limit_pass(&lim, 900000, &skipped));
    assert_int_equal(skipped, 0);
}

/* The first occurrence passes whatever the clock says (a monotonic clock may start near 0). */
static void first_passes_at_time_zero(void **state)
{
    (void)state;
    pb_log_limit_t lim;
    pb_log_limit_init(&lim, 60000);
    uint64_t skipped = 7;
    assert_true(pb_log_limit_pass(&lim, 0, &skipped));
    assert_int_equal(skipped, 0);
    assert_false(pb_log_limit_pass(&lim, 59999, &skipped));
    assert_true(pb_log_limit_pass(&lim, 60000, &skipped));
    assert_int_equal(skipped, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_passes_then_one_per_interval),
        cmocka_unit_test(first_passes_at_time_zero),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
