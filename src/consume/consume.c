#include "consume/consume.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/retry.h"
#include "consume/hold.h"
#include "consume/subscription.h"
#include "inbox/inbox.h"
#include "metrics/metrics.h"
#include "metrics/service.h"
#include "source/source.h"
#include "store/pg.h"

#define FAC "consume"
#define STATS_INTERVAL_MS 10000
#define RECEIVE_TICK_MS 500

/* One PostgreSQL connection with its share of each batch. Messages of one aggregate always go
 * to the same lane, so lanes run their transactions in parallel without reordering an
 * aggregate. */
typedef struct lane {
    PGconn *conn;
    pb_inbox_t ib;
    pb_message_t *msgs;
    uint8_t *flags;
    pb_inbox_verdict_t *verdicts;
    size_t *index; /* each message's position in the batch */
    size_t n;
    pb_inbox_counts_t counts; /* of the current batch */
    pb_status_t st;
    pb_error_t err;
} lane_t;

typedef struct consumer {
    const pb_config_t *cfg;
    volatile sig_atomic_t *stop;
    lane_t *lanes;
    int n_lanes;
    bool pg_up;
    pb_source_t *src;
    bool src_up;
    pb_retry_t src_retry; /* the backoff of the source's connects */
    pb_message_t *msgs; /* the batch: held messages that go on, then fresh ones */
    uint8_t *flags;     /* PB_INBOX_* per message of the batch */
    pb_inbox_verdict_t *verdicts;
    uint64_t *acks;
    pb_hold_t *hold; /* failed messages and what waits behind them, unacknowledged */
    bool wait_for_gaps; /* the subscription takes every event of an aggregate */
    pb_inbox_counts_t counts, stats_counts;
    int64_t drain_said; /* when --drain last said what it waits for */
    int64_t held_full_said; /* when the byte bound of the hold was last logged */
    int64_t stats_at;
} consumer_t;

static void drop_pg(consumer_t *c)
{
    for (int l = 0; l < c->n_lanes; l++) {
        lane_t *lane = &c->lanes[l];
        if (!lane->conn)
            continue;
        pb_inbox_free(&lane->ib);
        PQfinish(lane->conn);
        lane->conn = NULL;
    }
    c->pg_up = false;
}

/* Losing the broker connection returns every unacknowledged message to the queue, the held
 * ones too: forget them. */
static void drop_source(consumer_t *c)
{
    c->src_up = false;
    pb_hold_clear(c->hold);
}

/* While PostgreSQL works on a batch (lane 0, on the consumer's thread): decodes the broker's
 * next deliveries as they come, so that the next receive finds its batch ready instead of
 * leaving PostgreSQL idle. Returns once pg_fd is readable. */
static void read_ahead(void *arg, int pg_fd)
{
    consumer_t *c = arg;
    size_t max = (size_t)c->cfg->consume_batch_size;
    for (;;) {
        int src_fd = c->src_up && c->src->ops->prefetch ? c->src->ops->prefetch_fd(c->src, max)
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
        if (c->src->ops->prefetch(c->src, max, &src_err) != PB_OK) {
            /* the batch in flight commits all the same; it is not acknowledged (the broker
             * redelivers it and the inbox absorbs that) */
            log_warn(FAC, "%s broker connection lost: %s", c->src->ops->name, src_err.msg);
            drop_source(c);
        }
    }
}

static pb_status_t connect_pg(consumer_t *c, pb_error_t *err)
{
    for (int l = 0; l < c->n_lanes; l++) {
        lane_t *lane = &c->lanes[l];
        pb_status_t st = pb_pg_connect_retry(c->cfg->postgres_dsn, c->cfg->consume_reconnect_cap,
                                             c->stop, &lane->conn, err);
        if (st == PB_OK && (st = pb_inbox_init(&lane->ib, lane->conn, c->cfg, err)) != PB_OK) {
            PQfinish(lane->conn);
            lane->conn = NULL;
            if (st == PB_FATAL && pb_error_schema_missing(err))
                pb_fail(err, PB_FATAL, "%s (run `postbox init` first)", err->msg);
        }
        if (st != PB_OK) {
            drop_pg(c);
            return st;
        }
        lane->ib.seq.wait_for_gaps = c->wait_for_gaps;
    }
    pb_inbox_set_wait(&c->lanes[0].ib, read_ahead, c);
    c->pg_up = true;
    char where[256];
    pb_pg_describe(c->lanes[0].conn, where, sizeof where);
    log_info(FAC, "consumer \"%s\" writing its inbox in postgresql %s (%d lane%s)",
             c->cfg->consume_consumer, where, c->n_lanes, c->n_lanes == 1 ? "" : "s");
    return PB_OK;
}

static pb_status_t source_connect(void *arg, pb_error_t *err)
{
    pb_source_t *src = arg;
    return src->ops->connect(src, err);
}

static pb_status_t connect_source(consumer_t *c, pb_error_t *err)
{
    char what[64];
    snprintf(what, sizeof what, "the %s broker", c->src->ops->name);
    c->src_retry.fac = FAC;
    c->src_retry.what = what;
    c->src_retry.cap_ms = c->cfg->consume_reconnect_cap;
    c->src_retry.stop = c->stop;
    pb_status_t st = pb_retry_connect(&c->src_retry, source_connect, c->src, err);
    c->src_up = st == PB_OK;
    return st;
}

/* After the commit: acknowledges what is settled; pb_hold_settle kept the rest. */
static pb_status_t acknowledge(consumer_t *c, size_t n, pb_error_t *err)
{
    size_t n_acks;
    pb_hold_settle(c->hold, c->msgs, c->verdicts, n, pb_monotonic_ms(), c->acks, &n_acks);
    if (n_acks == 0)
        return PB_OK;
    if (n_acks == n && pb_hold_count(c->hold) == 0) {
        /* nothing unacknowledged before the batch's last tag: one frame for all of it */
        uint64_t last = 0;
        for (size_t i = 0; i < n_acks; i++)
            if (c->acks[i] > last)
                last = c->acks[i];
        return c->src->ops->ack(c->src, last, true, err);
    }
    for (size_t i = 0; i < n_acks; i++) {
        pb_status_t st = c->src->ops->ack(c->src, c->acks[i], false, err);
        if (st != PB_OK)
            return st;
    }
    return PB_OK;
}

static void log_stats(consumer_t *c, bool force)
{
    int64_t now = pb_monotonic_ms();
    if (!force && now - c->stats_at < STATS_INTERVAL_MS)
        return;
    uint64_t delta = c->counts.processed - c->stats_counts.processed;
    uint64_t dups = c->counts.duplicates - c->stats_counts.duplicates;
    if (delta || dups || force)
        log_info(FAC, "processed %llu messages in %.1f s (%.0f/s), %llu duplicates; totals: "
                      "processed %llu, duplicates %llu, handler failures %llu, dead %llu; held %zu",
                 (unsigned long long)delta, (double)(now - c->stats_at) / 1000.0,
                 now > c->stats_at ? (double)delta * 1000.0 / (double)(now - c->stats_at) : 0.0,
                 (unsigned long long)dups, (unsigned long long)c->counts.processed,
                 (unsigned long long)c->counts.duplicates, (unsigned long long)c->counts.failed,
                 (unsigned long long)c->counts.dead, pb_hold_count(c->hold));
    c->stats_counts = c->counts;
    c->stats_at = now;
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

/* @thread any: touches only its lane. */
static void *run_lane(void *arg)
{
    lane_t *lane = arg;
    lane->counts = (pb_inbox_counts_t){0};
    lane->st = lane->n ? pb_inbox_handle(&lane->ib, lane->msgs, lane->flags, lane->n, lane->verdicts,
                                         &lane->counts, &lane->err)
                       : PB_OK;
    return NULL;
}

/* Handles c->msgs[0..n) on the lanes in parallel and gathers their verdicts into c->verdicts.
 * The messages of a lane that failed get a zero-delay redelivery (nothing of them committed);
 * the worst status is returned. */
static pb_status_t handle_in_lanes(consumer_t *c, size_t n, pb_error_t *err)
{
    for (int l = 0; l < c->n_lanes; l++)
        c->lanes[l].n = 0;
    for (size_t i = 0; i < n; i++) {
        lane_t *lane = &c->lanes[c->n_lanes > 1 ? lane_of(&c->msgs[i], c->n_lanes) : 0];
        lane->msgs[lane->n] = c->msgs[i];
        lane->flags[lane->n] = c->flags[i];
        lane->index[lane->n++] = i;
    }
    pthread_t threads[16];
    bool started[16] = {false};
    for (int l = 1; l < c->n_lanes; l++)
        started[l] = c->lanes[l].n && pthread_create(&threads[l], NULL, run_lane, &c->lanes[l]) == 0;
    run_lane(&c->lanes[0]);
    for (int l = 1; l < c->n_lanes; l++) {
        if (started[l])
            pthread_join(threads[l], NULL);
        else
            run_lane(&c->lanes[l]); /* no thread to be had: in line */
    }
    pb_status_t worst = PB_OK;
    pb_inbox_counts_t sum = {0};
    for (int l = 0; l < c->n_lanes; l++) {
        lane_t *lane = &c->lanes[l];
        for (size_t j = 0; j < lane->n; j++)
            c->verdicts[lane->index[j]] = lane->st == PB_OK
                                              ? lane->verdicts[j]
                                              : (pb_inbox_verdict_t){PB_INBOX_REQUEUE, 0, 0};
        if (lane->st == PB_OK) {
            sum.processed += lane->counts.processed;
            sum.duplicates += lane->counts.duplicates;
            sum.failed += lane->counts.failed;
            sum.dead += lane->counts.dead;
            sum.late += lane->counts.late;
            sum.gap_skipped += lane->counts.gap_skipped;
        } else if (lane->st > worst) {
            worst = lane->st;
            *err = lane->err;
        }
    }
    c->counts.processed += sum.processed;
    c->counts.duplicates += sum.duplicates;
    c->counts.failed += sum.failed;
    c->counts.dead += sum.dead;
    c->counts.late += sum.late;
    c->counts.gap_skipped += sum.gap_skipped;
    if (sum.late)
        pb_metrics_out_of_order(c->cfg->consume_consumer, "late", sum.late);
    if (sum.gap_skipped)
        pb_metrics_out_of_order(c->cfg->consume_consumer, "gap_skipped", sum.gap_skipped);
    pb_metrics_batch(n);
    pb_metrics_inbox(c->cfg->consume_consumer, sum.processed, sum.duplicates, sum.failed, sum.dead);
    return worst;
}

/* *idle: the receive came back empty and no message is held. */
static pb_status_t consume_batch(consumer_t *c, bool *idle, pb_error_t *err)
{
    const pb_config_t *cfg = c->cfg;
    size_t cap = (size_t)cfg->consume_batch_size;
    int64_t now = pb_monotonic_ms();
    size_t k = pb_hold_take(c->hold, c->msgs, c->flags, cap, now);
    size_t room = cap - k;
    if (pb_hold_bytes(c->hold) >= (size_t)cfg->consume_max_held_bytes) {
        /* no fresh messages until held ones go on (see hold.h) */
        room = 0;
        if (now - c->held_full_said >= 5000) {
            log_warn(FAC, "%zu messages of %zu bytes held back (consume.max_held_bytes): taking no "
                          "new messages until held ones go on", pb_hold_count(c->hold),
                     pb_hold_bytes(c->hold));
            c->held_full_said = now;
        }
    }
    int64_t wait = k ? 0 : pb_hold_wait_ms(c->hold, now, RECEIVE_TICK_MS);
    size_t n_fresh = 0;
    pb_error_t src_err;
    if (c->src->ops->receive(c->src, c->msgs + k, room, wait, k ? 0 : cfg->consume_batch_wait,
                             &n_fresh, &src_err) != PB_OK) {
        log_warn(FAC, "%s broker connection lost: %s", c->src->ops->name, src_err.msg);
        drop_source(c); /* the held messages too: they come again */
        return PB_OK;
    }
    /* at the bound of what may be held, what would be held is given back (see hold.h) */
    bool full = pb_hold_count(c->hold) >= (size_t)cfg->consume_max_held;
    size_t n_back;
    size_t n = pb_hold_admit(c->hold, c->msgs, c->flags, k, n_fresh, full, c->acks, &n_back);
    if (n_back)
        log_warn(FAC, "%zu messages held back (consume.max_held): %zu more of held aggregates "
                      "given back to the broker for later", pb_hold_count(c->hold), n_back);
    for (size_t i = 0; i < n_back; i++)
        if (c->src->ops->requeue(c->src, c->acks[i], &src_err) != PB_OK) {
            log_warn(FAC, "%s broker connection lost: %s", c->src->ops->name, src_err.msg);
            drop_source(c);
            return PB_OK;
        }
    if (n == 0) {
        *idle = c->src_up && n_fresh == 0 && pb_hold_count(c->hold) == 0;
        return PB_OK;
    }
    int64_t t_received = pb_monotonic_ms();
    pb_status_t st = handle_in_lanes(c, n, err);
    log_debug(FAC, "batch of %zu handled in %lld ms", n, (long long)(pb_monotonic_ms() - t_received));
    if (st == PB_FATAL) {
        /* nothing of the failed lane committed: give the whole batch back now */
        for (size_t i = 0; c->src_up && i < n; i++)
            if (c->src->ops->requeue(c->src, c->msgs[i].tag, &src_err) != PB_OK)
                drop_source(c);
        return st;
    }
    if (c->src_up && acknowledge(c, n, &src_err) != PB_OK) {
        /* committed but not acknowledged: the broker redelivers, the inbox absorbs it */
        log_warn(FAC, "%s broker connection lost before the acknowledgement: %s",
                 c->src->ops->name, src_err.msg);
        drop_source(c);
    }
    return st; /* PB_TRANSIENT: a lane lost its connection (its messages are held for a retry) */
}

/* --drain: nothing received, nothing held; is anything left at the broker for us, deliveries
 * not acknowledged (redelivered later) included? */
static bool drained(consumer_t *c)
{
    if (!c->src->ops->pending)
        return true;
    int64_t pending = 0;
    pb_error_t src_err;
    if (c->src->ops->pending(c->src, &pending, &src_err) != PB_OK) {
        log_warn(FAC, "%s broker connection lost: %s", c->src->ops->name, src_err.msg);
        drop_source(c);
        return false;
    }
    if (pending == 0)
        return true;
    int64_t now = pb_monotonic_ms();
    if (now - c->drain_said >= 5000) {
        log_info(FAC, "draining: %lld message(s) still pending at the broker (unacknowledged "
                      "ones come again after their timeout)", (long long)pending);
        c->drain_said = now;
    }
    return false;
}

/* Frees what pb_consume_run allocated for the loop and the source (not the connection). */
static void free_consumer(consumer_t *c)
{
    pb_source_free(c->src);
    c->src = NULL;
    for (int l = 0; l < c->n_lanes; l++) {
        free(c->lanes[l].msgs);
        free(c->lanes[l].flags);
        free(c->lanes[l].verdicts);
        free(c->lanes[l].index);
    }
    free(c->lanes);
    c->lanes = NULL;
    free(c->msgs);
    free(c->flags);
    free(c->verdicts);
    free(c->acks);
    pb_hold_free(c->hold);
}

pb_status_t pb_consume_run(const pb_config_t *cfg, const pb_consume_opts_t *opts,
                           volatile sig_atomic_t *stop, pb_error_t *err)
{
    pb_status_t st = *cfg->consume_handler || cfg->n_handlers
                         ? PB_OK
                         : pb_fail(err, PB_FATAL, "no handler configured: set consume.handler or "
                                                  "a [handlers] entry");
    consumer_t c = {.cfg = cfg, .stop = stop};
    if (st == PB_OK)
        st = pb_source_new(cfg, &c.src, err); /* checks the configuration, connects nothing */
    if (st != PB_OK) {
        if (opts->config_error)
            *opts->config_error = true;
        return st;
    }
    size_t cap = (size_t)cfg->consume_batch_size;
    c.msgs = pb_malloc(cap * sizeof *c.msgs);
    c.flags = pb_malloc(cap * sizeof *c.flags);
    c.verdicts = pb_malloc(cap * sizeof *c.verdicts);
    c.acks = pb_malloc(cap * sizeof *c.acks);
    c.hold = pb_hold_new(cfg->consume_gap_timeout);
    c.n_lanes = (int)cfg->consume_lanes;
    c.lanes = pb_malloc((size_t)c.n_lanes * sizeof *c.lanes);
    memset(c.lanes, 0, (size_t)c.n_lanes * sizeof *c.lanes);
    for (int l = 0; l < c.n_lanes; l++) {
        c.lanes[l].msgs = pb_malloc(cap * sizeof *c.lanes[l].msgs);
        c.lanes[l].flags = pb_malloc(cap * sizeof *c.lanes[l].flags);
        c.lanes[l].verdicts = pb_malloc(cap * sizeof *c.lanes[l].verdicts);
        c.lanes[l].index = pb_malloc(cap * sizeof *c.lanes[l].index);
    }
    c.stats_at = pb_monotonic_ms();
    char why[400];
    c.wait_for_gaps = pb_subscription_waits_for_gaps(cfg, why, sizeof why);
    if (c.wait_for_gaps)
        log_info(FAC, "ordering: an aggregate's message waits up to %lld ms for a missing earlier "
                      "aggregate_sequence, since %s", (long long)cfg->consume_gap_timeout, why);
    else
        log_info(FAC, "ordering: the broker's order per aggregate, no wait for missing "
                      "aggregate_sequence numbers, since %s", why);
    if (c.wait_for_gaps && strcmp(cfg->consume_source, "nats") == 0 &&
        cfg->consume_gap_timeout <= cfg->nats_ack_wait)
        log_warn(FAC, "consume.gap_timeout %lld ms is not above nats.ack_wait %lld ms: after a "
                      "consumer crash, an aggregate's later messages may go on before the earlier "
                      "ones are redelivered", (long long)cfg->consume_gap_timeout,
                 (long long)cfg->nats_ack_wait);
    if (c.wait_for_gaps && strcmp(cfg->consume_source, "redis") == 0 &&
        cfg->consume_gap_timeout <= cfg->redis_claim_idle)
        log_warn(FAC, "consume.gap_timeout %lld ms is not above redis.claim_idle %lld ms: after a "
                      "consumer crash, an aggregate's later entries go on before the dead "
                      "consumer's entries are claimed, which are then handled out of order", (long long)cfg->consume_gap_timeout,
                 (long long)cfg->redis_claim_idle);
    if (strcmp(cfg->consume_source, "amqp") == 0 && cfg->consume_max_held < cfg->amqp_prefetch)
        log_warn(FAC, "consume.max_held %lld is below amqp.prefetch %lld: at the bound RabbitMQ "
                      "redelivers what is given back at once, again and again",
                 (long long)cfg->consume_max_held, (long long)cfg->amqp_prefetch);
    pb_ops_t *ops; /* /metrics, /healthz, /readyz; inbox retention purge */
    if ((st = pb_ops_start(cfg, "consume", &ops, err)) != PB_OK) {
        free_consumer(&c);
        return st;
    }

    while (!*stop) {
        pb_metrics_set_state(c.pg_up, c.src_up, c.pg_up && c.src_up);
        if (!c.pg_up && (st = connect_pg(&c, err)) != PB_OK) {
            if (st == PB_FATAL)
                break;
            continue;
        }
        if (!c.src_up && (st = connect_source(&c, err)) != PB_OK) {
            if (st == PB_FATAL)
                break;
            continue;
        }
        bool idle = false;
        st = consume_batch(&c, &idle, err);
        if (st == PB_OK && idle && opts->drain && drained(&c)) {
            log_info(FAC, "queue drained");
            break;
        }
        if (st == PB_TRANSIENT) {
            log_warn(FAC, "postgresql: %s; reconnecting", err->msg);
            drop_pg(&c);
        } else if (st == PB_FATAL) {
            break;
        }
        log_stats(&c, false);
    }
    if (st != PB_FATAL)
        st = PB_OK;
    log_stats(&c, true);
    pb_ops_stop(ops);
    drop_pg(&c);
    free_consumer(&c);
    return st;
}
