/* Unit tests for the settle arrays (one set-based statement per outcome needs exact literals)
 * and the claim's multirange of the ids in flight. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "common/str.h"
#include "store/outbox.h"

static void builds_arrays_per_outcome(void **state)
{
    (void)state;
    pb_event_t events[5] = {{.id = 10}, {.id = 11}, {.id = 12}, {.id = 13}, {.id = 14}};
    pb_result_t results[5] = {
        {.outcome = PB_OUT_PUBLISHED},
        {.outcome = PB_OUT_RETRY, .error = "channel closed: \"x\" \\ y"},
        {.outcome = PB_OUT_PUBLISHED},
        {.outcome = PB_OUT_REJECT, .error = "too large"},
        {.outcome = PB_OUT_HELD},
    };
    pb_settle_plan_t plans[5] = {
        {0}, {.retry_delay_ms = 1500}, {0}, {.dead = true, .reason = "too large"}, {0},
    };
    pb_outbox_t ob;
    pb_outbox_init(&ob, NULL, false);
    ob.events = events;
    ob.n_events = 5;
    pb_settle_counts_t counts;
    pb_outbox_build_arrays(&ob, results, plans, &counts);
    assert_int_equal(counts.published, 2);
    assert_int_equal(counts.retried, 1);
    assert_int_equal(counts.dead, 1);
    assert_int_equal(counts.untried, 1);
    assert_string_equal(ob.published_ids.data, "{[10,10],[12,12]}");
    assert_string_equal(ob.retry_ids.data, "{11}");
    assert_string_equal(ob.retry_errors.data, "{\"channel closed: \\\"x\\\" \\\\ y\"}");
    assert_string_equal(ob.retry_delays.data, "{1500}");
    assert_string_equal(ob.dead_ids.data, "{13}");
    assert_string_equal(ob.dead_reasons.data, "{\"too large\"}");

    /* a second batch reuses the buffers */
    results[1].outcome = PB_OUT_PUBLISHED;
    results[3].outcome = PB_OUT_PUBLISHED;
    ob.n_events = 4;
    pb_outbox_build_arrays(&ob, results, plans, &counts);
    assert_string_equal(ob.published_ids.data, "{[10,13]}");
    assert_false(ob.published_sparse);
    assert_string_equal(ob.retry_ids.data, "{}");
    assert_string_equal(ob.dead_ids.data, "{}");

    /* ids spread over more than twice their number (relays sharing the outbox): an array */
    events[1].id = 30;
    events[2].id = 31;
    events[3].id = 40;
    pb_outbox_build_arrays(&ob, results, plans, &counts);
    assert_true(ob.published_sparse);
    assert_string_equal(ob.published_ids.data, "{10,30,31,40}");
    ob.events = NULL; /* not owned by the outbox in this test */
    pb_outbox_free(&ob);
}

static void json_strings_are_escaped(void **state)
{
    (void)state;
    pb_buf_t b = {0};
    pb_buf_append_json_string(&b, "a\"b\\c\nd\x01");
    assert_string_equal(b.data, "\"a\\\"b\\\\c\\nd\\u0001\"");
    pb_buf_free(&b);
}

/* The claim skips exactly the ids given: runs of consecutive ids become one range each, in any
 * input order; nothing else may fall inside a range. */
static void in_flight_ids_become_ranges(void **state)
{
    (void)state;
    pb_buf_t b = {0};
    pb_outbox_id_ranges(NULL, 0, &b);
    assert_string_equal(b.data, "{}");
    int64_t one[] = {42};
    pb_outbox_id_ranges(one, 1, &b);
    assert_string_equal(b.data, "{[42,42]}");
    /* two batches interleaved, a parked id at the back (as in ob->events), a gap at 7 */
    int64_t ids[] = {3, 4, 5, 9, 6, 8, 1000000000000, 2};
    pb_outbox_id_ranges(ids, sizeof ids / sizeof ids[0], &b);
    assert_string_equal(b.data, "{[2,6],[8,9],[1000000000000,1000000000000]}");
    int64_t dup[] = {5, 5, 6}; /* never expected, but must not split or widen a range */
    pb_outbox_id_ranges(dup, 3, &b);
    assert_string_equal(b.data, "{[5,6]}");
    /* [x,MAX] is refused by PostgreSQL (its canonical form [x,MAX+1) overflows) */
    int64_t top[] = {INT64_MAX, INT64_MAX - 1, 7};
    pb_outbox_id_ranges(top, 3, &b);
    assert_string_equal(b.data, "{[7,7],[9223372036854775806,)}");
    pb_buf_free(&b);
}

/* Settle names dense ids by ranges (one walk of the primary key) and sparse ones by an array
 * (one index descent each): the boundary is a span of twice their number. */
static void settle_ids_dense_or_sparse(void **state)
{
    (void)state;
    pb_buf_t b = {0};
    int64_t dense[] = {13, 10}; /* walking 10..13 visits 4 = 2 x 2 ids */
    assert_false(pb_outbox_ids_literal(dense, 2, &b));
    assert_string_equal(b.data, "{[10,10],[13,13]}");
    int64_t sparse[] = {14, 10}; /* 10..14 would visit 5 */
    assert_true(pb_outbox_ids_literal(sparse, 2, &b));
    assert_string_equal(b.data, "{10,14}");
    int64_t top[] = {INT64_MAX - 1, INT64_MAX}; /* dense, but a range cannot end at INT64_MAX */
    assert_true(pb_outbox_ids_literal(top, 2, &b));
    assert_string_equal(b.data, "{9223372036854775806,9223372036854775807}");
    assert_true(pb_outbox_ids_literal(NULL, 0, &b));
    assert_string_equal(b.data, "{}");
    pb_buf_free(&b);
}

static int by_value(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The ids come back sorted whatever their order and spread: distinct ids close together (a
 * batch published in the sink's order), repeated ids, ids far apart, negative ones. */
static void settle_ids_sorted_in_any_order(void **state)
{
    (void)state;
    uint64_t x = 88172645463325252u;
    pb_buf_t b = {0};
    int64_t ids[1000], want[1000];
    for (int round = 0; round < 400; round++) {
        size_t n = 2 + (size_t)(round % 7 == 0 ? round % 5 : 998);
        int64_t base = round % 3 == 0 ? -500 : 1000 * round;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            /* round % 4: a permutation of a dense run, a spread of 1-64 per id, repeats, far */
            ids[i] = round % 4 == 0 ? base + (int64_t)i
                     : round % 4 == 1 ? base + (int64_t)(x % (64 * n))
                     : round % 4 == 2 ? base + (int64_t)(x % (n / 2 + 1))
                                      : (int64_t)(x >> 1);
        }
        for (size_t i = n - 1; round % 4 == 0 && i > 0; i--) { /* shuffle the dense run */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            size_t j = (size_t)(x % (i + 1));
            int64_t t = ids[i];
            ids[i] = ids[j];
            ids[j] = t;
        }
        memcpy(want, ids, n * sizeof *ids);
        qsort(want, n, sizeof *want, by_value);
        pb_outbox_ids_literal(ids, n, &b);
        assert_memory_equal(ids, want, n * sizeof *ids);
    }
    pb_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(settle_ids_sorted_in_any_order),
        cmocka_unit_test(builds_arrays_per_outcome),
        cmocka_unit_test(json_strings_are_escaped),
        cmocka_unit_test(in_flight_ids_become_ranges),
        cmocka_unit_test(settle_ids_dense_or_sparse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
