#include "janitor/janitor.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/str.h"
#include "metrics/metrics.h"
#include "store/pg.h"
#include "store/inbox_legacy.h"
#include "store/stats.h"

#define FAC "janitor"
#define RECONNECT_MS 5000
/* how often the partitions ahead are made (the partitioned layout, sql/020): the shortest
 * interval is an hour and `ahead` at least one, so this leaves room for many misses */
#define PARTITIONS_EVERY_MS (5 * 60 * 1000)
/* The online migration of the inbox (sql/025): how often a consumer's janitor looks for
 * postbox.inbox_legacy (init may run while it runs), the rows a batch moves (each batch one
 * short transaction, whose row locks a consumer meeting those keys waits for), and the pause
 * between batches, which leaves the consumers most of the database */
#define LEGACY_LOOK_MS 10000
#define LEGACY_BATCH 1000
#define LEGACY_PAUSE_MS 20
#define LEGACY_BUSY_MS 1000

struct pb_janitor {
    pb_janitor_opts_t opts;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping; /* @locks mu */
    PGconn *conn;
    pb_purge_t purge;
    bool purging;
    size_t job; /* opts.purges[job] is the one purging or next */
    bool warned; /* a connection failure was logged already */
    bool partitions; /* opts.make_partitions, until a look found the default layout */
    pb_inbox_legacy_t legacy; /* opts.move_inbox_legacy: the mover's position */
};

/* Waits until the monotonic deadline or stop; returns false on stop. */
static bool wait_until(pb_janitor_t *jan, int64_t deadline_ms)
{
    pthread_mutex_lock(&jan->mu);
    while (!jan->stopping) {
        int64_t left = deadline_ms - pb_monotonic_ms();
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += left / 1000;
        ts.tv_nsec += (left % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&jan->cv, &jan->mu, &ts);
    }
    bool go_on = !jan->stopping;
    pthread_mutex_unlock(&jan->mu);
    return go_on;
}

static void drop_conn(pb_janitor_t *jan)
{
    PQfinish(jan->conn);
    jan->conn = NULL;
    jan->purging = false;
    pb_inbox_legacy_reset(&jan->legacy);
}

static bool ensure_conn(pb_janitor_t *jan)
{
    if (jan->conn && PQstatus(jan->conn) == CONNECTION_OK)
        return true;
    if (jan->conn)
        drop_conn(jan);
    pb_error_t err;
    if (pb_pg_connect_primary(jan->opts.dsn, &jan->conn, &err) != PB_OK) {
        if (!jan->warned)
            log_warn(FAC, "cannot connect to postgresql (retrying every %d s): %s",
                     RECONNECT_MS / 1000, err.msg);
        jan->warned = true;
        return false;
    }
    jan->warned = false;
    /* a sample or a purge batch that takes this long is a bug, not a reason to hold locks */
    if (pb_pg_exec(jan->conn, "SET statement_timeout = '30s'", &err) != PB_OK ||
        pb_pg_exec(jan->conn, "SET application_name = 'postbox janitor'", &err) != PB_OK) {
        log_warn(FAC, "postgresql: %s", err.msg);
        drop_conn(jan);
        return false;
    }
    return true;
}

static void sample(pb_janitor_t *jan)
{
    pb_outbox_stats_t s;
    pb_error_t err;
    int64_t t0 = pb_wall_us();
    if (pb_stats_outbox(jan->conn, PB_STATS_DEFAULT_CAP, &s, &err) != PB_OK) {
        log_warn(FAC, "%s", err.msg);
        if (PQstatus(jan->conn) != CONNECTION_OK)
            drop_conn(jan);
        return;
    }
    double took = (double)(pb_wall_us() - t0) / 1e6;
    pb_metrics_set_outbox(s.backlog, s.backlog_exact, s.oldest_age_s, s.dead_letters, took);
    pb_metrics_set_delayed(s.delayed, s.cdc_deferred);
}

/* The partitioned layout: the partitions of the coming intervals exist before rows arrive for
 * them (a row with none goes to the DEFAULT partition, which only a DELETE empties). Asks the
 * catalog first, so that the default layout calls nothing it may have no grant for. */
static void make_partitions(pb_janitor_t *jan)
{
    pb_error_t err;
    bool partitioned = false;
    if (pb_pg_query_bool(jan->conn,
                         "SELECT EXISTS (SELECT 1 FROM pg_class c WHERE c.relkind = 'p'"
                         "  AND c.relnamespace = to_regnamespace('postbox'))",
                         "partitions ahead", &partitioned, &err) != PB_OK) {
        log_warn(FAC, "%s", err.msg);
        if (PQstatus(jan->conn) != CONNECTION_OK)
            drop_conn(jan);
        return;
    }
    if (!partitioned) {
        jan->partitions = false; /* a layout is chosen by init, before the start */
        return;
    }
    PGresult *res = PQexec(jan->conn, "SELECT postbox.partitions_create_ahead()");
    if (pb_pg_check(jan->conn, res, PGRES_TUPLES_OK, "partitions ahead", &err) != PB_OK) {
        log_warn(FAC, "%s (rows of a time without a partition go to the DEFAULT one; "
                      "`postbox check` lists the missing)", err.msg);
        if (PQstatus(jan->conn) != CONNECTION_OK)
            drop_conn(jan);
        return;
    }
    if (atoi(PQgetvalue(res, 0, 0)) > 0)
        log_info(FAC, "made %s partitions ahead", PQgetvalue(res, 0, 0));
    PQclear(res);
}

/* The online migration of the inbox: one batch of postbox.inbox_legacy's rows moved into the
 * partitioned inbox, or its end. Returns when to come back. */
static int64_t move_inbox_legacy(pb_janitor_t *jan, int64_t now)
{
    pb_inbox_legacy_outcome_t out;
    pb_error_t err;
    bool was_active = jan->legacy.active;
    if (pb_inbox_legacy_step(jan->conn, &jan->legacy, LEGACY_BATCH, &out, &err) != PB_OK) {
        log_warn(FAC, "%s (the inbox migration goes on at the next try)", err.msg);
        if (PQstatus(jan->conn) != CONNECTION_OK)
            drop_conn(jan);
        return now + RECONNECT_MS;
    }
    if (jan->legacy.active && !was_active) {
        log_info(FAC, "postbox.inbox_legacy holds rows: moving them into the partitioned inbox "
                      "(%d a batch)", LEGACY_BATCH);
        jan->partitions = true; /* init ran after the start: the layout is partitioned now */
    }
    switch (out) {
    case PB_LEGACY_MOVED:
        return now + LEGACY_PAUSE_MS;
    case PB_LEGACY_WAITING:
        return now + LEGACY_BUSY_MS;
    case PB_LEGACY_FINISHED:
        log_info(FAC, "the inbox migration is over: postbox.inbox_legacy is empty and dropped "
                      "(%llu rows moved by this consumer)", (unsigned long long)jan->legacy.moved);
        jan->legacy.moved = 0;
        return now + LEGACY_LOOK_MS;
    default:
        return now + LEGACY_LOOK_MS;
    }
}

static bool purge_wanted(const pb_janitor_purge_t *j)
{
    return j->retention_ms > 0 || (j->rules && j->rules->n > 0);
}

/* Whether the janitor has any retention work at all. */
static bool any_purge(const pb_janitor_opts_t *o)
{
    for (size_t i = 0; i < o->n_purges; i++)
        if (purge_wanted(&o->purges[i]))
            return true;
    return false;
}

/* The current purge is over (done or failed): on to the next table, or the round is over and
 * the next one starts after the interval (retry_ms after a failure). */
static void next_job(pb_janitor_t *jan, int64_t *next_purge, int64_t wait_ms)
{
    jan->purging = false;
    do
        jan->job++;
    while (jan->job < jan->opts.n_purges && !purge_wanted(&jan->opts.purges[jan->job]));
    if (jan->job < jan->opts.n_purges && wait_ms == 0)
        return; /* the next table at once */
    jan->job = 0;
    while (jan->job < jan->opts.n_purges && !purge_wanted(&jan->opts.purges[jan->job]))
        jan->job++;
    *next_purge = pb_monotonic_ms() + (wait_ms ? wait_ms : jan->opts.purge_interval_ms);
}

/* One purge batch; starts a purge when one is due. Returns true while a purge is in progress. */
static bool purge_tick(pb_janitor_t *jan, int64_t *next_purge)
{
    const pb_janitor_opts_t *o = &jan->opts;
    const pb_janitor_purge_t *j = &o->purges[jan->job];
    pb_error_t err;
    if (!jan->purging) {
        if (pb_monotonic_ms() < *next_purge || !pb_metrics_ready())
            return false;
        if (pb_purge_begin(&jan->purge, jan->conn, j->target, j->retention_ms, j->rules,
                           o->consumer, 0, &err) != PB_OK) {
            log_warn(FAC, "%s", err.msg);
            next_job(jan, next_purge, RECONNECT_MS);
            return false;
        }
        jan->purging = true;
    }
    uint64_t rows;
    if (pb_purge_step(&jan->purge, &rows, &err) != PB_OK) {
        log_warn(FAC, "retention purge of postbox.%s stopped (%llu partitions dropped): %s",
                 pb_purge_table(j->target),
                 (unsigned long long)jan->purge.partitions_dropped, err.msg);
        next_job(jan, next_purge, RECONNECT_MS);
        if (PQstatus(jan->conn) != CONNECTION_OK)
            drop_conn(jan);
        return false;
    }
    if (!jan->purge.done)
        return true;
    if (jan->purge.partitions_dropped)
        log_info(FAC, "dropped %llu partitions of postbox.%s past their retention",
                 (unsigned long long)jan->purge.partitions_dropped, pb_purge_table(j->target));
    if (jan->purge.deleted)
        log_info(FAC, "purged %llu rows of postbox.%s older than %s%s in %llu batches (longest "
                      "%.0f ms)",
                 (unsigned long long)jan->purge.deleted, pb_purge_table(j->target),
                 j->retention_ms ? jan->purge.cutoff : "their type's retention",
                 j->rules && j->rules->n ? " or their type's retention" : "",
                 (unsigned long long)jan->purge.batches, jan->purge.max_batch_ms);
    next_job(jan, next_purge, 0);
    return jan->purging || *next_purge <= pb_monotonic_ms();
}

/* @thread janitor */
static void *janitor_main(void *arg)
{
    pb_janitor_t *jan = arg;
    const pb_janitor_opts_t *o = &jan->opts;
    int64_t next_sample = pb_monotonic_ms(), next_purge = pb_monotonic_ms();
    int64_t next_partitions = pb_monotonic_ms(), next_legacy = pb_monotonic_ms();
    for (;;) {
        int64_t now = pb_monotonic_ms();
        int64_t deadline = now + 60000;
        if (o->sample_interval_ms <= 0 && !any_purge(o) && !jan->partitions &&
            !o->move_inbox_legacy) {
            deadline = now + 3600 * 1000; /* idle until stopped */
        } else if (!ensure_conn(jan)) {
            deadline = now + RECONNECT_MS;
        } else {
            if (jan->partitions && now >= next_partitions) {
                make_partitions(jan);
                next_partitions = now + PARTITIONS_EVERY_MS;
                if (!jan->partitions && o->sample_interval_ms <= 0 && !any_purge(o) &&
                    !o->move_inbox_legacy)
                    drop_conn(jan); /* nothing else to do: no connection held */
            }
            if (jan->conn && o->move_inbox_legacy && now >= next_legacy)
                next_legacy = move_inbox_legacy(jan, now);
            if (jan->conn && o->sample_interval_ms > 0 && now >= next_sample) {
                sample(jan);
                next_sample = now + o->sample_interval_ms;
            }
            bool purges = any_purge(o);
            bool busy = jan->conn && purges && purge_tick(jan, &next_purge);
            if (o->sample_interval_ms > 0 && next_sample < deadline)
                deadline = next_sample;
            if (jan->partitions && next_partitions < deadline)
                deadline = next_partitions;
            if (o->move_inbox_legacy && next_legacy < deadline)
                deadline = next_legacy;
            if (purges) {
                /* not ready yet: look again soon; purging: next batch at once */
                int64_t p = busy ? now : (next_purge > now ? next_purge : now + 1000);
                if (p < deadline)
                    deadline = p;
            }
        }
        if (!wait_until(jan, deadline))
            break;
    }
    drop_conn(jan);
    return NULL;
}

pb_status_t pb_janitor_start(const pb_janitor_opts_t *opts, pb_janitor_t **out, pb_error_t *err)
{
    *out = NULL;
    if (opts->sample_interval_ms <= 0 && !any_purge(opts) && !opts->make_partitions &&
        !opts->move_inbox_legacy)
        return PB_OK;
    pb_janitor_t *jan = pb_malloc(sizeof *jan);
    memset(jan, 0, sizeof *jan);
    jan->opts = *opts;
    jan->partitions = opts->make_partitions;
    while (jan->job < opts->n_purges && !purge_wanted(&opts->purges[jan->job]))
        jan->job++; /* the first table with a retention */
    pthread_mutex_init(&jan->mu, NULL);
    pthread_cond_init(&jan->cv, NULL);
    /* SIGTERM and SIGINT stay with the main thread (they interrupt its sleeps) */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int rc = pthread_create(&jan->thread, NULL, janitor_main, jan);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_mutex_destroy(&jan->mu);
        pthread_cond_destroy(&jan->cv);
        free(jan);
        return pb_fail(err, PB_FATAL, "cannot start the janitor thread: %s", strerror(rc));
    }
    *out = jan;
    return PB_OK;
}

void pb_janitor_stop(pb_janitor_t *jan)
{
    if (!jan)
        return;
    pthread_mutex_lock(&jan->mu);
    jan->stopping = true;
    pthread_cond_signal(&jan->cv);
    pthread_mutex_unlock(&jan->mu);
    pthread_join(jan->thread, NULL);
    pthread_mutex_destroy(&jan->mu);
    pthread_cond_destroy(&jan->cv);
    free(jan);
}
