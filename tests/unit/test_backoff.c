/* Unit tests for retry backoff. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/backoff.h"

static void doubles_until_cap(void **state)
{
    (void)state;
    /* rnd close to 1 gives the full delay */
    assert_int_equal(pb_backoff_ms(1, 1000, 300000, 0.9999999), 999);
    assert_int_equal(pb_backoff_ms(2, 1000, 300000, 0.9999999), 1999);
    assert_int_equal(pb_backoff_ms(3, 1000, 300000, 0.9999999), 3999);
    assert_true(pb_backoff_ms(30, 1000, 300000, 0.9999999) <= 300000);
    assert_true(pb_backoff_ms(30, 1000, 300000, 0.9999999) >= 299000);
    /* no overflow for huge attempt numbers */
    assert_true(pb_backoff_ms(1000000, 1000, 300000, 0.5) > 0);
}

static void jitter_stays_within_half(void **state)
{
    (void)state;
    for (int i = 0; i < 1000; i++) {
        double r = pb_random_unit();
        assert_true(r >= 0.0 && r < 1.0);
        int64_t d = pb_backoff_ms(4, 1000, 300000, r);
        assert_true(d >= 4000 && d <= 8000);
    }
    assert_int_equal(pb_backoff_ms(4, 1000, 300000, 0.0), 4000);
    assert_int_equal(pb_backoff_ms(0, 1000, 300000, 0.0), 500);
}

static void random_is_spread(void **state)
{
    (void)state;
    int low = 0;
    for (int i = 0; i < 10000; i++)
        low += pb_random_unit() < 0.5;
    assert_true(low > 4500 && low < 5500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(doubles_until_cap),
        cmocka_unit_test(jitter_stays_within_half),
        cmocka_unit_test(random_is_spread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
