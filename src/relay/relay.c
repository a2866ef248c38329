/* The relay loop, triple-buffered: while the broker confirms batch k (claimed in a transaction
 * still open on one PostgreSQL connection), one worker thread settles batch k-1 and another
 * claims batch k+1, each on its own connection. The database work thus hides behind the
 * broker's confirm latency instead of adding to it, and settling and claiming do not wait for
 * each other. The claim of k+1 names the ids of batches k-1 and k, which it must not take again
 * (in_flight_except). Rows are marked published only after their confirms; a crash anywhere
 * leaves unsettled rows pending, to be published again (at least once).
 *
 * Order per aggregate: batch k+1 is claimed before the outcomes of batches k-1 and k are
 * committed, so the events of batches k-1 and k that did not publish cleanly are carried over:
 * an event of batch k+1 is held back when an earlier event (smaller id) of its aggregate is among
 * them; once their failures are committed, the claim query sets the later events aside itself
 * (store/outbox.h). An event that is itself earlier than every carried-over event of its
 * aggregate (a retried event claimed again) is not held: holding it because later events of its
 * aggregate were held would hold them all for ever while batches keep meeting that aggregate. */
#include "relay/relay.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/str.h"
#include "relay/shards.h"
#include "relay/support.h"
#include "metrics/metrics.h"
#include "metrics/service.h"
#include "sink/sink.h"
#include "store/outbox.h"
#include "store/pg.h"

#define FAC "relay"
#define NOTIFY_CHANNEL "postbox_outbox"
#define IDLE_TICK_MS 1000

/* Connections, each with its batch: one publishing, one settling, one claiming. */
#define N_SLOTS 3

/* One PostgreSQL connection and the batch it holds. */
typedef struct slot {
    PGconn *conn;
    pb_outbox_t ob;
    pb_result_t *results;
    pb_settle_plan_t *plans;
    char (*reasons)[sizeof ((pb_result_t *)0)->error + 64];
    bool claimed;   /* a transaction with a claimed batch (maybe empty) is open */
    bool to_settle; /* published: results and plans wait to be written */
    pb_buf_t unclean; /* per event of its last batch that did not publish cleanly: its id (an
                       * int64_t) then "aggregate_type\0aggregate_id\0" */
    size_t n_unclean;
} slot_t;

typedef struct relay {
    const pb_config_t *cfg;
    const pb_relay_opts_t *opts;
    volatile sig_atomic_t *stop;
    slot_t slots[N_SLOTS];
    int cur; /* the slot whose batch is published next; cur + 1 claims, cur - 1 settles */
    pb_sink_t *snk;
    bool sink_up;
    int sink_attempt; /* consecutive failed connects, for the backoff */
    pb_shards_t shards; /* owned through advisory locks held by slot 0's session */
    int64_t next_balance;
    size_t *rejected; /* indexes of events rejected by the precheck, per batch */
    int64_t *in_flight_ids; /* room for the ids of the other slots' batches */
    pb_buf_t in_flight;     /* their multirange literal, for the next claim */
    /* totals for the periodic log line */
    pb_relay_totals_t totals;
} relay_t;

/* A worker's job: settle the slot's published batch if it has one, then, when asked, claim the
 * next batch on it. */
typedef struct worker_job {
    relay_t *rel;
    slot_t *slot;
    bool claim;
    const char *in_flight; /* for the claim: built before the worker starts */
    pb_settle_counts_t counts;
    pb_status_t st;
    pb_error_t err;
} worker_job_t;

static void forget_unclean(relay_t *rel)
{
    for (int i = 0; i < N_SLOTS; i++)
        rel->slots[i].n_unclean = 0;
}

static void drop_pg(relay_t *rel)
{
    for (int i = 0; i < N_SLOTS; i++) {
        slot_t *s = &rel->slots[i];
        if (!s->conn)
            continue;
        pb_outbox_free(&s->ob);
        PQfinish(s->conn);
        s->conn = NULL;
        s->claimed = s->to_settle = false;
    }
    forget_unclean(rel);
    pb_shards_reset(&rel->shards);
}

/* Balances the shards (see shards.h) with every slot's session. */
static pb_status_t balance_shards(relay_t *rel, bool may_release, bool *changed, pb_error_t *err)
{
    PGconn *conns[N_SLOTS];
    for (int i = 0; i < N_SLOTS; i++)
        conns[i] = rel->slots[i].conn;
    return pb_shards_balance(&rel->shards, conns, N_SLOTS, may_release, changed, err);
}

static void nap(relay_t *rel, int64_t ms)
{
    pb_nap(rel->stop, ms);
}

static pb_status_t open_slot(relay_t *rel, slot_t *s, pb_error_t *err)
{
    pb_status_t st = pb_pg_connect_retry(rel->cfg->postgres_dsn, rel->cfg->relay_reconnect_cap,
                                         rel->stop, &s->conn, err);
    if (st != PB_OK)
        return st;
    pb_outbox_init(&s->ob, s->conn, strcmp(rel->cfg->relay_on_publish, "delete") == 0);
    if ((st = pb_outbox_prepare(&s->ob, err)) == PB_FATAL && pb_error_schema_missing(err))
        pb_fail(err, PB_FATAL, "%s (run `postbox init` first)", err->msg);
    return st;
}

static pb_status_t connect_pg(relay_t *rel, pb_error_t *err)
{
    pb_status_t st;
    for (int i = 0; i < N_SLOTS; i++) {
        if ((st = open_slot(rel, &rel->slots[i], err)) != PB_OK) {
            drop_pg(rel);
            return st;
        }
    }
    PGconn *main_conn = rel->slots[0].conn;
    if ((st = pb_pg_exec(main_conn, "LISTEN " NOTIFY_CHANNEL, err)) != PB_OK) {
        drop_pg(rel);
        return st;
    }
    char where[256];
    pb_pg_describe(main_conn, where, sizeof where);
    if ((st = pb_shards_join(&rel->shards, main_conn, err)) != PB_OK) {
        drop_pg(rel);
        return st;
    }
    /* Stand by until this instance owns a shard. */
    bool said = false;
    while (!*rel->stop) {
        bool changed;
        if ((st = balance_shards(rel, true, &changed, err)) != PB_OK) {
            drop_pg(rel);
            return st;
        }
        if (pb_shards_usable(&rel->shards)) {
            rel->next_balance = pb_monotonic_ms() + rel->cfg->relay_poll_interval;
            if (rel->shards.n == 1) {
                log_info(FAC, "relaying from postgresql %s", where);
            } else {
                char owned[256];
                pb_shards_describe(&rel->shards, owned, sizeof owned);
                log_info(FAC, "relaying from postgresql %s: shards %s of %d", where, owned,
                         rel->shards.n);
            }
            return PB_OK;
        }
        if (!said)
            log_info(FAC, "other relays own every shard of the outbox (or their last sessions "
                          "are still ending); standing by");
        said = true;
        nap(rel, rel->cfg->relay_poll_interval);
    }
    drop_pg(rel);
    return pb_fail(err, PB_TRANSIENT, "interrupted while standing by");
}

static pb_status_t connect_sink(relay_t *rel, pb_error_t *err)
{
    pb_status_t st = pb_connect_sink(rel->snk, &rel->sink_attempt, rel->cfg->relay_reconnect_cap,
                                     rel->stop, err);
    rel->sink_up = st == PB_OK;
    return st;
}

/* Sleeps until a NOTIFY arrives, the poll interval passes, or stop. Keeps the broker connection
 * serviced (heartbeats) meanwhile. No slot is in a transaction here. */
static pb_status_t wait_for_work(relay_t *rel, pb_error_t *err)
{
    PGconn *conn = rel->slots[0].conn;
    int64_t until = pb_monotonic_ms() + rel->cfg->relay_poll_interval;
    int fd = PQsocket(conn);
    while (!*rel->stop) {
        if (!PQconsumeInput(conn))
            return pb_fail(err, PB_TRANSIENT, "postgresql connection lost: %s",
                           PQerrorMessage(conn));
        PGnotify *note;
        bool woken = false;
        while ((note = PQnotifies(conn)) != NULL) {
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

/* Is an event of s's last batch that did not publish cleanly earlier than ev in its aggregate? */
static bool unclean_in(const slot_t *s, const pb_event_t *ev)
{
    const char *p = s->unclean.data;
    for (size_t i = 0; i < s->n_unclean; i++) {
        int64_t eid;
        memcpy(&eid, p, sizeof eid);
        const char *type = p + sizeof eid, *id = type + strlen(type) + 1;
        if (eid < ev->id && strcmp(type, ev->aggregate_type) == 0 &&
            strcmp(id, ev->aggregate_id) == 0)
            return true;
        p = id + strlen(id) + 1;
    }
    return false;
}

/* Did an earlier event of ev's aggregate fail or stay back in one of the two batches published
 * before cur's (the other slots)? */
static bool carried_over(const relay_t *rel, const pb_event_t *ev)
{
    for (int i = 0; i < N_SLOTS; i++)
        if (i != rel->cur && rel->slots[i].n_unclean && unclean_in(&rel->slots[i], ev))
            return true;
    return false;
}

/* Before publishing: events behind an event of their aggregate that failed or was held in one of
 * the two previous batches are held back;
 * events the sink can never publish are rejected, and the later events of their aggregates in
 * this batch are held back, so that they follow the dead letter instead of overtaking it. */
static void precheck(relay_t *rel, slot_t *s)
{
    const pb_event_t *events = s->ob.events;
    size_t n_blocked = 0;
    for (size_t i = 0; i < s->ob.n_events; i++) {
        pb_result_t *r = &s->results[i];
        r->outcome = PB_OUT_UNTRIED;
        r->error[0] = '\0';
        if (carried_over(rel, &events[i]))
            r->outcome = PB_OUT_HELD;
        for (size_t b = 0; b < n_blocked && r->outcome == PB_OUT_UNTRIED; b++)
            if (same_aggregate(&events[rel->rejected[b]], &events[i]))
                r->outcome = PB_OUT_HELD;
        if (r->outcome != PB_OUT_UNTRIED || !rel->snk->ops->check)
            continue;
        if (!rel->snk->ops->check(rel->snk, &events[i], r))
            rel->rejected[n_blocked++] = i;
    }
}

/* Remembers the events of this batch that did not publish cleanly, and those its claim parked
 * (see precheck): until the batch is settled, other sessions see the parked ones as not waiting
 * (and the next claims skip them only as in flight), so a later event of their aggregate could
 * otherwise overtake them. */
static void remember_unclean(slot_t *s)
{
    pb_buf_reset(&s->unclean);
    s->n_unclean = 0;
    for (size_t i = 0; i < s->ob.n_events + s->ob.n_parked; i++) {
        if (i < s->ob.n_events && s->results[i].outcome == PB_OUT_PUBLISHED)
            continue;
        const pb_event_t *ev = &s->ob.events[i];
        int64_t eid = ev->id;
        pb_buf_append(&s->unclean, (const char *)&eid, sizeof eid);
        pb_buf_append(&s->unclean, ev->aggregate_type, strlen(ev->aggregate_type) + 1);
        pb_buf_append(&s->unclean, ev->aggregate_id, strlen(ev->aggregate_id) + 1);
        s->n_unclean++;
    }
}

/* Decides, per failed event, between another attempt later and a dead letter. */
static void plan(relay_t *rel, slot_t *s)
{
    const pb_config_t *cfg = rel->cfg;
    const pb_event_t *events = s->ob.events;
    for (size_t i = 0; i < s->ob.n_events; i++) {
        pb_settle_plan_t *p = &s->plans[i];
        const pb_result_t *r = &s->results[i];
        memset(p, 0, sizeof *p);
        if (r->outcome == PB_OUT_REJECT) {
            p->dead = true;
            p->reason = r->error;
            pb_metrics_publish_failed(rel->snk->ops->name, events[i].event_type, true);
            log_warn_f(FAC,
                       PB_FIELDS(PB_LF_STR("event_id", events[i].event_id),
                                 PB_LF_STR("event_type", events[i].event_type),
                                 PB_LF_NUM("attempt", events[i].attempts + 1),
                                 PB_LF_STR("error", r->error)),
                       "event %s (%s) can never be published: %s; dead-lettered",
                       events[i].event_id, events[i].event_type, r->error);
        } else if (r->outcome == PB_OUT_RETRY) {
            int attempt = events[i].attempts + 1;
            if (attempt >= cfg->relay_max_attempts) {
                p->dead = true;
                snprintf(s->reasons[i], sizeof s->reasons[i], "gave up after %d attempts: %s",
                         attempt, r->error);
                p->reason = s->reasons[i];
            } else {
                p->retry_delay_ms = pb_backoff_ms(attempt, cfg->relay_backoff_base,
                                                  cfg->relay_backoff_cap, pb_random_unit());
            }
            pb_metrics_publish_failed(rel->snk->ops->name, events[i].event_type, p->dead);
            log_warn_f(FAC,
                       PB_FIELDS(PB_LF_STR("event_id", events[i].event_id),
                                 PB_LF_STR("event_type", events[i].event_type),
                                 PB_LF_NUM("attempt", attempt), PB_LF_STR("error", r->error)),
                       "publish of event %s (%s, attempt %d) failed: %s%s", events[i].event_id,
                       events[i].event_type, attempt, r->error, p->dead ? "; dead-lettered" : "");
        } else if (r->outcome == PB_OUT_PUBLISHED) {
            double delay_ms = (double)(pb_wall_us() - events[i].created_at_us) / 1000.0;
            pb_metrics_published(rel->snk->ops->name, events[i].event_type, delay_ms / 1000.0);
            log_debug_f(FAC,
                        PB_FIELDS(PB_LF_STR("event_id", events[i].event_id),
                                  PB_LF_STR("event_type", events[i].event_type),
                                  PB_LF_NUM("delay_ms", delay_ms)),
                        "published event %s (%s) %.1f ms after its commit", events[i].event_id,
                        events[i].event_type, delay_ms);
        }
    }
}

static pb_status_t settle(relay_t *rel, slot_t *s, pb_settle_counts_t *counts, pb_error_t *err)
{
    memset(counts, 0, sizeof *counts);
    if (!s->to_settle)
        return PB_OK;
    s->to_settle = false;
    s->claimed = false;
    return pb_outbox_settle(&s->ob, s->results, s->plans, counts, err);
}

static void add_counts(relay_t *rel, const pb_settle_counts_t *c)
{
    rel->totals.published += c->published;
    rel->totals.retried += c->retried;
    rel->totals.dead += c->dead;
}

/* The ids of the batches that the slots other than s hold unsettled (claimed, or published and
 * waiting to be written), as the claim's multirange: a claim on s must not take them again. */
static const char *in_flight_except(relay_t *rel, const slot_t *s)
{
    size_t n = 0;
    for (int i = 0; i < N_SLOTS; i++) {
        const slot_t *o = &rel->slots[i];
        if (o == s || !(o->claimed || o->to_settle))
            continue;
        for (size_t e = 0; e < o->ob.n_events + o->ob.n_parked; e++)
            rel->in_flight_ids[n++] = o->ob.events[e].id;
    }
    pb_outbox_id_ranges(rel->in_flight_ids, n, &rel->in_flight);
    return rel->in_flight.data;
}

static pb_status_t claim(relay_t *rel, slot_t *s, const char *in_flight, pb_error_t *err)
{
    pb_status_t st = pb_outbox_claim(&s->ob, (int)rel->cfg->relay_batch_size, rel->shards.n,
                                     rel->shards.owned_sql.data, in_flight, err);
    s->claimed = st == PB_OK;
    if (st == PB_OK && s->ob.n_parked)
        log_debug(FAC, "claimed %zu events; set aside %zu behind earlier events of their "
                       "aggregates that wait for a retry", s->ob.n_events, s->ob.n_parked);
    return st;
}

/* @thread worker: touches only job->slot and its connection. */
static void *worker_main(void *arg)
{
    worker_job_t *job = arg;
    job->st = settle(job->rel, job->slot, &job->counts, &job->err);
    if (job->st == PB_OK && job->claim && !job->slot->claimed)
        job->st = claim(job->rel, job->slot, job->in_flight, &job->err);
    return NULL;
}

/* Runs the jobs on threads (in line when a thread cannot be had: the same work, only slower). */
static void run_jobs(worker_job_t *jobs, pthread_t *threads, bool *threaded, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        threaded[i] = pthread_create(&threads[i], NULL, worker_main, &jobs[i]) == 0;
        if (!threaded[i])
            worker_main(&jobs[i]);
    }
}

/* One step: publish the current slot's batch while the workers settle the previous one and
 * claim the next. *idle is set when there was nothing to publish and nothing left to settle. */
static pb_status_t relay_step(relay_t *rel, bool *idle, pb_error_t *err)
{
    slot_t *cur = &rel->slots[rel->cur];
    pb_settle_counts_t counts;
    pb_status_t st;
    *idle = false;
    if (!cur->claimed && (st = claim(rel, cur, in_flight_except(rel, cur), err)) != PB_OK)
        return st;
    if (cur->ob.n_events == 0) {
        bool parked = cur->ob.n_parked > 0;
        cur->claimed = false;
        if ((st = pb_pg_exec(cur->conn, "COMMIT", err)) != PB_OK)
            return st;
        /* Settle the others, then look again: they may have hidden more. Also when the claim
         * only set events aside: the events they wait behind may be in a batch not yet settled,
         * whose outcome only its settle commits (until then its ids stay in flight; looking
         * again without it, the relay parked the same events for ever). */
        bool settled = false;
        for (int i = 0; i < N_SLOTS && st == PB_OK; i++) {
            if (!rel->slots[i].to_settle)
                continue;
            st = settle(rel, &rel->slots[i], &counts, err);
            add_counts(rel, &counts);
            settled = true;
        }
        if (settled) {
            forget_unclean(rel); /* every outcome is committed: the claim query sees them */
            return st;
        }
        if (parked)
            return PB_OK; /* set aside events that wait: more may follow them, look again */
        *idle = true;
        return PB_OK;
    }

    precheck(rel, cur);
    slot_t *next = &rel->slots[(rel->cur + 1) % N_SLOTS];
    worker_job_t jobs[2] = {
        {.rel = rel, .slot = &rel->slots[(rel->cur + N_SLOTS - 1) % N_SLOTS]},
        {.rel = rel, .slot = next, .claim = true, .in_flight = in_flight_except(rel, next)},
    };
    pthread_t threads[2];
    bool threaded[2];
    run_jobs(jobs, threads, threaded, 2);
    pb_error_t sink_err;
    if (rel->snk->ops->publish(rel->snk, cur->ob.events, cur->ob.n_events, cur->results,
                               &sink_err) != PB_OK) {
        log_warn(FAC, "%s broker connection lost: %s", rel->snk->ops->name, sink_err.msg);
        rel->sink_up = false;
    }
    for (int i = 0; i < 2; i++)
        if (threaded[i])
            pthread_join(threads[i], NULL);
    plan(rel, cur);
    pb_metrics_batch(cur->ob.n_events);
    cur->to_settle = true;
    remember_unclean(cur);
    rel->cur = (rel->cur + 1) % N_SLOTS;
    for (int i = 0; i < 2; i++)
        add_counts(rel, &jobs[i].counts);
    for (int i = 0; i < 2; i++) {
        if (jobs[i].st != PB_OK) {
            *err = jobs[i].err;
            return jobs[i].st;
        }
    }
    return PB_OK;
}

/* On the way out: write what was published, give back what was only claimed. */
static pb_status_t finish(relay_t *rel, pb_error_t *err)
{
    pb_status_t st = PB_OK;
    for (int i = 0; i < N_SLOTS; i++) {
        slot_t *s = &rel->slots[i];
        if (!s->conn)
            continue;
        pb_settle_counts_t counts;
        if (s->to_settle) {
            pb_status_t one = settle(rel, s, &counts, err);
            add_counts(rel, &counts);
            if (one != PB_OK)
                st = one;
        } else if (s->claimed) {
            pb_outbox_rollback(&s->ob);
            s->claimed = false;
        }
    }
    forget_unclean(rel); /* all outcomes are in the database now: the claim query sees them */
    return st;
}

/* Between steps: takes shards that came free (an instance died) and gives away those above the
 * fair share (an instance joined), after writing and letting go of every batch in hand. */
static pb_status_t balance(relay_t *rel, pb_error_t *err)
{
    int64_t now = pb_monotonic_ms();
    if (rel->shards.n == 1 || now < rel->next_balance)
        return PB_OK;
    rel->next_balance = now + rel->cfg->relay_poll_interval;
    bool changed;
    pb_status_t st = balance_shards(rel, false, &changed, err);
    if (st == PB_OK && pb_shards_excess(&rel->shards)) {
        bool more;
        if ((st = finish(rel, err)) != PB_OK)
            return st;
        st = balance_shards(rel, true, &more, err);
        changed = changed || more;
    }
    if (st == PB_OK && changed) {
        char owned[256];
        pb_shards_describe(&rel->shards, owned, sizeof owned);
        log_info(FAC, "now relaying shards %s of %d (fair share %d)", owned, rel->shards.n,
                 rel->shards.fair);
    }
    return st;
}

static void relay_free(relay_t *rel)
{
    drop_pg(rel);
    pb_sink_free(rel->snk);
    for (int i = 0; i < N_SLOTS; i++) {
        free(rel->slots[i].results);
        free(rel->slots[i].plans);
        free(rel->slots[i].reasons);
        pb_buf_free(&rel->slots[i].unclean);
    }
    free(rel->rejected);
    free(rel->in_flight_ids);
    pb_buf_free(&rel->in_flight);
    pb_shards_free(&rel->shards);
}

pb_status_t pb_relay_run(const pb_config_t *cfg, const pb_relay_opts_t *opts,
                         volatile sig_atomic_t *stop, pb_error_t *err)
{
    relay_t rel = {.cfg = cfg, .opts = opts, .stop = stop};
    pb_status_t st = pb_sink_new(cfg, &rel.snk, err);
    if (st != PB_OK)
        return st;
    size_t cap = (size_t)cfg->relay_batch_size;
    for (int i = 0; i < N_SLOTS; i++) {
        rel.slots[i].results = pb_malloc(cap * sizeof *rel.slots[i].results);
        rel.slots[i].plans = pb_malloc(cap * sizeof *rel.slots[i].plans);
        rel.slots[i].reasons = pb_malloc(cap * sizeof *rel.slots[i].reasons);
    }
    rel.rejected = pb_malloc(cap * sizeof *rel.rejected);
    rel.in_flight_ids = pb_malloc((N_SLOTS - 1) * cap * sizeof *rel.in_flight_ids);
    pb_shards_init(&rel.shards, (int)cfg->relay_shards);
    rel.totals.logged_at = pb_monotonic_ms();
    pb_ops_t *ops; /* /metrics, /healthz, /readyz; backlog sampling and retention purge */
    if ((st = pb_ops_start(cfg, "relay", &ops, err)) != PB_OK) {
        relay_free(&rel);
        return st;
    }

    while (!*stop) {
        /* connected and holding the relay lock once slot 0 is connected (connect_pg) */
        pb_metrics_set_state(rel.slots[0].conn != NULL, rel.sink_up, rel.slots[0].conn != NULL);
        if (!rel.slots[0].conn && (st = connect_pg(&rel, err)) != PB_OK) {
            if (st == PB_FATAL)
                break;
            continue; /* interrupted: the loop condition ends it */
        }
        if (!rel.sink_up) {
            /* record the failures of the batch that lost the broker, and hold no row locks
             * while waiting for it to come back */
            if ((st = finish(&rel, err)) != PB_OK) {
                log_warn(FAC, "postgresql: %s; reconnecting", err->msg);
                drop_pg(&rel);
                continue;
            }
            if ((st = connect_sink(&rel, err)) != PB_OK) {
                if (st == PB_FATAL)
                    break;
                continue;
            }
        }
        if ((st = balance(&rel, err)) != PB_OK) {
            if (st == PB_FATAL)
                break;
            log_warn(FAC, "postgresql: %s; reconnecting", err->msg);
            drop_pg(&rel);
            continue;
        }
        bool idle;
        st = relay_step(&rel, &idle, err);
        if (st == PB_TRANSIENT) {
            /* unsettled rows stay pending and are published again: at least once */
            log_warn(FAC, "postgresql: %s; reconnecting", err->msg);
            drop_pg(&rel);
            continue;
        }
        if (st == PB_FATAL)
            break;
        pb_relay_totals_log(&rel.totals, FAC, false);
        if (!idle)
            continue;
        if (opts->drain) {
            int64_t pending;
            if ((st = pb_outbox_pending(&rel.slots[0].ob, &pending, err)) == PB_FATAL)
                break;
            if (st == PB_OK && pending == 0) {
                log_info(FAC, "outbox drained");
                break;
            }
        }
        if ((st = wait_for_work(&rel, err)) != PB_OK) {
            log_warn(FAC, "%s; reconnecting", err->msg);
            drop_pg(&rel);
        }
    }
    if (st != PB_FATAL && rel.slots[0].conn && finish(&rel, err) != PB_OK)
        log_warn(FAC, "could not record the last batch (it will be published again): %s", err->msg);
    if (st != PB_FATAL)
        st = PB_OK;
    pb_relay_totals_log(&rel.totals, FAC, true);
    pb_ops_stop(ops);
    relay_free(&rel);
    return st;
}
