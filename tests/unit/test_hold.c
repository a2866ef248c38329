/* Unit tests for the consumer's hold-back (consume/hold.c) without servers: messages made up
 * here, verdicts as the inbox would give them, and a small simulation of the consumer loop
 * (take, receive, admit, handle, settle) against a fake queue and a fake inbox whose handler
 * fails on chosen messages. Time is a number the tests move. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "consume/hold.h"

#define CAP 64

typedef struct fake_msg {
    char id[32];
    char agg[16];
    char body[32];
    pb_message_t m;
} fake_msg_t;

static fake_msg_t g_msgs[1024];
static size_t g_n_msgs;

/* A fresh message: tag = its number; agg NULL: no aggregate. The strings live in g_msgs (the
 * hold must copy what it keeps, so tests overwrite them after use). */
static pb_message_t msg(const char *agg, int64_t seq)
{
    fake_msg_t *f = &g_msgs[g_n_msgs++];
    snprintf(f->id, sizeof f->id, "m%zu", g_n_msgs);
    snprintf(f->body, sizeof f->body, "{\"seq\":%lld}", (long long)seq);
    memset(&f->m, 0, sizeof f->m);
    f->m.tag = g_n_msgs;
    f->m.message_id = f->id;
    f->m.type = "t.v1";
    if (agg) {
        snprintf(f->agg, sizeof f->agg, "%s", agg);
        f->m.aggregate_type = "order";
        f->m.aggregate_id = f->agg;
    }
    f->m.sequence = seq;
    f->m.body = f->body;
    f->m.body_len = strlen(f->body);
    f->m.headers = "{}";
    return f->m;
}

static void scribble(void)
{
    for (size_t i = 0; i < g_n_msgs; i++) {
        memset(g_msgs[i].id, 'X', sizeof g_msgs[i].id - 1);
        memset(g_msgs[i].agg, 'X', sizeof g_msgs[i].agg - 1);
    }
}

static int setup(void **state)
{
    (void)state;
    g_n_msgs = 0;
    return 0;
}

/* pb_hold_admit below the bound (nothing given back) */
static size_t admit(pb_hold_t *h, pb_message_t *b, uint8_t *fl, size_t k, size_t n)
{
    uint64_t back[CAP];
    size_t n_back;
    size_t len = pb_hold_admit(h, b, fl, k, n, false, back, &n_back);
    assert_int_equal(n_back, 0);
    return len;
}

static pb_inbox_verdict_t ack(void) { return (pb_inbox_verdict_t){PB_INBOX_DONE, 0, 0}; }
static pb_inbox_verdict_t retry(int64_t ms) { return (pb_inbox_verdict_t){PB_INBOX_REQUEUE, ms, 0}; }
static pb_inbox_verdict_t hold(int64_t expected) { return (pb_inbox_verdict_t){PB_INBOX_HOLD, 0, expected}; }

/* A failed message holds back the later ones of its aggregate, in the same batch and in later
 * ones; another aggregate goes on; at the retry the failed one comes first, then the rest. */
static void failed_message_holds_back_its_aggregate(void **state)
{
    (void)state;
    pb_hold_t *h = pb_hold_new(60000);
    pb_message_t b[CAP];
    uint8_t fl[CAP];
    pb_settle_t acks[CAP];
    size_t n_acks;
    b[0] = msg("A", 0);
    b[1] = msg("B", 0);
    b[2] = msg("A", 0);
    size_t n = admit(h, b, fl, 0, 3);
    assert_int_equal(n, 3);
    /* sorted per aggregate, arrival kept: A(1), A(3), B(2) */
    assert_int_equal(b[0].tag, 1);
    assert_int_equal(b[1].tag, 3);
    assert_int_equal(b[2].tag, 2);
    pb_inbox_verdict_t v[3] = {retry(100), hold(0), ack()};
    pb_hold_settle(h, b, v, 3, 0, acks, &n_acks);
    assert_int_equal(n_acks, 1);
    assert_int_equal(acks[0].tag, 2);
    assert_int_equal(pb_hold_count(h), 2);
    scribble(); /* the source's strings are gone: the hold has its own copies */

    /* before the retry is due: nothing goes on; a fresh A waits, a fresh B passes */
    assert_int_equal(pb_hold_take(h, b, fl, CAP, 50), 0);
    assert_int_equal(pb_hold_wait_ms(h, 50, 500), 50);
    b[0] = msg("A", 0);
    b[1] = msg("B", 0);
    n = admit(h, b, fl, 0, 2);
    assert_int_equal(n, 1);
    assert_string_equal(b[0].aggregate_id, "B");
    pb_inbox_verdict_t v1[1] = {ack()};
    pb_hold_settle(h, b, v1, 1, 50, acks, &n_acks);
    assert_int_equal(n_acks, 1);
    assert_int_equal(pb_hold_count(h), 3);

    /* due: the failed one first, then what waited, in arrival order */
    size_t k = pb_hold_take(h, b, fl, CAP, 100);
    assert_int_equal(k, 3);
    assert_int_equal(b[0].tag, 1);
    assert_int_equal(b[1].tag, 3);
    assert_int_equal(b[2].tag, 4);
    assert_string_equal(b[0].message_id, "m1");
    assert_string_equal(b[2].aggregate_id, "A");
    n = admit(h, b, fl, k, 0);
    assert_int_equal(n, 3);
    pb_inbox_verdict_t v2[3] = {ack(), ack(), ack()};
    pb_hold_settle(h, b, v2, 3, 100, acks, &n_acks);
    assert_int_equal(n_acks, 3);
    assert_int_equal(pb_hold_count(h), 0);
    pb_hold_free(h);
}

/* Messages without aggregate_id do not wait for each other. */
static void messages_without_aggregate_are_independent(void **state)
{
    (void)state;
    pb_hold_t *h = pb_hold_new(60000);
    pb_message_t b[CAP];
    uint8_t fl[CAP];
    pb_settle_t acks[CAP];
    size_t n_acks;
    b[0] = msg(NULL, 0);
    b[1] = msg(NULL, 0);
    size_t n = admit(h, b, fl, 0, 2);
    pb_inbox_verdict_t v[2] = {retry(100), ack()};
    pb_hold_settle(h, b, v, n, 0, acks, &n_acks);
    assert_int_equal(n_acks, 1);
    b[0] = msg(NULL, 0);
    n = admit(h, b, fl, 0, 1);
    assert_int_equal(n, 1); /* not held behind the failed one */
    pb_inbox_verdict_t v1[1] = {ack()};
    pb_hold_settle(h, b, v1, 1, 10, acks, &n_acks);
    assert_int_equal(pb_hold_count(h), 1);
    assert_int_equal(pb_hold_take(h, b, fl, CAP, 99), 0);
    assert_int_equal(pb_hold_take(h, b, fl, CAP, 100), 1);
    pb_hold_free(h);
}

/* A message ahead of its aggregate's next sequence number waits until the missing one arrives;
 * the batch then has them in sequence order. */
static void early_message_waits_for_the_missing_one(void **state)
{
    (void)state;
    pb_hold_t *h = pb_hold_new(60000);
    pb_message_t b[CAP];
    uint8_t fl[CAP];
    pb_settle_t acks[CAP];
    size_t n_acks;
    b[0] = msg("A", 3);
    b[1] = msg("A", 4);
    size_t n = admit(h, b, fl, 0, 2);
    pb_inbox_verdict_t v[2] = {hold(2), hold(2)};
    pb_hold_settle(h, b, v, n, 0, acks, &n_acks);
    assert_int_equal(n_acks, 0);
    assert_int_equal(pb_hold_take(h, b, fl, CAP, 1000), 0);
    /* another early one does not wake it */
    b[0] = msg("A", 5);
    n = admit(h, b, fl, 0, 1);
    assert_int_equal(n, 0);
    assert_int_equal(pb_hold_take(h, b, fl, CAP, 1000), 0);
    /* the missing one does */
    b[0] = msg("A", 2);
    n = admit(h, b, fl, 0, 1);
    assert_int_equal(n, 0);
    size_t k = pb_hold_take(h, b, fl, CAP, 1000);
    assert_int_equal(k, 4);
    n = admit(h, b, fl, k, 0);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(b[i].sequence, (int64_t)i + 2);
        assert_int_equal(fl[i], 0);
    }
    pb_inbox_verdict_t v2[4] = {ack(), ack(), ack(), ack()};
    pb_hold_settle(h, b, v2, 4, 1000, acks, &n_acks);
    assert_int_equal(n_acks, 4);
    assert_int_equal(pb_hold_count(h), 0);
    pb_hold_free(h);
}

/* A gap that is never filled: after gap_timeout the held messages go on, the first one flagged
 * to skip the gap; the timeout runs from the last progress. */
static void gap_times_out(void **state)
{
    (void)state;
    pb_hold_t *h = pb_hold_new(500);
    pb_message_t b[CAP];
    uint8_t fl[CAP];
    pb_settle_t acks[CAP];
    size_t n_acks;
    b[0] = msg("A", 1);
    b[1] = msg("A", 3);
    size_t n = admit(h, b, fl, 0, 2);
    pb_inbox_verdict_t v[2] = {ack(), hold(2)};
    pb_hold_settle(h, b, v, n, 100, acks, &n_acks);
    assert_int_equal(n_acks, 1);
    assert_int_equal(pb_hold_wait_ms(h, 300, 10000), 300);
    assert_int_equal(pb_hold_take(h, b, fl, CAP, 599), 0);
    size_t k = pb_hold_take(h, b, fl, CAP, 600);
    assert_int_equal(k, 1);
    assert_int_equal(b[0].sequence, 3);
    assert_int_equal(fl[0], PB_INBOX_SKIP_GAP);
    pb_inbox_verdict_t v2[1] = {ack()};
    pb_hold_settle(h, b, v2, 1, 600, acks, &n_acks);
    assert_int_equal(pb_hold_count(h), 0);
    pb_hold_free(h);
}

/* Held behind a message that went to the dead letters (HOLD without a retry, nothing
 * expected): goes on at the next take. */
static void held_behind_a_dead_letter_goes_on(void **state)
{
    (void)state;
    pb_hold_t *h = pb_hold_new(60000);
    pb_message_t b[CAP];
    uint8_t fl[CAP];
    pb_settle_t acks[CAP];
    size_t n_acks;
    b[0] = msg("A", 0);
    b[1] = msg("A", 0);
    size_t n = admit(h, b, fl, 0, 2);
    pb_inbox_verdict_t v[2] = {ack(), hold(0)};
    pb_hold_settle(h, b, v, n, 0, acks, &n_acks);
    assert_int_equal(pb_hold_wait_ms(h, 0, 500), 0);
    assert_int_equal(pb_hold_take(h, b, fl, CAP, 0), 1);
    pb_hold_free(h);
}

/* At the bound: what would be held is given back, except what may fill the awaited gap; what
 * does not wait for anything stays in the batch. */
static void full_hold_gives_back_all_but_gap_fillers(void **state)
{
    (void)state;
    pb_hold_t *h = pb_hold_new(60000);
    pb_message_t b[CAP];
    uint8_t fl[CAP];
    pb_settle_t acks[CAP];
    uint64_t back[CAP];
    size_t n_acks, n_back;
    b[0] = msg("A", 5);
    b[1] = msg("R", 0);
    size_t n = admit(h, b, fl, 0, 2);
    pb_inbox_verdict_t v[2] = {hold(3), retry(1000)}; /* sorted: A(5), R */
    pb_hold_settle(h, b, v, n, 0, acks, &n_acks);
    assert_int_equal(pb_hold_count(h), 2);
    b[0] = msg("A", 6); /* tag 3: not the missing one */
    b[1] = msg("A", 3); /* tag 4: may fill the gap */
    b[2] = msg("R", 0); /* tag 5: behind the retry */
    b[3] = msg("C", 1); /* tag 6: waits for nothing */
    n = pb_hold_admit(h, b, fl, 0, 4, true, back, &n_back);
    assert_int_equal(n, 1);
    assert_string_equal(b[0].aggregate_id, "C");
    assert_int_equal(n_back, 2);
    assert_int_equal(back[0], 3);
    assert_int_equal(back[1], 5);
    assert_int_equal(pb_hold_count(h), 3);
    /* A may go on now: 3 then 5 */
    size_t k = pb_hold_take(h, b, fl, CAP, 1);
    assert_int_equal(k, 2);
    n = admit(h, b, fl, k, 0);
    assert_int_equal(b[0].sequence, 3);
    assert_int_equal(b[1].sequence, 5);
    pb_hold_free(h);
}

/* The bytes of what is held, for the caller's bound (consume.max_held_bytes): each held copy
 * counts its strings and body, and nothing is left counted once it goes on or is cleared. */
static void held_bytes_are_counted(void **state)
{
    (void)state;
    pb_message_t b[CAP];
    uint8_t fl[CAP];
    pb_settle_t acks[CAP];
    size_t n_acks;
    pb_hold_t *h = pb_hold_new(60000);
    b[0] = msg("A", 0);
    size_t one = strlen(b[0].message_id) + 1 + strlen(b[0].type) + 1 + strlen("order") + 1 +
                 strlen("A") + 1 + strlen("{}") + 1 + b[0].body_len + 1;
    size_t n = admit(h, b, fl, 0, 1);
    pb_inbox_verdict_t v[1] = {retry(1000)};
    pb_hold_settle(h, b, v, n, 0, acks, &n_acks);
    assert_int_equal(pb_hold_bytes(h), one);
    for (int i = 0; i < 4; i++)
        b[i] = msg("A", 0); /* behind the failure: all kept */
    b[4] = msg("B", 0);     /* waits for nothing */
    n = admit(h, b, fl, 0, 5);
    assert_int_equal(n, 1);
    assert_int_equal(pb_hold_count(h), 5);
    assert_int_equal(pb_hold_bytes(h), 5 * one);
    size_t k = pb_hold_take(h, b, fl, CAP, 1000);
    assert_int_equal(k, 5);
    pb_inbox_verdict_t v2[5] = {ack(), ack(), ack(), hold(0), hold(0)};
    pb_hold_settle(h, b, v2, 5, 1000, acks, &n_acks);
    assert_int_equal(pb_hold_bytes(h), 2 * one);
    pb_hold_clear(h);
    assert_int_equal(pb_hold_bytes(h), 0);
    pb_hold_free(h);
}

/* ---- the consumer loop against a fake queue and a fake inbox -------------------------------- */

#define N_AGG 5
#define PER_AGG 20

typedef struct sim {
    int attempts[1024];       /* per tag */
    int64_t applied[N_AGG];   /* last applied sequence per aggregate */
    int64_t applied_at[N_AGG][PER_AGG + 1];
    int order_violations;
} sim_t;

/* The inbox without sequence numbers: in batch order, a failure holds back the later messages
 * of its aggregate in the batch; the handler of the first event of aggregate 0 fails twice. An
 * event applied out of its order is counted. */
static void fake_inbox(sim_t *s, const pb_message_t *b, const uint8_t *fl, size_t n,
                       pb_inbox_verdict_t *v, int64_t now)
{
    bool blocked[N_AGG] = {false};
    for (size_t i = 0; i < n; i++) {
        int a = b[i].aggregate_id[0] - 'a';
        int64_t seq = b[i].sequence;
        if (fl[i] & PB_INBOX_SKIP_GAP)
            fail_msg("no gap is expected in this simulation");
        if (blocked[a]) {
            v[i] = hold(0);
            continue;
        }
        if (seq <= s->applied[a]) {
            v[i] = ack(); /* duplicate */
            continue;
        }
        if (seq != s->applied[a] + 1)
            s->order_violations++; /* the hold let a later event overtake */
        if (a == 0 && seq == 1 && s->attempts[b[i].tag]++ < 2) {
            v[i] = retry(1000);
            blocked[a] = true;
            continue;
        }
        s->applied[a] = seq;
        s->applied_at[a][seq] = now;
        v[i] = ack();
    }
}

/* Events 1..PER_AGG of N_AGG aggregates arrive interleaved, 3 per batch, 10 ms apart; the first
 * of aggregate "a" fails twice (retry after 1 s each time). Every aggregate's events are
 * applied in order; the others are all applied before the first retry is due. */
static void simulated_consumer_keeps_order_and_lets_others_flow(void **state)
{
    (void)state;
    pb_hold_t *h = pb_hold_new(60000);
    static sim_t s;
    memset(&s, 0, sizeof s);
    pb_message_t queue[N_AGG * PER_AGG];
    size_t q_len = 0, q_at = 0;
    for (int64_t seq = 1; seq <= PER_AGG; seq++)
        for (int a = 0; a < N_AGG; a++) {
            char agg[2] = {(char)('a' + a), 0};
            queue[q_len++] = msg(agg, seq);
        }
    pb_message_t b[CAP];
    uint8_t fl[CAP];
    pb_inbox_verdict_t v[CAP];
    pb_settle_t acks[CAP];
    size_t n_acks, acked = 0;
    int64_t now = 0;
    for (int round = 0; round < 2000 && acked < q_len; round++) {
        size_t k = pb_hold_take(h, b, fl, 8, now);
        size_t fresh = 0;
        while (k + fresh < 8 && fresh < 3 && q_at < q_len)
            b[k + fresh++] = queue[q_at++];
        size_t n = admit(h, b, fl, k, fresh);
        if (n) {
            fake_inbox(&s, b, fl, n, v, now);
            pb_hold_settle(h, b, v, n, now, acks, &n_acks);
            acked += n_acks;
        }
        now += fresh ? 10 : pb_hold_wait_ms(h, now, 500);
    }
    assert_int_equal(acked, q_len);
    assert_int_equal(pb_hold_count(h), 0);
    assert_int_equal(s.order_violations, 0);
    for (int a = 0; a < N_AGG; a++)
        assert_int_equal(s.applied[a], PER_AGG);
    /* aggregate a: its first event after two retries (>= 2 s); the others long before */
    assert_true(s.applied_at[0][1] >= 2000);
    for (int a = 1; a < N_AGG; a++)
        assert_true(s.applied_at[a][PER_AGG] < 1000);
    pb_hold_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(failed_message_holds_back_its_aggregate, setup),
        cmocka_unit_test_setup(messages_without_aggregate_are_independent, setup),
        cmocka_unit_test_setup(early_message_waits_for_the_missing_one, setup),
        cmocka_unit_test_setup(gap_times_out, setup),
        cmocka_unit_test_setup(held_behind_a_dead_letter_goes_on, setup),
        cmocka_unit_test_setup(full_hold_gives_back_all_but_gap_fillers, setup),
        cmocka_unit_test_setup(held_bytes_are_counted, setup),
        cmocka_unit_test_setup(simulated_consumer_keeps_order_and_lets_others_flow, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
