#include "consume/driver.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/retry.h"
#include "consume/hold.h"
#include "consume/lanes.h"
#include "metrics/metrics.h"
#include "source/envelope.h"

#define FAC "consume"
#define STATS_INTERVAL_MS 10000
#define RECEIVE_TICK_MS 500
#define BOUND_LOG_INTERVAL_MS 5000

/* One lane's share of the batch: messages of one aggregate always go to the same lane, so the
 * lanes run their transactions in parallel without reordering an aggregate. */
typedef struct lane {
    pb_message_t *msgs;
    uint8_t *flags;
    pb_inbox_verdict_t *verdicts;
    size_t *index; /* each message's position in the batch */
    size_t n;
    pb_inbox_counts_t counts; /* of the current batch */
    pb_status_t st;
    pb_error_t err;
} lane_t;

typedef struct driver {
    const pb_config_t *cfg;
    const pb_consume_inbox_ops_t *inbox;
    void *inbox_ctx;
    volatile sig_atomic_t *stop;
    pb_source_t *src;
    bool pg_up, src_up;
    pb_retry_t pg_retry, src_retry;
    lane_t *lanes;
    int n_lanes;
    pb_lanes_t *workers;
    bool *busy;
    pb_message_t *msgs; /* the batch: held messages that go on, then fresh ones */
    uint8_t *flags;     /* PB_INBOX_* per message of the batch */
    pb_inbox_verdict_t *verdicts;
    uint64_t *back;        /* tags pb_hold_admit gives back */
    pb_settle_t *settle;   /* what the source is told after a batch */
    pb_hold_t *hold; /* failed messages and what waits behind them, unsettled */
    pb_envelope_t envelope; /* CloudEvents attributes and trace context of fresh messages */
    pb_inbox_counts_t counts, stats_counts;
    int64_t drain_said;     /* when --drain last said what it waits for */
    int64_t held_full_said; /* when the byte bound of the hold was last logged */
    int64_t stats_at;
} driver_t;

/* Losing the broker connection returns every unacknowledged message to the queue, the held
 * ones too: forget them. */
static void drop_source(driver_t *d, const pb_error_t *why)
{
    if (why)
        log_warn(FAC, "%s broker connection lost: %s", d->src->ops->name, why->msg);
    d->src_up = false;
    pb_hold_clear(d->hold);
}

static void drop_pg(driver_t *d)
{
    if (d->pg_up)
        d->inbox->disconnect(d->inbox_ctx);
    d->pg_up = false;
}

/* While PostgreSQL works on a batch (lane 0, on the loop's thread): decodes the broker's next
 * deliveries as they come, so that the next receive finds its batch ready instead of leaving
 * PostgreSQL idle. Returns once pg_fd is readable. */
static void read_ahead(void *arg, int pg_fd)
{
    driver_t *d = arg;
    size_t max = (size_t)d->cfg->consume_batch_size;
    for (;;) {
        int src_fd = d->src_up && d->src->ops->prefetch ? d->src->ops->prefetch_fd(d->src, max)
                                                         : -1;
        struct pollfd p[2] = {{.fd = pg_fd, .events = POLLIN}, {.fd = src_fd, .events = POLLIN}};
        int rc = poll(p, src_fd >= 0 ? 2 : 1, -1);
        if (rc < 0 && errno == EINTR)
            continue; /* a signal: the batch is finished first all the same */
        if (rc < 0 || p[0].revents)
            return; /* libpq takes it from here, errors included */
        if (!p[1].revents)
            continue;
        pb_error_t src_err;
        if (d->src->ops->prefetch(d->src, max, &src_err) != PB_OK)
            /* the batch in flight commits all the same; it is not acknowledged (the broker
             * redelivers it and the inbox absorbs that) */
            drop_source(d, &src_err);
    }
}

static pb_status_t inbox_connect(void *arg, pb_error_t *err)
{
    driver_t *d = arg;
    return d->inbox->connect(d->inbox_ctx, d->n_lanes, err);
}

static pb_status_t connect_pg(driver_t *d, pb_error_t *err)
{
    pb_status_t st = pb_retry_connect(&d->pg_retry, inbox_connect, d, err);
    if (st != PB_OK)
        return st;
    if (d->inbox->set_wait)
        d->inbox->set_wait(d->inbox_ctx, read_ahead, d);
    d->pg_up = true;
    char where[256] = "";
    if (d->inbox->describe)
        d->inbox->describe(d->inbox_ctx, where, sizeof where);
    log_info(FAC, "consumer \"%s\" writing its inbox in postgresql %s (%d lane%s)",
             d->cfg->consume_consumer, where, d->n_lanes, d->n_lanes == 1 ? "" : "s");
    return PB_OK;
}

static pb_status_t source_connect(void *arg, pb_error_t *err)
{
    pb_source_t *src = arg;
    return src->ops->connect(src, err);
}

static pb_status_t connect_source(driver_t *d, pb_error_t *err)
{
    pb_status_t st = pb_retry_connect(&d->src_retry, source_connect, d->src, err);
    d->src_up = st == PB_OK;
    return st;
}

/* After the commit: settles what is done or dead; pb_hold_settle kept the rest. */
static pb_status_t settle_batch(driver_t *d, size_t n, pb_error_t *err)
{
    size_t n_settled;
    pb_hold_settle(d->hold, d->msgs, d->verdicts, n, pb_monotonic_ms(), d->settle, &n_settled);
    if (n_settled == 0)
        return PB_OK;
    return d->src->ops->settle(d->src, d->settle, n_settled, err);
}

/* Tells the source to hand tags[0..n) out again later. */
static pb_status_t give_back(driver_t *d, const uint64_t *tags, size_t n, pb_error_t *err)
{
    for (size_t i = 0; i < n; i++)
        d->settle[i] = (pb_settle_t){tags[i], PB_SETTLE_RETRY};
    return n ? d->src->ops->settle(d->src, d->settle, n, err) : PB_OK;
}

static void log_stats(driver_t *d, bool force)
{
    int64_t now = pb_monotonic_ms();
    if (!force && now - d->stats_at < STATS_INTERVAL_MS)
        return;
    uint64_t delta = d->counts.processed - d->stats_counts.processed;
    uint64_t dups = d->counts.duplicates - d->stats_counts.duplicates;
    if (delta || dups || force)
        log_info(FAC, "processed %llu messages in %.1f s (%.0f/s), %llu duplicates; totals: "
                      "processed %llu, duplicates %llu, handler failures %llu, dead %llu, out of "
                      "order %llu; held %zu",
                 (unsigned long long)delta, (double)(now - d->stats_at) / 1000.0,
                 now > d->stats_at ? (double)delta * 1000.0 / (double)(now - d->stats_at) : 0.0,
                 (unsigned long long)dups, (unsigned long long)d->counts.processed,
                 (unsigned long long)d->counts.duplicates, (unsigned long long)d->counts.failed,
                 (unsigned long long)d->counts.dead,
                 (unsigned long long)(d->counts.late + d->counts.gap_skipped),
                 pb_hold_count(d->hold));
    d->stats_counts = d->counts;
    d->stats_at = now;
}

/* FNV-1a of the order key: the aggregate, else the message id. */
static unsigned lane_of(const pb_message_t *m, int n_lanes)
{
    const char *key = m->aggregate_id ? m->aggregate_id : m->message_id ? m->message_id : "";
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h % (unsigned)n_lanes;
}

/* @thread lane: touches only its lane. */
static void run_lane(void *arg, int l)
{
    driver_t *d = arg;
    lane_t *lane = &d->lanes[l];
    lane->counts = (pb_inbox_counts_t){0};
    lane->st = d->inbox->handle(d->inbox_ctx, l, lane->msgs, lane->flags, lane->n, lane->verdicts,
                                &lane->counts, &lane->err);
}

static void add_counts(pb_inbox_counts_t *to, const pb_inbox_counts_t *c)
{
    to->processed += c->processed;
    to->duplicates += c->duplicates;
    to->failed += c->failed;
    to->dead += c->dead;
    to->late += c->late;
    to->gap_skipped += c->gap_skipped;
}

/* Handles d->msgs[0..n) on the lanes in parallel and gathers their verdicts into d->verdicts.
 * The messages of a lane that failed get a zero-delay retry (nothing of them committed); the
 * worst status is returned. */
static pb_status_t handle_in_lanes(driver_t *d, size_t n, pb_error_t *err)
{
    for (int l = 0; l < d->n_lanes; l++)
        d->lanes[l].n = 0;
    for (size_t i = 0; i < n; i++) {
        lane_t *lane = &d->lanes[d->n_lanes > 1 ? lane_of(&d->msgs[i], d->n_lanes) : 0];
        lane->msgs[lane->n] = d->msgs[i];
        lane->flags[lane->n] = d->flags[i];
        lane->index[lane->n++] = i;
    }
    for (int l = 0; l < d->n_lanes; l++)
        d->busy[l] = d->lanes[l].n > 0;
    pb_lanes_run(d->workers, d->busy);
    pb_status_t worst = PB_OK;
    pb_inbox_counts_t sum = {0};
    for (int l = 0; l < d->n_lanes; l++) {
        lane_t *lane = &d->lanes[l];
        if (!lane->n)
            continue;
        for (size_t j = 0; j < lane->n; j++)
            d->verdicts[lane->index[j]] = lane->st == PB_OK
                                              ? lane->verdicts[j]
                                              : (pb_inbox_verdict_t){PB_INBOX_REQUEUE, 0, 0};
        if (lane->st == PB_OK) {
            add_counts(&sum, &lane->counts);
        } else if (lane->st > worst) {
            worst = lane->st;
            *err = lane->err;
        }
    }
    add_counts(&d->counts, &sum);
    const char *consumer = d->cfg->consume_consumer;
    if (sum.late)
        pb_metrics_out_of_order(consumer, "late", sum.late);
    if (sum.gap_skipped)
        pb_metrics_out_of_order(consumer, "gap_skipped", sum.gap_skipped);
    pb_metrics_batch(n);
    pb_metrics_inbox(consumer, sum.processed, sum.duplicates, sum.failed, sum.dead);
    return worst;
}

/* How many fresh messages the next receive may take (see hold.h for the two bounds). */
static size_t room_for_fresh(driver_t *d, size_t k, int64_t now)
{
    size_t cap = (size_t)d->cfg->consume_batch_size;
    if (pb_hold_bytes(d->hold) < (size_t)d->cfg->consume_max_held_bytes)
        return cap - k;
    if (now - d->held_full_said >= BOUND_LOG_INTERVAL_MS) {
        log_warn(FAC, "%zu messages of %zu bytes held back (consume.max_held_bytes): taking no new "
                      "messages until held ones go on", pb_hold_count(d->hold),
                 pb_hold_bytes(d->hold));
        d->held_full_said = now;
    }
    return 0;
}

/* *idle: the receive came back empty and no message is held. */
static pb_status_t consume_batch(driver_t *d, bool *idle, pb_error_t *err)
{
    const pb_config_t *cfg = d->cfg;
    size_t cap = (size_t)cfg->consume_batch_size;
    int64_t now = pb_monotonic_ms();
    size_t k = pb_hold_take(d->hold, d->msgs, d->flags, cap, now);
    size_t room = room_for_fresh(d, k, now);
    int64_t wait = k ? 0 : pb_hold_wait_ms(d->hold, now, RECEIVE_TICK_MS);
    size_t n_fresh = 0;
    pb_error_t src_err;
    if (d->src->ops->receive(d->src, d->msgs + k, room, wait, k ? 0 : cfg->consume_batch_wait,
                             &n_fresh, &src_err) != PB_OK) {
        drop_source(d, &src_err); /* the held messages too: they come again */
        return PB_OK;
    }
    pb_envelope_fill(&d->envelope, d->msgs + k, n_fresh);
    /* at the count bound, what would be held is given back (see hold.h) */
    bool full = pb_hold_count(d->hold) >= (size_t)cfg->consume_max_held;
    size_t n_back;
    size_t n = pb_hold_admit(d->hold, d->msgs, d->flags, k, n_fresh, full, d->back, &n_back);
    if (n_back)
        log_warn(FAC, "%zu messages held back (consume.max_held): %zu more of held aggregates "
                      "given back to the broker for later", pb_hold_count(d->hold), n_back);
    if (give_back(d, d->back, n_back, &src_err) != PB_OK) {
        drop_source(d, &src_err);
        return PB_OK;
    }
    if (n == 0) {
        *idle = d->src_up && n_fresh == 0 && pb_hold_count(d->hold) == 0;
        return PB_OK;
    }
    int64_t t_received = pb_monotonic_ms();
    pb_status_t st = handle_in_lanes(d, n, err);
    log_debug(FAC, "batch of %zu handled in %lld ms", n, (long long)(pb_monotonic_ms() - t_received));
    if (st == PB_FATAL) {
        /* nothing of the failed lane committed: give the whole batch back now */
        for (size_t i = 0; i < n; i++)
            d->back[i] = d->msgs[i].tag;
        if (d->src_up && give_back(d, d->back, n, &src_err) != PB_OK)
            drop_source(d, NULL);
        return st;
    }
    if (d->src_up && settle_batch(d, n, &src_err) != PB_OK) {
        /* committed but not settled: the broker redelivers, the inbox absorbs it */
        log_warn(FAC, "%s broker connection lost before the settlement: %s",
                 d->src->ops->name, src_err.msg);
        drop_source(d, NULL);
    }
    return st; /* PB_TRANSIENT: a lane lost its connection (its messages are held for a retry) */
}

/* --drain: nothing received, nothing held; is anything left at the broker for us, deliveries
 * not acknowledged (redelivered later) included? *done when not. PB_FATAL when the source gives
 * the drain up (err says why). */
static pb_status_t drained(driver_t *d, bool *done, pb_error_t *err)
{
    *done = false;
    if (!d->src->ops->pending) {
        *done = true;
        return PB_OK;
    }
    int64_t pending = 0;
    pb_status_t st = d->src->ops->pending(d->src, &pending, err);
    if (st == PB_FATAL)
        return st;
    if (st != PB_OK) {
        drop_source(d, err);
        return PB_OK;
    }
    if (pending == 0) {
        *done = true;
        return PB_OK;
    }
    int64_t now = pb_monotonic_ms();
    if (now - d->drain_said >= 5000) {
        log_info(FAC, "draining: %lld message(s) still pending at the broker (unacknowledged "
                      "ones come again after their timeout)", (long long)pending);
        d->drain_said = now;
    }
    return PB_OK;
}

static void driver_init(driver_t *d, const pb_consume_setup_t *s, char *src_what, size_t n)
{
    const pb_config_t *cfg = s->cfg;
    memset(d, 0, sizeof *d);
    d->cfg = cfg;
    d->inbox = s->inbox;
    d->inbox_ctx = s->inbox_ctx;
    d->stop = s->stop;
    d->src = s->src;
    size_t cap = (size_t)cfg->consume_batch_size;
    d->msgs = pb_malloc(cap * sizeof *d->msgs);
    d->flags = pb_malloc(cap * sizeof *d->flags);
    d->verdicts = pb_malloc(cap * sizeof *d->verdicts);
    d->back = pb_malloc(cap * sizeof *d->back);
    d->settle = pb_malloc(cap * sizeof *d->settle);
    d->hold = pb_hold_new(cfg->consume_gap_timeout);
    pb_envelope_init(&d->envelope, cfg);
    d->n_lanes = (int)cfg->consume_lanes;
    d->lanes = pb_malloc((size_t)d->n_lanes * sizeof *d->lanes);
    d->busy = pb_malloc((size_t)d->n_lanes * sizeof *d->busy);
    memset(d->lanes, 0, (size_t)d->n_lanes * sizeof *d->lanes);
    for (int l = 0; l < d->n_lanes; l++) {
        d->lanes[l].msgs = pb_malloc(cap * sizeof *d->lanes[l].msgs);
        d->lanes[l].flags = pb_malloc(cap * sizeof *d->lanes[l].flags);
        d->lanes[l].verdicts = pb_malloc(cap * sizeof *d->lanes[l].verdicts);
        d->lanes[l].index = pb_malloc(cap * sizeof *d->lanes[l].index);
    }
    d->workers = pb_lanes_new(d->n_lanes, run_lane, d);
    snprintf(src_what, n, "the %s broker", d->src->ops->name);
    d->src_retry = (pb_retry_t){.fac = FAC, .what = src_what,
                                .cap_ms = cfg->consume_reconnect_cap, .stop = s->stop};
    d->pg_retry = (pb_retry_t){.fac = FAC, .what = "postgresql",
                               .cap_ms = cfg->consume_reconnect_cap, .stop = s->stop};
    d->stats_at = pb_monotonic_ms();
}

static void driver_free(driver_t *d)
{
    pb_lanes_free(d->workers);
    for (int l = 0; l < d->n_lanes; l++) {
        free(d->lanes[l].msgs);
        free(d->lanes[l].flags);
        free(d->lanes[l].verdicts);
        free(d->lanes[l].index);
    }
    free(d->lanes);
    free(d->busy);
    free(d->msgs);
    free(d->flags);
    free(d->verdicts);
    free(d->back);
    free(d->settle);
    pb_hold_free(d->hold);
    pb_envelope_free(&d->envelope);
}

pb_status_t pb_consume_drive(const pb_consume_setup_t *s, pb_error_t *err)
{
    driver_t d;
    char src_what[64];
    driver_init(&d, s, src_what, sizeof src_what);
    pb_status_t st = PB_OK;
    while (!*d.stop) {
        pb_metrics_set_state(d.pg_up, d.src_up, d.pg_up && d.src_up);
        if (!d.pg_up && (st = connect_pg(&d, err)) != PB_OK) {
            if (st == PB_FATAL)
                break;
            continue;
        }
        if (!d.src_up && (st = connect_source(&d, err)) != PB_OK) {
            if (st == PB_FATAL)
                break;
            continue;
        }
        bool idle = false, done = false;
        st = consume_batch(&d, &idle, err);
        if (st == PB_OK && idle && s->drain && (st = drained(&d, &done, err)) == PB_OK && done) {
            log_info(FAC, "queue drained");
            break;
        }
        if (st == PB_TRANSIENT) {
            log_warn(FAC, "postgresql: %s; reconnecting", err->msg);
            drop_pg(&d);
        } else if (st == PB_FATAL) {
            break;
        }
        log_stats(&d, false);
    }
    if (st != PB_FATAL)
        st = PB_OK;
    log_stats(&d, true);
    drop_pg(&d);
    driver_free(&d);
    return st;
}
