#include "relay/relay.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/log.h"
#include "sink/sink.h"
#include "store/outbox.h"
#include "store/pg.h"

#define FAC "relay"
#define NOTIFY_CHANNEL "postbox_outbox"
/* Only one relay publishes at a time (until sharding arrives): the others stand by on this
 * session advisory lock and take over when its holder's session ends. */
#define RELAY_LOCK_SQL "SELECT pg_try_advisory_lock(hashtext('postbox.relay'))"
#define STATS_INTERVAL_MS 10000
#define IDLE_TICK_MS 1000

typedef struct relay {
    const pb_config_t *cfg;
    const pb_relay_opts_t *opts;
    volatile sig_atomic_t *stop;
    PGconn *conn;
    pb_outbox_t ob;
    pb_sink_t *snk;
    bool sink_up;
    int sink_attempt;  /* consecutive failed connects, for the backoff */
    pb_result_t *results;
    pb_settle_plan_t *plans;
    char (*reasons)[sizeof ((pb_result_t *)0)->error + 64];
    size_t *rejected; /* indexes of events rejected by the precheck, per batch */
    /* totals for the periodic log line */
    uint64_t published, retried, dead;
    uint64_t stats_published;
    int64_t stats_at;
} relay_t;

static void drop_pg(relay_t *rel)
{
    if (!rel->conn)
        return;
    pb_outbox_free(&rel->ob);
    PQfinish(rel->conn);
    rel->conn = NULL;
}

/* Waits up to ms, returning early on stop. */
static void nap(relay_t *rel, int64_t ms)
{
    int64_t until = pb_monotonic_ms() + ms;
    while (!*rel->stop) {
        int64_t left = until - pb_monotonic_ms();
        if (left <= 0)
            break;
        pb_sleep_ms(left < 200 ? left : 200);
    }
}

static pb_status_t connect_pg(relay_t *rel, pb_error_t *err)
{
    pb_status_t st = pb_pg_connect_retry(rel->cfg->postgres_dsn, rel->cfg->relay_reconnect_cap,
                                         rel->stop, &rel->conn, err);
    if (st != PB_OK)
        return st;
    char where[256];
    pb_pg_describe(rel->conn, where, sizeof where);
    pb_outbox_init(&rel->ob, rel->conn, strcmp(rel->cfg->relay_on_publish, "delete") == 0);
    if ((st = pb_pg_exec(rel->conn, "LISTEN " NOTIFY_CHANNEL, err)) != PB_OK ||
        (st = pb_outbox_prepare(&rel->ob, err)) != PB_OK) {
        if (st == PB_FATAL && strstr(err->msg, "does not exist"))
            pb_fail(err, PB_FATAL, "%s (run `postbox init` first)", err->msg);
        drop_pg(rel);
        return st;
    }
    /* Stand by until this instance owns the outbox. */
    bool said = false;
    while (!*rel->stop) {
        PGresult *res = PQexec(rel->conn, RELAY_LOCK_SQL);
        if ((st = pb_pg_check(rel->conn, res, PGRES_TUPLES_OK, "take relay lock", err)) != PB_OK) {
            drop_pg(rel);
            return st;
        }
        bool owned = PQgetvalue(res, 0, 0)[0] == 't';
        PQclear(res);
        if (owned) {
            log_info(FAC, "relaying from postgresql %s", where);
            return PB_OK;
        }
        if (!said)
            log_info(FAC, "another relay owns the outbox; standing by");
        said = true;
        nap(rel, rel->cfg->relay_poll_interval);
    }
    drop_pg(rel);
    return pb_fail(err, PB_TRANSIENT, "interrupted while standing by");
}

static pb_status_t connect_sink(relay_t *rel, pb_error_t *err)
{
    while (!*rel->stop) {
        pb_status_t st = rel->snk->ops->connect(rel->snk, err);
        if (st == PB_OK) {
            if (rel->sink_attempt)
                log_info(FAC, "%s sink connected after %d attempts", rel->snk->ops->name,
                         rel->sink_attempt + 1);
            rel->sink_attempt = 0;
            rel->sink_up = true;
            return PB_OK;
        }
        if (st == PB_FATAL)
            return st;
        rel->sink_attempt++;
        int64_t delay =
            pb_backoff_ms(rel->sink_attempt, 200, rel->cfg->relay_reconnect_cap, pb_random_unit());
        log_warn(FAC, "waiting for the %s broker (attempt %d, next in %lld ms): %s",
                 rel->snk->ops->name, rel->sink_attempt, (long long)delay, err->msg);
        nap(rel, delay);
    }
    return pb_fail(err, PB_TRANSIENT, "interrupted while waiting for the broker");
}

/* Sleeps until a NOTIFY arrives, the poll interval passes, or stop. Keeps the broker connection
 * serviced (heartbeats) meanwhile. */
static pb_status_t wait_for_work(relay_t *rel, pb_error_t *err)
{
    int64_t until = pb_monotonic_ms() + rel->cfg->relay_poll_interval;
    int fd = PQsocket(rel->conn);
    while (!*rel->stop) {
        if (!PQconsumeInput(rel->conn))
            return pb_fail(err, PB_TRANSIENT, "postgresql connection lost: %s",
                           PQerrorMessage(rel->conn));
        PGnotify *note;
        bool woken = false;
        while ((note = PQnotifies(rel->conn)) != NULL) {
            woken = true;
            PQfreemem(note);
        }
        if (woken)
            return PB_OK;
        if (rel->sink_up && rel->snk->ops->idle(rel->snk, err) != PB_OK) {
            log_warn(FAC, "%s broker connection lost while idle: %s", rel->snk->ops->name, err->msg);
            rel->sink_up = false;
            return PB_OK;
        }
        int64_t left = until - pb_monotonic_ms();
        if (left <= 0)
            return PB_OK;
        if (left > IDLE_TICK_MS)
            left = IDLE_TICK_MS;
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(fd, &rd);
        struct timeval tv = {.tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000};
        if (select(fd + 1, &rd, NULL, NULL, &tv) < 0 && errno != EINTR)
            return pb_fail(err, PB_TRANSIENT, "select: %s", strerror(errno));
    }
    return PB_OK;
}

static bool same_aggregate(const pb_event_t *a, const pb_event_t *b)
{
    return strcmp(a->aggregate_id, b->aggregate_id) == 0 &&
           strcmp(a->aggregate_type, b->aggregate_type) == 0;
}

/* Before publishing: events the sink can never publish are rejected, and the later events of
 * their aggregates in this batch are held back, so that they follow the dead letter instead of
 * overtaking it. */
static void precheck(relay_t *rel, const pb_event_t *events, size_t n)
{
    size_t n_blocked = 0;
    for (size_t i = 0; i < n; i++) {
        rel->results[i].outcome = PB_OUT_UNTRIED;
        rel->results[i].error[0] = '\0';
        for (size_t b = 0; b < n_blocked; b++) {
            if (same_aggregate(&events[rel->rejected[b]], &events[i])) {
                rel->results[i].outcome = PB_OUT_HELD;
                break;
            }
        }
        if (rel->results[i].outcome == PB_OUT_HELD || !rel->snk->ops->check)
            continue;
        if (!rel->snk->ops->check(rel->snk, &events[i], &rel->results[i]))
            rel->rejected[n_blocked++] = i;
    }
}

/* Decides, per failed event, between another attempt later and a dead letter. */
static void plan(relay_t *rel, const pb_event_t *events, size_t n)
{
    const pb_config_t *cfg = rel->cfg;
    for (size_t i = 0; i < n; i++) {
        pb_settle_plan_t *p = &rel->plans[i];
        const pb_result_t *r = &rel->results[i];
        memset(p, 0, sizeof *p);
        if (r->outcome == PB_OUT_REJECT) {
            p->dead = true;
            p->reason = r->error;
        } else if (r->outcome == PB_OUT_RETRY) {
            int attempt = events[i].attempts + 1;
            if (attempt >= cfg->relay_max_attempts) {
                p->dead = true;
                snprintf(rel->reasons[i], sizeof rel->reasons[i], "gave up after %d attempts: %s",
                         attempt, r->error);
                p->reason = rel->reasons[i];
            } else {
                p->retry_delay_ms = pb_backoff_ms(attempt, cfg->relay_backoff_base,
                                                  cfg->relay_backoff_cap, pb_random_unit());
            }
            log_warn(FAC, "publish of event %s (%s, attempt %d) failed: %s%s", events[i].event_id,
                     events[i].event_type, attempt, r->error, p->dead ? "; dead-lettered" : "");
        }
        if (r->outcome == PB_OUT_REJECT)
            log_warn(FAC, "event %s (%s) can never be published: %s; dead-lettered",
                     events[i].event_id, events[i].event_type, r->error);
    }
}

static void log_stats(relay_t *rel, bool force)
{
    int64_t now = pb_monotonic_ms();
    if (!force && now - rel->stats_at < STATS_INTERVAL_MS)
        return;
    uint64_t delta = rel->published - rel->stats_published;
    if (delta || force)
        log_info(FAC, "published %llu events in %.1f s (%.0f/s); totals: published %llu, retried %llu, dead-lettered %llu",
                 (unsigned long long)delta, (double)(now - rel->stats_at) / 1000.0,
                 now > rel->stats_at ? (double)delta * 1000.0 / (double)(now - rel->stats_at) : 0.0,
                 (unsigned long long)rel->published, (unsigned long long)rel->retried,
                 (unsigned long long)rel->dead);
    rel->stats_published = rel->published;
    rel->stats_at = now;
}

/* One claim-publish-settle round. *claimed receives the batch size. */
static pb_status_t relay_batch(relay_t *rel, size_t *claimed, pb_error_t *err)
{
    pb_status_t st = pb_outbox_claim(&rel->ob, (int)rel->cfg->relay_batch_size, err);
    if (st != PB_OK)
        return st;
    size_t n = rel->ob.n_events;
    *claimed = n;
    if (n == 0)
        return pb_pg_exec(rel->conn, "COMMIT", err);

    const pb_event_t *events = rel->ob.events;
    precheck(rel, events, n);
    pb_error_t sink_err;
    if (rel->snk->ops->publish(rel->snk, events, n, rel->results, &sink_err) != PB_OK) {
        log_warn(FAC, "%s broker connection lost: %s", rel->snk->ops->name, sink_err.msg);
        rel->sink_up = false;
    }
    plan(rel, events, n);
    pb_settle_counts_t counts;
    if ((st = pb_outbox_settle(&rel->ob, rel->results, rel->plans, &counts, err)) != PB_OK)
        return st;
    rel->published += counts.published;
    rel->retried += counts.retried;
    rel->dead += counts.dead;
    return PB_OK;
}

static void relay_free(relay_t *rel)
{
    drop_pg(rel);
    pb_sink_free(rel->snk);
    free(rel->results);
    free(rel->plans);
    free(rel->reasons);
    free(rel->rejected);
}

pb_status_t pb_relay_run(const pb_config_t *cfg, const pb_relay_opts_t *opts,
                         volatile sig_atomic_t *stop, pb_error_t *err)
{
    relay_t rel = {.cfg = cfg, .opts = opts, .stop = stop};
    pb_status_t st = pb_sink_new(cfg, &rel.snk, err);
    if (st != PB_OK)
        return st;
    size_t cap = (size_t)cfg->relay_batch_size;
    rel.results = pb_malloc(cap * sizeof *rel.results);
    rel.plans = pb_malloc(cap * sizeof *rel.plans);
    rel.reasons = pb_malloc(cap * sizeof *rel.reasons);
    rel.rejected = pb_malloc(cap * sizeof *rel.rejected);
    rel.stats_at = pb_monotonic_ms();

    while (!*stop) {
        if (!rel.conn && (st = connect_pg(&rel, err)) != PB_OK) {
            if (st == PB_FATAL)
                break;
            continue; /* interrupted: the loop condition ends it */
        }
        if (!rel.sink_up && (st = connect_sink(&rel, err)) != PB_OK) {
            if (st == PB_FATAL)
                break;
            continue;
        }
        size_t claimed = 0;
        st = relay_batch(&rel, &claimed, err);
        if (st == PB_TRANSIENT) {
            /* the batch's rows stay pending and are published again: at least once */
            log_warn(FAC, "postgresql: %s; reconnecting", err->msg);
            drop_pg(&rel);
            continue;
        }
        if (st == PB_FATAL)
            break;
        log_stats(&rel, false);
        if (claimed == (size_t)cfg->relay_batch_size)
            continue; /* a full batch: more is probably waiting */
        if (opts->drain && claimed == 0) {
            int64_t pending;
            if ((st = pb_outbox_pending(&rel.ob, &pending, err)) == PB_FATAL)
                break;
            if (st == PB_OK && pending == 0) {
                log_info(FAC, "outbox drained");
                break;
            }
        }
        if (claimed == 0 && (st = wait_for_work(&rel, err)) != PB_OK) {
            log_warn(FAC, "%s; reconnecting", err->msg);
            drop_pg(&rel);
        }
    }
    if (st != PB_FATAL)
        st = PB_OK;
    log_stats(&rel, true);
    relay_free(&rel);
    return st;
}
