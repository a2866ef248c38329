/* postbox demo: the shop's producers. Several threads, each with its own PostgreSQL
 * connection, place orders on one steady schedule: order k is due at start + k * interval,
 * whichever thread takes it. Each order is one transaction: the business change
 * (orders.place_order) and its event (postbox_enqueue, libpostbox) commit together; a share of
 * extra orders is rolled back after the same work, so their events must never appear. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/str.h"
#include "demo/demo_int.h"
#include "postbox/postbox.h"
#include "store/pg.h"

struct demo_producers {
    char *dsn;
    int n_threads;
    pthread_t *threads;
    int64_t orders, t0_ms;
    double interval_ms;
    int rollback_pct;
    atomic_llong tickets;     /* orders taken by a thread */
    atomic_llong committed;
    atomic_llong rolled_back;
    atomic_int running;
    atomic_bool cancel;
    pthread_mutex_t lock;     /* guards failed and err */
    bool failed;
    pb_error_t err;
};

typedef struct worker {
    demo_producers_t *p;
    unsigned seed;
} worker_t;

static void fail_once(demo_producers_t *p, const pb_error_t *err)
{
    pthread_mutex_lock(&p->lock);
    if (!p->failed) {
        p->failed = true;
        p->err = *err;
    }
    pthread_mutex_unlock(&p->lock);
    atomic_store(&p->cancel, true);
}

static unsigned next_random(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return (*seed >> 8) & 0xffffffu;
}

/* One order in one transaction, committed or rolled back. */
static pb_status_t place_order(PGconn *conn, worker_t *w, bool commit, pb_error_t *err)
{
    char customer[16], amount[32];
    snprintf(customer, sizeof customer, "%u", 1 + next_random(&w->seed) % DEMO_CUSTOMERS);
    unsigned cents = 500 + next_random(&w->seed) % 20000;
    snprintf(amount, sizeof amount, "%u.%02u", cents / 100, cents % 100);
    pb_status_t st = pb_pg_exec(conn, "BEGIN", err);
    if (st != PB_OK)
        return st;
    const char *params[2] = {customer, amount};
    PGresult *res = PQexecParams(conn, "SELECT order_id, n, placed_at FROM orders.place_order($1, $2)",
                                 2, NULL, params, NULL, NULL, 0);
    if ((st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "orders.place_order", err)) != PB_OK)
        return st;
    char payload[256];
    snprintf(payload, sizeof payload,
             "{\"order_id\": %s, \"customer\": %s, \"n\": %s, \"amount\": %s, \"placed_at\": \"%s\"}",
             PQgetvalue(res, 0, 0), customer, PQgetvalue(res, 0, 1), amount, PQgetvalue(res, 0, 2));
    PQclear(res);
    postbox_event_t ev = {.aggregate_type = "customer", .aggregate_id = customer,
                          .event_type = DEMO_EVENT_TYPE, .payload = payload};
    char id[POSTBOX_EVENT_ID_SIZE], why[256];
    if (postbox_enqueue(conn, &ev, id, why, sizeof why) != 0)
        return pb_fail(err, PB_FATAL, "%s", why);
    return pb_pg_exec(conn, commit ? "COMMIT" : "ROLLBACK", err);
}

static void *work(void *arg)
{
    worker_t *w = arg;
    demo_producers_t *p = w->p;
    PGconn *conn = NULL;
    pb_error_t err;
    if (pb_pg_connect(p->dsn, &conn, &err) != PB_OK) {
        fail_once(p, &err);
        goto out;
    }
    while (!atomic_load(&p->cancel)) {
        long long k = atomic_fetch_add(&p->tickets, 1);
        if (k >= p->orders)
            break;
        int64_t due = p->t0_ms + (int64_t)((double)k * p->interval_ms);
        int64_t wait = due - pb_monotonic_ms();
        if (wait > 0)
            pb_sleep_ms(wait);
        if ((int)(next_random(&w->seed) % 100) < p->rollback_pct) {
            if (place_order(conn, w, false, &err) != PB_OK) {
                fail_once(p, &err);
                break;
            }
            atomic_fetch_add(&p->rolled_back, 1);
        }
        if (place_order(conn, w, true, &err) != PB_OK) {
            fail_once(p, &err);
            break;
        }
        atomic_fetch_add(&p->committed, 1);
    }
out:
    PQfinish(conn);
    atomic_fetch_sub(&p->running, 1);
    free(w);
    return NULL;
}

pb_status_t demo_producers_start(const char *dsn, int n, int64_t orders, int64_t duration_ms,
                                 int rollback_pct, demo_producers_t **out, pb_error_t *err)
{
    demo_producers_t *p = calloc(1, sizeof *p);
    if (!p)
        pb_out_of_memory();
    p->dsn = pb_strdup(dsn);
    p->threads = pb_malloc((size_t)n * sizeof *p->threads);
    p->orders = orders;
    p->interval_ms = orders > 0 ? (double)duration_ms / (double)orders : 0;
    p->rollback_pct = rollback_pct;
    p->t0_ms = pb_monotonic_ms();
    pthread_mutex_init(&p->lock, NULL);
    atomic_init(&p->tickets, 0);
    atomic_init(&p->committed, 0);
    atomic_init(&p->rolled_back, 0);
    atomic_init(&p->running, 0);
    atomic_init(&p->cancel, false);
    for (int i = 0; i < n; i++) {
        worker_t *w = pb_malloc(sizeof *w);
        w->p = p;
        w->seed = (unsigned)(pb_wall_us() ^ (i * 2654435761u));
        atomic_fetch_add(&p->running, 1);
        int rc = pthread_create(&p->threads[i], NULL, work, w);
        if (rc != 0) {
            atomic_fetch_sub(&p->running, 1);
            free(w);
            p->n_threads = i;
            demo_producers_cancel(p);
            pb_status_t st = demo_producers_finish(p, err);
            demo_producers_free(p);
            (void)st;
            return pb_fail(err, PB_FATAL, "cannot start producer thread: %s", strerror(rc));
        }
        p->n_threads = i + 1;
    }
    *out = p;
    return PB_OK;
}

bool demo_producers_progress(demo_producers_t *p, int64_t *committed, int64_t *rolled_back)
{
    *committed = atomic_load(&p->committed);
    *rolled_back = atomic_load(&p->rolled_back);
    return atomic_load(&p->running) == 0;
}

void demo_producers_cancel(demo_producers_t *p)
{
    atomic_store(&p->cancel, true);
}

pb_status_t demo_producers_finish(demo_producers_t *p, pb_error_t *err)
{
    for (int i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    p->n_threads = 0;
    if (p->failed) {
        *err = p->err;
        return pb_fail(err, p->err.status ? p->err.status : PB_FATAL, "producer: %s", p->err.msg);
    }
    return PB_OK;
}

void demo_producers_free(demo_producers_t *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->lock);
    free(p->threads);
    free(p->dsn);
    free(p);
}
