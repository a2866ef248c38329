/* The HTTP endpoint's connection guard (metrics/http_guard.c): the deadline of each request, room
 * for newcomers per client address and in all, and which connection gives way; and the log rate
 * limit (common/log_limit.c) its records go through. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "common/log_limit.h"
#include "metrics/http_guard.h"

#define MAX_FD 256

static bool closed[MAX_FD]; /* by fd: the guard asked to close it */

static void record_close(int fd, void *arg)
{
    (void)arg;
    assert_true(fd >= 0 && fd < MAX_FD);
    assert_false(closed[fd]); /* never twice */
    closed[fd] = true;
}

static pb_http_guard_t *guard(unsigned slots, unsigned keep, unsigned per_peer, int64_t ms)
{
    memset(closed, 0, sizeof closed);
    pb_http_limits_t lim = {.slots = slots, .keep = keep, .keep_per_peer = per_peer,
                            .request_ms = ms};
    return pb_http_guard_new(&lim, record_close, NULL);
}

static pb_http_conn_t *open_v4(pb_http_guard_t *g, int fd, const char *ip, int64_t now)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
    return pb_http_guard_open(g, fd, (const struct sockaddr *)&a, sizeof a, now);
}

/* The case: 40 slow connections from one address, then probes from the same address.
 * Each probe gets in by closing the slow connection that waited longest, and the slow clients
 * never hold more than the per-client share. */
static void slow_clients_make_room_for_probes(void **state)
{
    (void)state;
    pb_http_guard_t *g = guard(64, 32, 16, 5000);
    pb_http_conn_t *slow[40];
    for (int i = 0; i < 40; i++) {
        slow[i] = open_v4(g, i, "127.0.0.1", 100 + i);
        assert_non_null(slow[i]);
        assert_false(closed[i]);
    }
    /* the oldest 24 gave way, one by one, to the newer ones */
    for (int i = 0; i < 40; i++)
        assert_int_equal(closed[i], i < 24);
    assert_int_equal(pb_http_guard_open_count(g), 16);
    assert_int_equal(pb_http_guard_stats(g).surplus, 24);
    /* the server reports the closed ones gone: their entries are free again */
    for (int i = 0; i < 24; i++)
        pb_http_guard_close(g, slow[i]);
    pb_http_conn_t *probe = open_v4(g, 100, "127.0.0.1", 200);
    assert_non_null(probe);
    assert_false(closed[100]);
    assert_true(closed[24]); /* the longest waiting slow one */
    pb_http_guard_request(probe, 201);
    pb_http_guard_answered(probe, 202);
    pb_http_guard_close(g, probe);
    pb_http_guard_free(g);
}

/* A connection has request_ms to send its request and as long again to read the answer; the
 * next connection closes the late ones. */
static void deadline_per_request(void **state)
{
    (void)state;
    pb_http_guard_t *g = guard(8, 4, 4, 5000);
    pb_http_conn_t *idle = open_v4(g, 1, "10.0.0.1", 0);
    pb_http_conn_t *reader = open_v4(g, 2, "10.0.0.2", 0);
    pb_http_conn_t *keepalive = open_v4(g, 3, "10.0.0.3", 0);
    pb_http_guard_request(reader, 3000);        /* answering from 3 s: until 8 s */
    pb_http_guard_request(keepalive, 1000);
    pb_http_guard_answered(keepalive, 2000);    /* waiting again from 2 s: until 7 s */
    open_v4(g, 4, "10.0.0.4", 4999);
    assert_false(closed[1] || closed[2] || closed[3]);
    open_v4(g, 5, "10.0.0.5", 5000);
    assert_true(closed[1]); /* no request in 5 s */
    assert_false(closed[2] || closed[3]);
    open_v4(g, 6, "10.0.0.6", 7000);
    assert_true(closed[3]);
    assert_false(closed[2]);
    open_v4(g, 7, "10.0.0.7", 8000);
    assert_true(closed[2]); /* the answer not read in 5 s */
    assert_false(closed[4] || closed[5] || closed[6] || closed[7]);
    assert_int_equal(pb_http_guard_stats(g).late, 3);
    assert_int_equal(pb_http_guard_stats(g).surplus, 0);
    pb_http_guard_close(g, idle);
    pb_http_guard_free(g);
}

/* Over keep in all: the busiest client gives way, not a client holding one connection; a
 * connection whose answer is under way is not closed to make room. */
static void busiest_client_gives_way(void **state)
{
    (void)state;
    pb_http_guard_t *g = guard(16, 6, 4, 60000);
    pb_http_conn_t *scraper = open_v4(g, 1, "10.0.0.9", 0); /* the oldest of all */
    (void)scraper;
    for (int i = 0; i < 4; i++)
        open_v4(g, 10 + i, "10.0.0.66", 10 + i);
    pb_http_conn_t *answering = open_v4(g, 20, "10.0.0.77", 20);
    pb_http_guard_request(answering, 21);
    assert_int_equal(pb_http_guard_open_count(g), 6);
    open_v4(g, 30, "10.0.0.88", 30); /* one too many */
    assert_true(closed[10]);         /* the busiest client's longest waiting */
    assert_false(closed[1] || closed[20] || closed[30]);
    /* that client still holds the most (3): the next newcomer closes its next oldest */
    open_v4(g, 31, "10.0.0.89", 31);
    assert_true(closed[11]);
    assert_false(closed[1] || closed[20]);
    /* IPv6 addresses are clients of their own too */
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6};
    assert_int_equal(inet_pton(AF_INET6, "::1", &a6.sin6_addr), 1);
    assert_non_null(pb_http_guard_open(g, 40, (const struct sockaddr *)&a6, sizeof a6, 40));
    assert_true(closed[12]);
    assert_int_equal(pb_http_guard_stats(g).surplus, 3);
    pb_http_guard_free(g);
}

/* Every slot taken (the server let in more than it should): NULL, and the caller closes it. */
static void no_slot(void **state)
{
    (void)state;
    pb_http_guard_t *g = guard(3, 2, 2, 60000);
    pb_http_conn_t *a = open_v4(g, 1, "10.0.0.1", 0);
    pb_http_guard_request(a, 1);
    pb_http_conn_t *b = open_v4(g, 2, "10.0.0.2", 0);
    pb_http_guard_request(b, 1);
    pb_http_conn_t *c = open_v4(g, 3, "10.0.0.3", 2);
    assert_non_null(c);
    assert_null(open_v4(g, 4, "10.0.0.4", 3));
    pb_http_guard_close(g, b);
    assert_non_null(open_v4(g, 4, "10.0.0.4", 3));
    pb_http_guard_free(g);
}

static void log_limit(void **state)
{
    (void)state;
    pb_log_limit_t lim;
    pb_log_limit_init(&lim, 1000);
    uint64_t held = 99;
    assert_true(pb_log_limit_pass(&lim, 5, &held));
    assert_int_equal(held, 0);
    assert_false(pb_log_limit_pass(&lim, 6, &held));
    assert_false(pb_log_limit_pass(&lim, 1004, &held));
    assert_true(pb_log_limit_pass(&lim, 1005, &held));
    assert_int_equal(held, 2);
    assert_true(pb_log_limit_pass(&lim, 5000, &held));
    assert_int_equal(held, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(slow_clients_make_room_for_probes),
        cmocka_unit_test(deadline_per_request),
        cmocka_unit_test(busiest_client_gives_way),
        cmocka_unit_test(no_slot),
        cmocka_unit_test(log_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
