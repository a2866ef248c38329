/* Unit tests for relay.batch_bytes's claim limits (relay/batch_bytes.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "relay/batch_bytes.h"

#define MB (INT64_C(1) << 20)

static void first_claim_is_small_unless_unbounded(void **state)
{
    (void)state;
    assert_int_equal(pb_claim_limit_first(1000, 8 * MB), PB_FIRST_CLAIM);
    assert_int_equal(pb_claim_limit_first(10, 8 * MB), 10);
    assert_int_equal(pb_claim_limit_first(1000, 0), 1000);
}

static void next_claim_fits_the_bytes(void **state)
{
    (void)state;
    /* 300-byte events: batch_size at once */
    assert_int_equal(pb_claim_limit_next(1000, 8 * MB, 64, 64, 64 * 300), 1000);
    /* 100 kB events: 8 MB holds 83 of them */
    assert_int_equal(pb_claim_limit_next(1000, 8 * MB, 64, 64, 64 * 100000), 83);
    /* back to small events: back to batch_size */
    assert_int_equal(pb_claim_limit_next(1000, 8 * MB, 83, 83, 83 * 200), 1000);
    /* one event larger than the bound: one at a time, never none */
    assert_int_equal(pb_claim_limit_next(1000, 8 * MB, 5, 5, 5 * (size_t)(20 * MB)), 1);
    /* nothing found: the limit stays */
    assert_int_equal(pb_claim_limit_next(1000, 8 * MB, 83, 0, 0), 83);
    /* empty payloads count as one byte: no division by zero */
    assert_int_equal(pb_claim_limit_next(1000, 8 * MB, 64, 64, 0), 1000);
    /* no bound */
    assert_int_equal(pb_claim_limit_next(1000, 0, 64, 64, 64 * 100000), 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_claim_is_small_unless_unbounded),
        cmocka_unit_test(next_claim_fits_the_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
