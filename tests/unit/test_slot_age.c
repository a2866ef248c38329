/* Unit tests for the slot's age (relay/slot_age.c): the commit time of the oldest transaction
 * with events read and not confirmed, let go of as the confirmed position passes it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "relay/slot_age.h"

#define PG_EPOCH_UNIX_US INT64_C(946684800000000)
#define SEC INT64_C(1000000)

static void oldest_unconfirmed_ages(void **state)
{
    (void)state;
    pb_slot_age_t a;
    pb_slot_age_init(&a);
    assert_int_equal(pb_slot_age_ms(&a, PG_EPOCH_UNIX_US + 100 * SEC), 0); /* nothing held */
    /* three transactions, committed at 10 s, 20 s, 30 s (pgoutput time), two
     * events each */
    for (int t = 1; t <= 3; t++)
        for (int e = 0; e < 2; e++)
            pb_slot_age_note(&a, (uint64_t)t * 1000, t * 10 * SEC);
    assert_int_equal(a.n, 3);
    assert_int_equal(pb_slot_age_ms(&a, PG_EPOCH_UNIX_US + 100 * SEC), 90000);
    /* confirmed up to the first commit record: not past it yet */
    pb_slot_age_confirmed(&a, 1000);
    assert_int_equal(pb_slot_age_ms(&a, PG_EPOCH_UNIX_US + 100 * SEC), 90000);
    /* past the first, not the second */
    pb_slot_age_confirmed(&a, 1500);
    assert_int_equal(pb_slot_age_ms(&a, PG_EPOCH_UNIX_US + 100 * SEC), 80000);
    pb_slot_age_confirmed(&a, 3001);
    assert_int_equal(pb_slot_age_ms(&a, PG_EPOCH_UNIX_US + 100 * SEC), 0);
    /* a server clock ahead of the relay's: no negative age */
    pb_slot_age_note(&a, 4000, 200 * SEC);
    assert_int_equal(pb_slot_age_ms(&a, PG_EPOCH_UNIX_US + 100 * SEC), 0);
    /* read again after the stream was opened anew: not noted twice */
    pb_slot_age_note(&a, 4000, 200 * SEC);
    pb_slot_age_note(&a, 3500, 150 * SEC);
    assert_int_equal(a.n, 1);
    pb_slot_age_free(&a);
}

/* The ring grows past its first size with entries wrapped around, keeping the order. */
static void grows_in_order(void **state)
{
    (void)state;
    pb_slot_age_t a;
    pb_slot_age_init(&a);
    uint64_t lsn = 0;
    for (int i = 0; i < 50; i++) {
        lsn++;
        pb_slot_age_note(&a, lsn, (int64_t)lsn * SEC);
    }
    pb_slot_age_confirmed(&a, 41); /* 40 let go: the head moves on */
    for (int i = 0; i < 500; i++) {
        lsn++;
        pb_slot_age_note(&a, lsn, (int64_t)lsn * SEC);
    }
    assert_int_equal(a.n, 510);
    assert_int_equal(pb_slot_age_ms(&a, PG_EPOCH_UNIX_US + 1000 * SEC), (1000 - 41) * 1000);
    pb_slot_age_confirmed(&a, 500);
    assert_int_equal(pb_slot_age_ms(&a, PG_EPOCH_UNIX_US + 1000 * SEC), (1000 - 500) * 1000);
    assert_int_equal(a.n, 51);
    pb_slot_age_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(oldest_unconfirmed_ages),
        cmocka_unit_test(grows_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
