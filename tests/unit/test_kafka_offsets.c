/* kafka_offsets: a Kafka partition is committable only up to its lowest offset not acknowledged;
 * acknowledgements in any order, requeue lookups, revokes, and every record released once. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "source/kafka_offsets.h"

static int released;
static void count_release(void *data, void *arg)
{
    (void)arg;
    assert_non_null(data);
    released++;
}

typedef struct commits {
    char topic[8][32];
    int32_t partition[8];
    int64_t next[8];
    size_t n;
} commits_t;

static void collect(const char *topic, int32_t partition, int64_t next, void *arg)
{
    commits_t *c = arg;
    snprintf(c->topic[c->n], sizeof c->topic[c->n], "%s", topic);
    c->partition[c->n] = partition;
    c->next[c->n++] = next;
}

static commits_t take(pb_kafka_offsets_t *t)
{
    commits_t c = {0};
    size_t n = pb_kafka_offsets_take_commits(t, collect, &c);
    assert_int_equal(n, c.n);
    return c;
}

static int dummy[16];

static void commits_stop_at_the_oldest_unacknowledged(void **state)
{
    (void)state;
    released = 0;
    pb_kafka_offsets_t *t = pb_kafka_offsets_new(count_release, NULL);
    pb_kafka_offsets_assign(t, "orders", 0);
    pb_kafka_offsets_assign(t, "orders", 1);
    uint64_t a = pb_kafka_offsets_record(t, "orders", 0, 10, &dummy[0]);
    uint64_t b = pb_kafka_offsets_record(t, "orders", 0, 11, &dummy[1]);
    uint64_t c = pb_kafka_offsets_record(t, "orders", 1, 5, &dummy[2]);
    uint64_t d = pb_kafka_offsets_record(t, "orders", 0, 12, &dummy[3]);
    assert_true(a && b > a && c > b && d > c); /* tags in hand-out order */
    assert_int_equal(pb_kafka_offsets_record(t, "payments", 0, 1, &dummy[4]), 0); /* not ours */

    assert_true(pb_kafka_offsets_ack(t, b)); /* 10 still held: nothing for partition 0 */
    assert_true(pb_kafka_offsets_ack(t, c));
    commits_t k = take(t);
    assert_int_equal(k.n, 1);
    assert_int_equal(k.partition[0], 1);
    assert_int_equal(k.next[0], 6); /* Kafka stores the next offset to read */
    assert_int_equal(take(t).n, 0); /* taken once */

    assert_ptr_equal(pb_kafka_offsets_lookup(t, a), &dummy[0]); /* held: can be handed out again */
    assert_null(pb_kafka_offsets_lookup(t, b));                 /* acknowledged */
    assert_true(pb_kafka_offsets_ack(t, a));
    k = take(t);
    assert_int_equal(k.n, 1);
    assert_string_equal(k.topic[0], "orders");
    assert_int_equal(k.next[0], 12); /* 10 and 11, not 12 */
    assert_false(pb_kafka_offsets_ack(t, a)); /* twice */
    assert_false(pb_kafka_offsets_ack(t, 999)); /* never handed out */

    assert_true(pb_kafka_offsets_ack(t, d));
    k = take(t);
    assert_int_equal(k.n, 1);
    assert_int_equal(k.next[0], 13);
    assert_int_equal(released, 4); /* each acknowledged record once */
    pb_kafka_offsets_free(t);
    assert_int_equal(released, 4);
}

static void a_revoke_drops_what_is_unacknowledged(void **state)
{
    (void)state;
    released = 0;
    pb_kafka_offsets_t *t = pb_kafka_offsets_new(count_release, NULL);
    pb_kafka_offsets_assign(t, "orders", 3);
    uint64_t a = pb_kafka_offsets_record(t, "orders", 3, 100, &dummy[0]);
    uint64_t b = pb_kafka_offsets_record(t, "orders", 3, 101, &dummy[1]);
    uint64_t c = pb_kafka_offsets_record(t, "orders", 3, 102, &dummy[2]);
    assert_true(pb_kafka_offsets_ack(t, b));
    assert_int_equal(pb_kafka_offsets_revoke(t, "orders", 3), 2); /* 100 and 102 */
    assert_int_equal(released, 3);
    assert_int_equal(take(t).n, 0); /* nothing past 100 was committable */
    assert_false(pb_kafka_offsets_ack(t, a)); /* late acknowledgements are ignored */
    assert_null(pb_kafka_offsets_lookup(t, c));
    assert_int_equal(pb_kafka_offsets_count(t), 0);

    /* assigned again: afresh, from what the group committed */
    pb_kafka_offsets_assign(t, "orders", 3);
    uint64_t e = pb_kafka_offsets_record(t, "orders", 3, 100, &dummy[3]);
    assert_true(e > c); /* a tag is never reused */
    assert_false(pb_kafka_offsets_ack(t, c));
    assert_true(pb_kafka_offsets_ack(t, e));
    commits_t k = take(t);
    assert_int_equal(k.n, 1);
    assert_int_equal(k.next[0], 101);
    pb_kafka_offsets_free(t);
    assert_int_equal(released, 4);
}

static void many_out_of_order_acknowledgements(void **state)
{
    (void)state;
    released = 0;
    pb_kafka_offsets_t *t = pb_kafka_offsets_new(count_release, NULL);
    pb_kafka_offsets_assign(t, "t", 0);
    enum { N = 5000 };
    static uint64_t tags[N];
    for (int i = 0; i < N; i++)
        tags[i] = pb_kafka_offsets_record(t, "t", 0, i, &dummy[i % 16]);
    for (int i = 1; i < N; i++) /* all but the first: nothing committable */
        assert_true(pb_kafka_offsets_ack(t, tags[i]));
    assert_int_equal(take(t).n, 0);
    assert_ptr_equal(pb_kafka_offsets_lookup(t, tags[0]), &dummy[0]);
    assert_true(pb_kafka_offsets_ack(t, tags[0]));
    commits_t k = take(t);
    assert_int_equal(k.n, 1);
    assert_int_equal(k.next[0], N);
    /* the records after the compaction are still found */
    uint64_t x = pb_kafka_offsets_record(t, "t", 0, N, &dummy[0]);
    uint64_t y = pb_kafka_offsets_record(t, "t", 0, N + 1, &dummy[1]);
    assert_true(pb_kafka_offsets_ack(t, y));
    assert_ptr_equal(pb_kafka_offsets_lookup(t, x), &dummy[0]);
    pb_kafka_offsets_free(t);
    assert_int_equal(released, N + 2);
}

static void partitions_read_to_their_end(void **state)
{
    (void)state;
    pb_kafka_offsets_t *t = pb_kafka_offsets_new(NULL, NULL);
    assert_true(pb_kafka_offsets_all_at_end(t)); /* none: nothing to wait for */
    pb_kafka_offsets_assign(t, "t", 0);
    pb_kafka_offsets_assign(t, "t", 1);
    assert_false(pb_kafka_offsets_all_at_end(t));
    pb_kafka_offsets_set_at_end(t, "t", 0);
    assert_false(pb_kafka_offsets_all_at_end(t));
    pb_kafka_offsets_set_at_end(t, "t", 1);
    pb_kafka_offsets_set_at_end(t, "other", 0); /* not tracked: no effect */
    assert_true(pb_kafka_offsets_all_at_end(t));
    pb_kafka_offsets_assign(t, "t", 1); /* reassigned: read it again */
    assert_false(pb_kafka_offsets_all_at_end(t));
    int32_t p;
    assert_string_equal(pb_kafka_offsets_partition(t, 1, &p), "t");
    assert_int_equal(p, 1);
    pb_kafka_offsets_free(t);
}

/* What --drain compares with the cluster's committed offsets: the acknowledged prefix stays
 * known after it was taken for a commit, and only for the partitions assigned here. */
static void the_acknowledged_prefix_of_a_partition(void **state)
{
    (void)state;
    pb_kafka_offsets_t *t = pb_kafka_offsets_new(NULL, NULL);
    int64_t next = 99;
    assert_false(pb_kafka_offsets_find(t, "t", 0, &next));
    assert_int_equal(next, -1);
    pb_kafka_offsets_assign(t, "t", 0);
    assert_true(pb_kafka_offsets_find(t, "t", 0, &next));
    assert_int_equal(next, -1); /* nothing acknowledged since the assignment */
    uint64_t a = pb_kafka_offsets_record(t, "t", 0, 7, &dummy[0]);
    uint64_t b = pb_kafka_offsets_record(t, "t", 0, 8, &dummy[1]);
    assert_true(pb_kafka_offsets_ack(t, b));
    assert_true(pb_kafka_offsets_find(t, "t", 0, &next));
    assert_int_equal(next, -1); /* 7 is still held */
    assert_true(pb_kafka_offsets_ack(t, a));
    commits_t c = take(t);
    assert_int_equal(c.n, 1);
    assert_true(pb_kafka_offsets_find(t, "t", 0, &next));
    assert_int_equal(next, 9); /* taken for a commit, still known */
    assert_false(pb_kafka_offsets_find(t, "t", 1, &next));
    (void)pb_kafka_offsets_revoke(t, "t", 0);
    assert_false(pb_kafka_offsets_find(t, "t", 0, &next));
    pb_kafka_offsets_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(commits_stop_at_the_oldest_unacknowledged),
        cmocka_unit_test(a_revoke_drops_what_is_unacknowledged),
        cmocka_unit_test(many_out_of_order_acknowledgements),
        cmocka_unit_test(partitions_read_to_their_end),
        cmocka_unit_test(the_acknowledged_prefix_of_a_partition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
