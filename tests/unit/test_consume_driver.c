/* Unit tests for the consume driver (consume/driver.c) without servers: a fake source that acts
 * as a broker queue (deliveries stay unsettled until settled; a lost connection redelivers
 * them) and a fake inbox that deduplicates by id, records each aggregate's effects in order, and
 * fails chosen messages a chosen number of times. The loop runs with --drain semantics until
 * the fake broker has nothing left. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "consume/driver.h"

#define MAX_MSGS 2048
#define N_AGGS 8

/* ---- the fake broker and source ---------------------------------------------------------- */

typedef struct fake_msg {
    char id[24], agg[16], body[48];
    int agg_no, k;        /* aggregate number and its k-th message */
    bool acked;
    pb_settle_how_t settled_as; /* with acked: done or dead */
    int retries;           /* times settled "retry later" */
    uint64_t delivered_as; /* tag while delivered and not settled, 0 when in the queue */
} fake_msg_t;

typedef struct fake_source {
    pb_source_t base;
    fake_msg_t msgs[MAX_MSGS];
    size_t n;
    uint64_t next_tag;
    int receives;
    size_t max_outstanding; /* most deliveries unacknowledged at once */
    int lose_at_receive;   /* receive number that reports a lost connection (0: never) */
    int connects;
} fake_source_t;

static fake_source_t g_src;

static pb_status_t src_connect(pb_source_t *s, pb_error_t *err)
{
    (void)s;
    (void)err;
    g_src.connects++;
    return PB_OK;
}

/* The connection is gone: every delivery not acknowledged goes back to the queue. */
static void redeliver_all(void)
{
    for (size_t i = 0; i < g_src.n; i++)
        g_src.msgs[i].delivered_as = 0;
}

static pb_status_t src_receive(pb_source_t *s, pb_message_t *out, size_t max, int64_t wait_ms,
                               int64_t batch_wait_ms, size_t *n, pb_error_t *err)
{
    (void)s;
    (void)wait_ms;
    (void)batch_wait_ms;
    *n = 0;
    g_src.receives++;
    if (g_src.lose_at_receive && g_src.receives == g_src.lose_at_receive) {
        redeliver_all();
        return pb_fail(err, PB_TRANSIENT, "fake connection lost");
    }
    for (size_t i = 0; i < g_src.n && *n < max; i++) {
        fake_msg_t *f = &g_src.msgs[i];
        if (f->acked || f->delivered_as)
            continue;
        f->delivered_as = ++g_src.next_tag;
        pb_message_t *m = &out[(*n)++];
        memset(m, 0, sizeof *m);
        m->tag = f->delivered_as;
        m->message_id = f->id;
        m->type = "t.v1";
        m->aggregate_type = "order";
        m->aggregate_id = f->agg;
        m->body = f->body;
        m->body_len = strlen(f->body);
        m->headers = "{}";
    }
    size_t outstanding = 0;
    for (size_t i = 0; i < g_src.n; i++)
        outstanding += g_src.msgs[i].delivered_as != 0;
    if (outstanding > g_src.max_outstanding)
        g_src.max_outstanding = outstanding;
    return PB_OK;
}

static fake_msg_t *by_tag(uint64_t tag)
{
    for (size_t i = 0; i < g_src.n; i++)
        if (g_src.msgs[i].delivered_as == tag)
            return &g_src.msgs[i];
    return NULL;
}

static pb_status_t src_settle(pb_source_t *s, const pb_settle_t *list, size_t n, pb_error_t *err)
{
    (void)s;
    (void)err;
    for (size_t i = 0; i < n; i++) {
        fake_msg_t *f = by_tag(list[i].tag);
        assert_non_null(f); /* settled once, and only what was handed out */
        f->delivered_as = 0;
        if (list[i].how == PB_SETTLE_RETRY) {
            f->retries++;
            continue;
        }
        f->acked = true;
        f->settled_as = list[i].how;
    }
    return PB_OK;
}

static pb_status_t src_pending(pb_source_t *s, int64_t *pending, pb_error_t *err)
{
    (void)s;
    (void)err;
    *pending = 0;
    for (size_t i = 0; i < g_src.n; i++)
        *pending += !g_src.msgs[i].acked;
    return PB_OK;
}

static void src_free(pb_source_t *s)
{
    (void)s;
}

static const pb_source_ops_t fake_source_ops = {
    .name = "fake",
    .connect = src_connect,
    .receive = src_receive,
    .settle = src_settle,
    .pending = src_pending,
    .free = src_free,
};

/* ---- the fake inbox ---------------------------------------------------------------------- */

typedef struct fake_inbox {
    pthread_mutex_t lock; /* lanes call handle in parallel */
    bool handled[MAX_MSGS];
    int effects[N_AGGS][MAX_MSGS]; /* per aggregate: k of each effect, in order */
    int n_effects[N_AGGS];
    int fails_left[MAX_MSGS];       /* handler failures still to come, per message */
    int attempts[MAX_MSGS];
    int connect_failures_left;
    int connects, duplicates;
} fake_inbox_t;

static fake_inbox_t g_inbox;

static int index_of(const char *id)
{
    return atoi(id + 1);
}

static pb_status_t inbox_connect(void *ctx, int n_lanes, pb_error_t *err)
{
    (void)ctx;
    (void)n_lanes;
    g_inbox.connects++;
    if (g_inbox.connect_failures_left > 0) {
        g_inbox.connect_failures_left--;
        return pb_fail(err, PB_TRANSIENT, "fake database unreachable");
    }
    return PB_OK;
}

static void inbox_disconnect(void *ctx)
{
    (void)ctx;
}

/* As pb_inbox_handle: one aggregate's messages in order; a failure holds back the later ones
 * of its aggregate in the batch. */
static pb_status_t inbox_handle(void *ctx, int lane, const pb_message_t *msgs,
                                const uint8_t *flags, size_t n, pb_inbox_verdict_t *v,
                                pb_inbox_counts_t *counts, pb_error_t *err)
{
    (void)ctx;
    (void)lane;
    (void)flags;
    (void)err;
    pthread_mutex_lock(&g_inbox.lock);
    for (size_t i = 0; i < n; i++) {
        v[i] = (pb_inbox_verdict_t){PB_INBOX_DONE, 0, 0};
        bool behind = false;
        for (size_t j = 0; j < i; j++)
            behind |= !pb_inbox_settles(&v[j]) && pb_inbox_same_aggregate(&msgs[i], &msgs[j]);
        if (behind) {
            v[i].action = PB_INBOX_HOLD;
            continue;
        }
        int x = index_of(msgs[i].message_id);
        if (g_inbox.handled[x]) {
            g_inbox.duplicates++;
            counts->duplicates++;
            continue;
        }
        g_inbox.attempts[x]++;
        if (g_inbox.fails_left[x] < 0) { /* refused: to the dead letters at once */
            g_inbox.handled[x] = true;
            counts->dead++;
            v[i] = (pb_inbox_verdict_t){PB_INBOX_DEAD, 0, 0};
            continue;
        }
        if (g_inbox.fails_left[x] > 0) {
            g_inbox.fails_left[x]--;
            counts->failed++;
            v[i] = (pb_inbox_verdict_t){PB_INBOX_REQUEUE, 20, 0};
            continue;
        }
        g_inbox.handled[x] = true;
        fake_msg_t *f = &g_src.msgs[x];
        g_inbox.effects[f->agg_no][g_inbox.n_effects[f->agg_no]++] = f->k;
        counts->processed++;
    }
    pthread_mutex_unlock(&g_inbox.lock);
    return PB_OK;
}

static const pb_consume_inbox_ops_t fake_inbox_ops = {
    .connect = inbox_connect,
    .disconnect = inbox_disconnect,
    .handle = inbox_handle,
};

/* ---- set-up ------------------------------------------------------------------------------ */

static pb_config_t g_cfg;
static volatile sig_atomic_t g_stop;

static int setup(void **state)
{
    (void)state;
    memset(&g_src, 0, sizeof g_src);
    g_src.base.ops = &fake_source_ops;
    memset(&g_inbox, 0, sizeof g_inbox);
    pthread_mutex_init(&g_inbox.lock, NULL);
    pb_config_init(&g_cfg);
    g_cfg.consume_batch_size = 16;
    g_cfg.consume_lanes = 3;
    g_cfg.consume_batch_wait = 0;
    g_cfg.consume_reconnect_cap = 10;
    g_src.base.cfg = &g_cfg;
    g_stop = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    pthread_mutex_destroy(&g_inbox.lock);
    pb_config_free(&g_cfg);
    return 0;
}

/* per_agg messages of each of n_aggs aggregates, interleaved: agg 0 k 1, agg 1 k 1, ... */
static void fill(int n_aggs, int per_agg, size_t body_bytes)
{
    for (int k = 1; k <= per_agg; k++)
        for (int a = 0; a < n_aggs; a++) {
            fake_msg_t *f = &g_src.msgs[g_src.n];
            snprintf(f->id, sizeof f->id, "m%zu", g_src.n);
            snprintf(f->agg, sizeof f->agg, "a%d", a);
            memset(f->body, 'x', body_bytes < sizeof f->body ? body_bytes : sizeof f->body - 1);
            f->agg_no = a;
            f->k = k;
            g_src.n++;
        }
}

static pb_status_t drive(void)
{
    pb_consume_setup_t s = {.cfg = &g_cfg, .src = &g_src.base, .inbox = &fake_inbox_ops,
                            .inbox_ctx = &g_inbox, .drain = true, .stop = &g_stop};
    pb_error_t err;
    return pb_consume_drive(&s, &err);
}

/* Every aggregate's effects are 1..per_agg, each once. */
static void assert_all_in_order(int n_aggs, int per_agg)
{
    for (int a = 0; a < n_aggs; a++) {
        assert_int_equal(g_inbox.n_effects[a], per_agg);
        for (int k = 0; k < per_agg; k++)
            assert_int_equal(g_inbox.effects[a][k], k + 1);
    }
    for (size_t i = 0; i < g_src.n; i++)
        assert_true(g_src.msgs[i].acked);
}

/* ---- tests ------------------------------------------------------------------------------- */

static void drains_everything_once_in_order_over_lanes(void **state)
{
    (void)state;
    fill(N_AGGS, 40, 8);
    assert_int_equal(drive(), PB_OK);
    assert_all_in_order(N_AGGS, 40);
    assert_int_equal(g_inbox.duplicates, 0);
}

static void failed_message_holds_back_only_its_aggregate(void **state)
{
    (void)state;
    fill(4, 10, 8);
    g_inbox.fails_left[0] = 2; /* aggregate 0's first message */
    assert_int_equal(drive(), PB_OK);
    assert_all_in_order(4, 10);
    assert_int_equal(g_inbox.attempts[0], 3);
    /* the failure was retried by the consumer itself, never given back to the broker */
    assert_int_equal(g_src.connects, 1);
}

static void lost_broker_connection_redelivers_and_the_inbox_absorbs(void **state)
{
    (void)state;
    fill(N_AGGS, 20, 8);
    g_src.lose_at_receive = 4;
    assert_int_equal(drive(), PB_OK);
    assert_all_in_order(N_AGGS, 20);
    assert_int_equal(g_src.connects, 2);
}

static void unreachable_database_is_waited_for(void **state)
{
    (void)state;
    fill(2, 5, 8);
    g_inbox.connect_failures_left = 2;
    assert_int_equal(drive(), PB_OK);
    assert_int_equal(g_inbox.connects, 3);
    assert_all_in_order(2, 5);
}

/* Past consume.max_held_bytes nothing fresh is taken until the failed message goes on: what is
 * delivered and unacknowledged stays near the bound plus one batch (without the bound all 60
 * would be), and nothing is given back, so the broker's order holds. */
static void byte_bound_takes_nothing_new_until_held_ones_go_on(void **state)
{
    (void)state;
    fill(1, 60, 40);
    g_cfg.consume_max_held_bytes = 400; /* about six held copies */
    g_inbox.fails_left[0] = 3;
    assert_int_equal(drive(), PB_OK);
    assert_all_in_order(1, 60);
    assert_true(g_src.max_outstanding <= 6 + 16 + 1);
}

/* A message the inbox dead-letters is settled dead, the others done, and its aggregate goes on
 * behind it. */
static void dead_message_is_settled_dead_and_its_aggregate_goes_on(void **state)
{
    (void)state;
    fill(2, 5, 8);
    g_inbox.fails_left[0] = -1; /* aggregate 0's first message */
    assert_int_equal(drive(), PB_OK);
    assert_int_equal(g_inbox.n_effects[0], 4);
    for (int k = 0; k < 4; k++)
        assert_int_equal(g_inbox.effects[0][k], k + 2);
    assert_int_equal(g_inbox.n_effects[1], 5);
    for (size_t i = 0; i < g_src.n; i++) {
        assert_true(g_src.msgs[i].acked);
        assert_int_equal(g_src.msgs[i].settled_as, i == 0 ? PB_SETTLE_DEAD : PB_SETTLE_DONE);
    }
}

/* At consume.max_held, fresh messages of a held aggregate are settled "retry later": the broker
 * hands them out again, and each still takes effect once, in order. */
static void count_bound_settles_retry_later(void **state)
{
    (void)state;
    fill(1, 30, 8);
    g_cfg.consume_max_held = 3;
    g_inbox.fails_left[0] = 2;
    assert_int_equal(drive(), PB_OK);
    assert_all_in_order(1, 30);
    int retries = 0;
    for (size_t i = 0; i < g_src.n; i++)
        retries += g_src.msgs[i].retries;
    assert_true(retries > 0);
    assert_int_equal(g_inbox.duplicates, 0);
}

int main(void)
{
    pb_log_set_level("error");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(drains_everything_once_in_order_over_lanes, setup, teardown),
        cmocka_unit_test_setup_teardown(failed_message_holds_back_only_its_aggregate, setup, teardown),
        cmocka_unit_test_setup_teardown(lost_broker_connection_redelivers_and_the_inbox_absorbs, setup, teardown),
        cmocka_unit_test_setup_teardown(unreachable_database_is_waited_for, setup, teardown),
        cmocka_unit_test_setup_teardown(byte_bound_takes_nothing_new_until_held_ones_go_on, setup, teardown),
        cmocka_unit_test_setup_teardown(dead_message_is_settled_dead_and_its_aggregate_goes_on, setup, teardown),
        cmocka_unit_test_setup_teardown(count_bound_settles_retry_later, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
