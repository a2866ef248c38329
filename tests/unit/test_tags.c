/* Unit tests for source/tags.c, the delivery-tag table every source keeps: tags rise and are
 * never reused, a settled tag is not found again, a walk goes on across settles, and the table
 * reclaims its room as the front is settled. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "source/tags.h"

static int items[5000];

static void tags_rise_and_settled_ones_are_gone(void **state)
{
    (void)state;
    pb_tags_t t = {0};
    uint64_t a = pb_tags_add(&t, &items[0], 10, 1);
    uint64_t b = pb_tags_add(&t, &items[1], 11, 2);
    uint64_t c = pb_tags_add(&t, &items[2], 12, 3);
    assert_true(a < b && b < c);
    assert_ptr_equal(pb_tags_find(&t, b)->item, &items[1]);
    assert_int_equal(pb_tags_find(&t, c)->value, 12);
    pb_tags_settle(&t, pb_tags_find(&t, b));
    assert_null(pb_tags_find(&t, b));
    assert_int_equal(t.live, 2);
    assert_null(pb_tags_find(&t, c + 1)); /* never handed out */
    pb_tags_clear(&t);
    assert_null(pb_tags_find(&t, a));
    assert_true(pb_tags_add(&t, &items[3], 0, 4) > c); /* not reused after a clear */
    pb_tags_free(&t);
}

static void a_walk_goes_on_while_entries_are_settled(void **state)
{
    (void)state;
    pb_tags_t t = {0};
    for (int i = 0; i < 10; i++)
        pb_tags_add(&t, &items[i], (uint64_t)i, 0);
    int seen = 0;
    for (pb_tag_entry_t *e = pb_tags_first(&t); e;) {
        pb_tag_entry_t *next = pb_tags_next(&t, e);
        if (e->value % 2 == 0)
            pb_tags_settle(&t, e);
        seen++;
        e = next;
    }
    assert_int_equal(seen, 10);
    assert_int_equal(t.live, 5);
    int odd = 0;
    for (pb_tag_entry_t *e = pb_tags_first(&t); e; e = pb_tags_next(&t, e))
        odd += e->value % 2 == 1;
    assert_int_equal(odd, 5);
    pb_tags_free(&t);
}

static void settled_front_room_is_reused(void **state)
{
    (void)state;
    pb_tags_t t = {0};
    /* a steady state of 10 outstanding over 5000 deliveries stays in the first allocation */
    uint64_t tags[5000];
    for (int i = 0; i < 5000; i++) {
        tags[i] = pb_tags_add(&t, &items[i], 0, 0);
        if (i >= 10)
            pb_tags_settle(&t, pb_tags_find(&t, tags[i - 10]));
    }
    assert_int_equal(t.live, 10);
    assert_int_equal(t.cap, 1024);
    for (int i = 4990; i < 5000; i++)
        assert_ptr_equal(pb_tags_find(&t, tags[i])->item, &items[i]);
    pb_tags_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tags_rise_and_settled_ones_are_gone),
        cmocka_unit_test(a_walk_goes_on_while_entries_are_settled),
        cmocka_unit_test(settled_front_room_is_reused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
