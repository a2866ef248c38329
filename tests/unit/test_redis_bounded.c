/* Unit tests for reading stream entries with bounded memory (src/broker/redis/bounded.c): the
 * filter on hand-written RESP replies, fed whole and byte by byte, and the reading function on a
 * socket pair, between replies hiredis reads itself. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker/redis/bounded.h"

static const pb_redis_limits_t WIDE = {1000, 1000, 1000000, 1000};

static void bulk(pb_buf_t *b, const char *s)
{
    pb_buf_printf(b, "$%zu\r\n%s\r\n", strlen(s), s);
}

/* [id, [k1, v1, ...]] with n pairs of fields from kv */
static void entry(pb_buf_t *b, const char *id, size_t n, const char *const *kv)
{
    pb_buf_printf(b, "*2\r\n");
    bulk(b, id);
    pb_buf_printf(b, "*%zu\r\n", 2 * n);
    for (size_t i = 0; i < 2 * n; i++)
        bulk(b, kv[i]);
}

/* Filters in[0..len) fed in pieces of step bytes; the output in out, the bytes taken returned. */
static size_t run(pb_redis_shape_t shape, const pb_redis_limits_t *lim, const char *in,
                  size_t len, size_t step, pb_buf_t *out, uint64_t *kept)
{
    pb_redis_filter_t *f = pb_redis_filter_new(shape, lim);
    size_t at = 0;
    while (at < len && !pb_redis_filter_done(f)) {
        size_t n = len - at < step ? len - at : step;
        int64_t used = pb_redis_filter_feed(f, in + at, n, out);
        assert_true(used >= 0);
        at += (size_t)used;
        if ((size_t)used < n)
            assert_true(pb_redis_filter_done(f));
    }
    assert_true(pb_redis_filter_done(f));
    if (kept)
        *kept = pb_redis_filter_kept(f);
    pb_redis_filter_free(f);
    return at;
}

static bool deferred(const redisReply *e)
{
    return e->elements == 3 && e->element[1]->elements == 0 &&
           e->element[2]->type == REDIS_REPLY_INTEGER &&
           e->element[2]->integer == PB_REDIS_DEFERRED;
}

/* The filter's output for in, the same whether fed whole or byte by byte; parsed by hiredis.
 * *same: whether it is in unchanged. */
static redisReply *filtered(pb_redis_shape_t shape, const pb_redis_limits_t *lim,
                            const pb_buf_t *in, uint64_t *kept, bool *same)
{
    pb_buf_t whole = {0}, bytes = {0};
    assert_int_equal(run(shape, lim, in->data, in->len, in->len, &whole, kept), in->len);
    assert_int_equal(run(shape, lim, in->data, in->len, 1, &bytes, NULL), in->len);
    assert_int_equal(whole.len, bytes.len);
    assert_memory_equal(whole.data, bytes.data, whole.len);
    if (same)
        *same = whole.len == in->len && memcmp(whole.data, in->data, in->len) == 0;
    redisReader *r = redisReaderCreate();
    assert_int_equal(redisReaderFeed(r, whole.data, whole.len), REDIS_OK);
    void *reply = NULL;
    assert_int_equal(redisReaderGetReply(r, &reply), REDIS_OK);
    assert_non_null(reply);
    redisReaderFree(r);
    pb_buf_free(&whole);
    pb_buf_free(&bytes);
    return reply;
}

static const char *const SMALL[] = {"event_id", "e-1", "event_type", "t.v1", "payload", "{}",
                                    "headers", "{}"};

static void whole_entries_pass_unchanged(void **state)
{
    (void)state;
    pb_buf_t in = {0};
    pb_buf_printf(&in, "*1\r\n*2\r\n");
    bulk(&in, "stream");
    pb_buf_printf(&in, "*2\r\n");
    entry(&in, "1-0", 4, SMALL);
    entry(&in, "1-1", 4, SMALL);
    uint64_t kept = 0;
    bool same = false;
    redisReply *r = filtered(PB_REDIS_SHAPE_STREAMS, &WIDE, &in, &kept, &same);
    assert_true(same);
    assert_int_equal(r->element[0]->element[1]->elements, 2);
    assert_int_equal(kept, 2 * (8 + 3 + 10 + 4 + 7 + 2 + 7 + 2));
    freeReplyObject(r);
    pb_buf_free(&in);
}

static void large_payload_and_fields_come_as_lengths(void **state)
{
    (void)state;
    char *big = malloc(5001);
    memset(big, 'x', 5000);
    big[5000] = '\0';
    const char *payload_big[] = {"event_id", "e-1", "payload", big, "headers", "{}"};
    const char *other_big[] = {"event_id", "e-2", "headers", big, "payload", "{\"a\":1}"};
    /* only the first payload is the payload; a second one is another field */
    const char *two_payloads[] = {"payload", "p", "payload", big};
    pb_buf_t in = {0};
    pb_buf_printf(&in, "*3\r\n");
    entry(&in, "1-0", 3, payload_big);
    entry(&in, "1-1", 3, other_big);
    entry(&in, "1-2", 2, two_payloads);
    pb_redis_limits_t lim = {4096, 100, 1000000, 1000};
    uint64_t kept = 0;
    redisReply *r = filtered(PB_REDIS_SHAPE_ENTRIES, &lim, &in, &kept, NULL);
    assert_int_equal(r->elements, 3);
    const redisReply *e = r->element[0];
    assert_int_equal(e->elements, 2);
    assert_string_equal(e->element[1]->element[2]->str, "payload");
    assert_int_equal(e->element[1]->element[3]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(e->element[1]->element[3]->integer, 5000);
    assert_string_equal(e->element[1]->element[1]->str, "e-1");
    e = r->element[1];
    assert_int_equal(e->element[1]->element[3]->type, REDIS_REPLY_INTEGER);
    assert_string_equal(e->element[1]->element[5]->str, "{\"a\":1}");
    e = r->element[2];
    assert_string_equal(e->element[1]->element[1]->str, "p");
    assert_int_equal(e->element[1]->element[3]->type, REDIS_REPLY_INTEGER);
    /* what was kept: names and small values, no 5000-byte value */
    assert_true(kept < 200);
    freeReplyObject(r);
    pb_buf_free(&in);
    free(big);
}

static void entries_past_the_budget_or_count_are_deferred(void **state)
{
    (void)state;
    pb_buf_t in = {0};
    pb_buf_printf(&in, "*4\r\n");
    for (int i = 0; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "1-%d", i);
        entry(&in, id, 4, SMALL);
    }
    /* the first entry (43 bytes) reaches a budget of 40: the rest are deferred */
    pb_redis_limits_t lim = {1000, 1000, 40, 1000};
    uint64_t kept = 0;
    redisReply *r = filtered(PB_REDIS_SHAPE_ENTRIES, &lim, &in, &kept, NULL);
    assert_int_equal(r->element[0]->elements, 2);
    for (size_t i = 1; i < 4; i++) {
        char id[8];
        snprintf(id, sizeof id, "1-%zu", i);
        assert_string_equal(r->element[i]->element[0]->str, id);
        assert_true(deferred(r->element[i]));
    }
    assert_int_equal(kept, 43);
    freeReplyObject(r);
    /* a budget of 0 still takes the first; max_entries 2 defers the third on */
    lim = (pb_redis_limits_t){1000, 1000, 0, 2};
    r = filtered(PB_REDIS_SHAPE_ENTRIES, &lim, &in, &kept, NULL);
    assert_false(deferred(r->element[0]));
    assert_true(deferred(r->element[1]));
    freeReplyObject(r);
    lim = (pb_redis_limits_t){1000, 1000, 1000, 2};
    r = filtered(PB_REDIS_SHAPE_ENTRIES, &lim, &in, &kept, NULL);
    assert_false(deferred(r->element[1]));
    assert_true(deferred(r->element[2]));
    assert_true(deferred(r->element[3]));
    freeReplyObject(r);
    pb_buf_free(&in);
}

static void many_fields_are_cut_at_the_cap(void **state)
{
    (void)state;
    pb_buf_t in = {0};
    size_t n = PB_REDIS_FIELDS_KEPT + 10;
    pb_buf_printf(&in, "*1\r\n*2\r\n");
    bulk(&in, "1-0");
    pb_buf_printf(&in, "*%zu\r\n", n);
    for (size_t i = 0; i < n; i++)
        bulk(&in, "f");
    pb_redis_limits_t lim = {1000, 100000, 1000000, 10};
    redisReply *r = filtered(PB_REDIS_SHAPE_ENTRIES, &lim, &in, NULL, NULL);
    assert_int_equal(r->element[0]->elements, 2);
    assert_int_equal(r->element[0]->element[1]->elements, PB_REDIS_FIELDS_KEPT);
    freeReplyObject(r);
    /* past other_max they come as lengths */
    r = filtered(PB_REDIS_SHAPE_ENTRIES, &WIDE, &in, NULL, NULL);
    assert_int_equal(r->element[0]->element[1]->element[999]->type, REDIS_REPLY_STRING);
    assert_int_equal(r->element[0]->element[1]->element[1000]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->element[0]->element[1]->element[1000]->integer, 1);
    freeReplyObject(r);
    pb_buf_free(&in);
}

static void other_shapes_pass(void **state)
{
    (void)state;
    static const struct {
        pb_redis_shape_t shape;
        const char *in;
        const char *out;
    } cases[] = {
        {PB_REDIS_SHAPE_STREAMS, "*-1\r\n", "*-1\r\n"}, /* XREADGROUP BLOCK timed out */
        {PB_REDIS_SHAPE_STREAMS, "-NOGROUP No such key\r\n", "-NOGROUP No such key\r\n"},
        {PB_REDIS_SHAPE_ENTRIES, "*0\r\n", "*0\r\n"},
        /* a deleted entry pending on the consumer, and Redis 6.2's nil for a claimed one */
        {PB_REDIS_SHAPE_STREAMS, "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*-1\r\n",
         "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*-1\r\n"},
        /* past max_entries (1 here), deleted or not: deferred */
        {PB_REDIS_SHAPE_ENTRIES,
         "*3\r\n*2\r\n$1\r\na\r\n*2\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$1\r\nb\r\n*-1\r\n"
         "*2\r\n$1\r\nc\r\n*2\r\n$1\r\nk\r\n$1\r\nv\r\n",
         "*3\r\n*2\r\n$1\r\na\r\n*2\r\n$1\r\nk\r\n$1\r\nv\r\n*3\r\n$1\r\nb\r\n*-1\r\n:-1\r\n"
         "*3\r\n$1\r\nc\r\n*0\r\n:-1\r\n"},
        {PB_REDIS_SHAPE_ENTRIES, "*1\r\n*-1\r\n", "*1\r\n*-1\r\n"},
    };
    const pb_redis_limits_t one = {1000, 1000, 1000000, 1};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pb_buf_t out = {0};
        size_t len = strlen(cases[i].in);
        assert_int_equal(run(cases[i].shape, &one, cases[i].in, len, len, &out, NULL), len);
        assert_int_equal(out.len, strlen(cases[i].out));
        assert_memory_equal(out.data, cases[i].out, out.len);
        pb_buf_free(&out);
    }
}

static void a_reply_ends_where_it_ends(void **state)
{
    (void)state;
    const char *two = "*0\r\n+OK\r\n";
    pb_buf_t out = {0};
    assert_int_equal(run(PB_REDIS_SHAPE_ENTRIES, &WIDE, two, strlen(two), 100, &out, NULL), 4);
    pb_buf_free(&out);
    static const char *const bad[] = {"*x\r\n", "$-2\r\n", "%1\r\n", "*1\n", "\r\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pb_redis_filter_t *f = pb_redis_filter_new(PB_REDIS_SHAPE_ENTRIES, &WIDE);
        assert_int_equal(pb_redis_filter_feed(f, bad[i], strlen(bad[i]), &out), -1);
        pb_redis_filter_free(f);
    }
    pb_buf_free(&out);
}

typedef struct writer {
    int fd;
    const pb_buf_t *data;
    size_t sent;
} writer_t;

static void *write_all(void *arg)
{
    writer_t *w = arg;
    while (w->sent < w->data->len) {
        ssize_t k = write(w->fd, w->data->data + w->sent, w->data->len - w->sent);
        if (k <= 0)
            break;
        w->sent += (size_t)k;
    }
    return NULL;
}

/* Between replies hiredis reads: what it read ahead is taken back, and what the filter read
 * past its reply is given to it. */
static void reading_from_a_socket(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    redisContext *c = redisConnectFd(sv[0]);
    assert_non_null(c);
    char *big = malloc(100001);
    memset(big, 'y', 100000);
    big[100000] = '\0';
    const char *fields[] = {"event_id", "e-1", "payload", big};
    pb_buf_t in = {0};
    pb_buf_printf(&in, "+FIRST\r\n*1\r\n");
    entry(&in, "1-0", 2, fields);
    pb_buf_printf(&in, "+LAST\r\n");
    /* from a writer thread: more than the socket buffer holds */
    writer_t w = {sv[1], &in, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, write_all, &w), 0);
    /* hiredis reads 16 KiB: the head of the entries reply comes with its reply */
    void *plain = NULL;
    assert_int_equal(redisGetReply(c, &plain), REDIS_OK);
    assert_string_equal(((redisReply *)plain)->str, "FIRST");
    freeReplyObject(plain);
    pb_redis_limits_t lim = {1000, 1000, 1000000, 10};
    redisReply *r = NULL;
    uint64_t kept = 0;
    assert_int_equal(pb_redis_get_reply_bounded(c, PB_REDIS_SHAPE_ENTRIES, &lim, &r, &kept),
                     REDIS_OK);
    assert_int_equal(r->element[0]->element[1]->element[3]->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->element[0]->element[1]->element[3]->integer, 100000);
    assert_int_equal(kept, 8 + 3 + 7);
    freeReplyObject(r);
    assert_int_equal(redisGetReply(c, &plain), REDIS_OK);
    assert_string_equal(((redisReply *)plain)->str, "LAST");
    freeReplyObject(plain);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.sent, in.len);
    /* the peer gone: an error as hiredis reports it */
    close(sv[1]);
    assert_int_equal(pb_redis_get_reply_bounded(c, PB_REDIS_SHAPE_ENTRIES, &lim, &r, &kept),
                     REDIS_ERR);
    assert_int_equal(c->err, REDIS_ERR_EOF);
    redisFree(c);
    pb_buf_free(&in);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(whole_entries_pass_unchanged),
        cmocka_unit_test(large_payload_and_fields_come_as_lengths),
        cmocka_unit_test(entries_past_the_budget_or_count_are_deferred),
        cmocka_unit_test(many_fields_are_cut_at_the_cap),
        cmocka_unit_test(other_shapes_pass),
        cmocka_unit_test(a_reply_ends_where_it_ends),
        cmocka_unit_test(reading_from_a_socket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
