/* The poll capture: batches claimed from postbox.outbox (store/outbox.h), woken by
 * LISTEN/NOTIFY, on two PostgreSQL connections: one claims (it holds the shard locks and
 * listens), the other settles.
 *
 * While the broker confirms batch k, the settle of batch k-1 and the claim of batch k+1 run at
 * the same time, one on each connection (pipeline mode, a round trip each); their results are
 * read once batch k is confirmed. Neither waits for the other on the server, and no thread is
 * started: the database work hides behind the broker's confirm latency, on two backends. A
 * settle's COMMIT is sent only once its statements have run and the relay has read their
 * results (a relay that dies while its settle runs commits nothing: the server rolls it back),
 * and its result is read in the next round. The claim of k+1 therefore skips the ids of
 * batches k, k-1 and k-2 (whose COMMIT may still be under way), and cannot see their outcomes:
 * its events are checked against their failures by the driver (holdback.h). When nothing was
 * claimed ahead, the settle of the batch just confirmed and the next claim run side by side in
 * the same way (skipping that batch and the one whose COMMIT may be under way). The claim takes no
 * row locks. A crash anywhere leaves unsettled rows pending, to be published again (at least
 * once).
 *
 * Three batch records rotate: `settling` (outcomes built, to be written), `cur` (handed to the
 * driver) and `ahead` (claimed while cur is published).
 *
 * Producers NOTIFY only while a relay holds or asks for the sleep lock (sleep_lock.h): an idle
 * relay asks for it on the settle session (idle then) while it listens, claims once more when it
 * is granted, sleeps with it, and lets go of it once it claims events again. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/retry.h"
#include "common/str.h"
#include "relay/batch_bytes.h"
#include "relay/capture.h"
#include "relay/shards.h"
#include "relay/sleep_lock.h"
#include "store/outbox.h"
#include "store/pg.h"

#define FAC "relay"
#define NOTIFY_CHANNEL "postbox_outbox"
#define IDLE_TICK_MS 1000

typedef struct id_list {
    int64_t *ids;
    size_t n, cap;
} id_list_t;

typedef struct poll_capture {
    pb_capture_t base;
    PGconn *conn;        /* claims; holds the shard locks and LISTENs */
    PGconn *settle_conn; /* settles */
    pb_outbox_t obs[3];
    pb_outbox_t *settling, *cur, *ahead;
    bool settle_pending; /* settling holds outcomes not yet sent */
    bool settle_queued;  /* the settle of settling is sent, its results not read yet */
    bool commit_queued;  /* a settle's COMMIT is sent, its result not read yet */
    bool claim_queued;   /* the claim of ahead is sent, its results not read yet */
    bool ahead_ready;    /* ahead holds a claimed batch */
    bool cur_out;        /* cur is with the driver until settle */
    pb_shards_t shards;  /* owned through advisory locks held by conn's session */
    int64_t next_balance;
    id_list_t settle_ids; /* the ids of the batch in settling */
    id_list_t commit_ids; /* the ids of the batch whose COMMIT is queued */
    id_list_t scratch;
    pb_buf_t in_flight; /* the multirange of the ids a claim skips */
    int claim_limit;    /* events the next claim asks for (relay/batch_bytes.h) */
    int sent_limit;     /* what the claim of ahead asked for */
    pb_sleep_lock_t sleep; /* on settle_conn */
} poll_capture_t;

static void ids_reserve(id_list_t *l, size_t n)
{
    if (n > l->cap) {
        l->ids = pb_realloc(l->ids, n * sizeof *l->ids);
        l->cap = n;
    }
}

static void ids_append(id_list_t *l, const int64_t *ids, size_t n)
{
    ids_reserve(l, l->n + n);
    memcpy(l->ids + l->n, ids, n * sizeof *ids);
    l->n += n;
}

/* l = the ids of the events ob holds */
static void ids_of(id_list_t *l, const pb_outbox_t *ob)
{
    l->n = 0;
    ids_reserve(l, ob->n_events);
    for (size_t i = 0; i < ob->n_events; i++)
        l->ids[l->n++] = ob->events[i].id;
}

static void ids_swap(id_list_t *a, id_list_t *b)
{
    id_list_t t = *a;
    *a = *b;
    *b = t;
}

static const pb_capture_ops_t poll_ops;

static void reset_batches(poll_capture_t *p)
{
    for (int i = 0; i < 3; i++)
        pb_outbox_release_batch(&p->obs[i]);
    p->settle_pending = p->settle_queued = p->commit_queued = p->claim_queued = false;
    p->ahead_ready = p->cur_out = false;
}

static void poll_disconnect(pb_capture_t *cap)
{
    poll_capture_t *p = (poll_capture_t *)cap;
    reset_batches(p);
    PQfinish(p->conn);
    PQfinish(p->settle_conn);
    p->conn = p->settle_conn = NULL;
    for (int i = 0; i < 3; i++)
        p->obs[i].conn = NULL;
    pb_shards_reset(&p->shards);
    pb_sleep_lock_reset(&p->sleep);
}

static bool poll_connected(const pb_capture_t *cap)
{
    return ((const poll_capture_t *)cap)->conn != NULL;
}

static pb_status_t balance_shards(poll_capture_t *p, bool may_release, bool *changed,
                                  pb_error_t *err)
{
    PGconn *conns[1] = {p->conn};
    return pb_shards_balance(&p->shards, conns, 1, may_release, changed, err);
}

/* Prepares the statements on conn, and has a statement still running when its relay dies (a
 * settle waiting for a lock) cancelled within a second instead of holding its locks until it
 * ends (PostgreSQL 14). */
static pb_status_t prepare_conn(poll_capture_t *p, PGconn *conn, pb_error_t *err)
{
    p->obs[0].conn = conn;
    pb_status_t st = pb_outbox_prepare(&p->obs[0], err);
    if (st == PB_FATAL && pb_error_schema_missing(err))
        pb_fail(err, PB_FATAL, "%s (run `postbox init` first)", err->msg);
    if (st == PB_OK)
        st = pb_pg_exec(conn, "SET client_connection_check_interval = '1s'", err);
    return st;
}

static pb_status_t poll_connect(pb_capture_t *cap, pb_error_t *err)
{
    poll_capture_t *p = (poll_capture_t *)cap;
    const pb_config_t *cfg = cap->cfg;
    pb_status_t st = pb_pg_connect_retry(cfg->postgres_dsn, cfg->relay_reconnect_cap, cap->stop,
                                         &p->conn, err);
    if (st == PB_OK)
        st = pb_pg_connect_retry(cfg->postgres_dsn, cfg->relay_reconnect_cap, cap->stop,
                                 &p->settle_conn, err);
    if (st == PB_OK && (st = prepare_conn(p, p->conn, err)) == PB_OK)
        st = prepare_conn(p, p->settle_conn, err);
    /* A settle records what the broker confirmed; lost in a server crash, its events are
     * published again (at least once), so its COMMIT need not wait for the WAL flush. */
    if (st == PB_OK)
        st = pb_pg_exec(p->settle_conn, "SET synchronous_commit = off", err);
    for (int i = 0; i < 3; i++)
        p->obs[i].conn = p->conn;
    if (st == PB_OK)
        st = pb_pg_exec(p->conn, "LISTEN " NOTIFY_CHANNEL, err);
    if (st == PB_OK)
        st = pb_shards_join(&p->shards, p->conn, err);

    if (st != PB_OK) {
        poll_disconnect(cap);
        return st;
    }
    char where[256];
    pb_pg_describe(p->conn, where, sizeof where);
    /* Stand by until this instance owns a shard. */
    bool said = false;
    while (!*cap->stop) {
        bool changed;
        if ((st = balance_shards(p, true, &changed, err)) != PB_OK) {
            poll_disconnect(cap);
            return st;
        }
        if (pb_shards_usable(&p->shards)) {
            p->next_balance = pb_monotonic_ms() + cfg->relay_poll_interval;
            if (p->shards.n == 1) {
                log_info(FAC, "relaying from postgresql %s", where);
            } else {
                char owned[256];
                pb_shards_describe(&p->shards, owned, sizeof owned);
                log_info(FAC, "relaying from postgresql %s: shards %s of %d", where, owned,
                         p->shards.n);
            }
            return PB_OK;
        }
        if (!said)
            log_info(FAC, "other relays own every shard of the outbox (or their last sessions "
                          "are still ending); standing by");
        said = true;
        pb_nap(cap->stop, cfg->relay_poll_interval);
    }
    poll_disconnect(cap);
    return pb_fail(err, PB_TRANSIENT, "interrupted while standing by");
}

static pb_status_t enter_pipeline(PGconn *conn, pb_error_t *err)
{
    if (PQpipelineStatus(conn) == PQ_PIPELINE_OFF && PQenterPipelineMode(conn) != 1)
        return pb_fail(err, PB_TRANSIENT, "pipeline mode: %s", PQerrorMessage(conn));
    return PB_OK;
}

static pb_status_t exit_pipeline(PGconn *conn, pb_error_t *err)
{
    if (PQpipelineStatus(conn) != PQ_PIPELINE_OFF && PQexitPipelineMode(conn) != 1)
        return pb_fail(err, PB_TRANSIENT, "pipeline mode: %s", PQerrorMessage(conn));
    return PB_OK;
}

static pb_status_t flush(PGconn *conn, pb_error_t *err)
{
    if (PQflush(conn) != 0)
        return pb_fail(err, PB_TRANSIENT, "postgresql connection lost: %s",
                       PQerrorMessage(conn));
    return PB_OK;
}

/* Reads the result of the COMMIT that collect sent (nothing else may be queued before it). */
static pb_status_t read_commit(poll_capture_t *p, pb_error_t *err)
{
    if (!p->commit_queued)
        return PB_OK;
    p->commit_queued = false;
    p->commit_ids.n = 0;
    pb_status_t st = pb_pg_read_result(p->settle_conn, PGRES_COMMAND_OK, "commit", NULL, err);
    return st == PB_OK ? pb_pg_read_sync(p->settle_conn, err) : st;
}

/* Waits until every settle sent is committed. */
static pb_status_t finish_commit(poll_capture_t *p, pb_error_t *err)
{
    PB_ASSERT(!p->settle_queued);
    pb_status_t st = read_commit(p, err);
    return st == PB_OK ? exit_pipeline(p->settle_conn, err) : st;
}

/* Sends the settle of `settling` (a transaction of its own) on settle_conn, when it holds
 * outcomes, and unless in_flight is NULL the claim of `ahead` on conn. */
static pb_status_t send_round(poll_capture_t *p, const char *in_flight, pb_error_t *err)
{
    pb_status_t st;
    PB_ASSERT(!p->settle_queued && !p->claim_queued);
    if (p->settle_pending) {
        p->settling->conn = p->settle_conn;
        if ((st = enter_pipeline(p->settle_conn, err)) != PB_OK ||
            (st = pb_pg_send(p->settle_conn, "BEGIN", err)) != PB_OK ||
            (st = pb_outbox_send_settle(p->settling, err)) != PB_OK ||
            (st = pb_pg_send_sync(p->settle_conn, err)) != PB_OK ||
            (st = flush(p->settle_conn, err)) != PB_OK)
            return st;
        p->settle_queued = true;
    }
    if (in_flight) {
        p->ahead->conn = p->conn;
        if ((st = enter_pipeline(p->conn, err)) != PB_OK ||
            (st = pb_outbox_send_claim(p->ahead, (p->sent_limit = p->claim_limit),
                                       p->shards.n, p->shards.owned_sql.data, in_flight,
                                       err)) != PB_OK ||
            (st = pb_pg_send_sync(p->conn, err)) != PB_OK || (st = flush(p->conn, err)) != PB_OK)
            return st;
        p->claim_queued = true;
    }
    return PB_OK;
}

/* Reads what send_round sent: ahead holds the claimed batch; the settle, once its statements
 * have run, is committed by a COMMIT sent now, whose result the next collect reads (so the
 * rows of a batch are skipped by two claims at most: a held event must come back before the
 * hold-back forgets its batch). A relay that dies while its settle runs thus commits nothing
 * (the server rolls the transaction back). */
static pb_status_t collect(poll_capture_t *p, pb_error_t *err)
{
    pb_status_t st;
    if ((st = read_commit(p, err)) != PB_OK)
        return st;
    if (!p->settle_queued && (st = exit_pipeline(p->settle_conn, err)) != PB_OK)
        return st;
    if (p->settle_queued) {
        p->settle_queued = false;
        if ((st = pb_pg_read_result(p->settle_conn, PGRES_COMMAND_OK, "begin", NULL, err)) !=
                PB_OK ||
            (st = pb_outbox_read_settle(p->settling, err)) != PB_OK ||
            (st = pb_pg_read_sync(p->settle_conn, err)) != PB_OK ||
            (st = pb_pg_send(p->settle_conn, "COMMIT", err)) != PB_OK ||
            (st = pb_pg_send_sync(p->settle_conn, err)) != PB_OK ||
            (st = flush(p->settle_conn, err)) != PB_OK)
            return st;
        p->commit_queued = true;
        ids_swap(&p->commit_ids, &p->settle_ids);
        p->settle_pending = false;
    }
    if (p->claim_queued) {
        p->claim_queued = false;
        if ((st = pb_outbox_read_claim(p->ahead, err)) != PB_OK ||
            (st = pb_pg_read_sync(p->conn, err)) != PB_OK ||
            (st = exit_pipeline(p->conn, err)) != PB_OK)
            return st;
        p->ahead_ready = p->ahead->n_events > 0;
        size_t bytes = 0;
        for (size_t i = 0; i < p->ahead->n_events; i++)
            bytes += p->ahead->events[i].payload_len;
        p->claim_limit = pb_claim_limit_next((int)p->base.cfg->relay_batch_size,
                                             p->base.cfg->relay_batch_bytes, p->claim_limit,
                                             p->ahead->n_events, bytes);
        if (p->ahead->n_parked)
            log_debug(FAC, "claimed %zu events; set aside %zu behind earlier events of their "
                           "aggregates that wait (for a retry, or for their available_at)",
                      p->ahead->n_events, p->ahead->n_parked);
    }
    return PB_OK;
}

static void swap(pb_outbox_t **a, pb_outbox_t **b)
{
    pb_outbox_t *t = *a;
    *a = *b;
    *b = t;
}

/* The multirange of the ids a claim sent now must skip: those of cur (when with_cur), of
 * settling when its settle is sent beside the claim, and of the batch whose COMMIT may still be
 * under way: all are still pending in the claim's view. */
static const char *in_flight(poll_capture_t *p, bool with_cur)
{
    id_list_t *ids = &p->scratch;
    if (with_cur)
        ids_of(ids, p->cur);
    else
        ids->n = 0;
    if (p->settle_pending)
        ids_append(ids, p->settle_ids.ids, p->settle_ids.n);
    if (p->commit_queued)
        ids_append(ids, p->commit_ids.ids, p->commit_ids.n);
    pb_outbox_id_ranges(ids->ids, ids->n, &p->in_flight);
    return p->in_flight.data;
}

static pb_status_t poll_next(pb_capture_t *cap, pb_capture_batch_t *b, pb_error_t *err)
{
    poll_capture_t *p = (poll_capture_t *)cap;
    PB_ASSERT(!p->cur_out && !p->settle_queued && !p->claim_queued);
    b->n = 0;
    b->full = false;
    if (p->ahead_ready) {
        /* claimed while the batch before (now settling) was still out */
        swap(&p->cur, &p->ahead);
        p->ahead_ready = false;
        b->behind_unsettled = true;
    } else {
        /* Nothing ahead: the settle of the last batch and a claim, side by side. A claim sent
         * with nothing unsettled sees every outcome. A claim that only set events aside looks
         * again at once: more may follow them. */
        pb_status_t st;
        bool blind;
        do {
            if (!p->settle_pending && (st = read_commit(p, err)) != PB_OK)
                return st;
            blind = p->settle_pending;
            if ((st = send_round(p, in_flight(p, false), err)) != PB_OK ||
                (st = collect(p, err)) != PB_OK)
                return st;
        } while (!p->ahead_ready && p->ahead->n_parked > 0 && !*cap->stop);
        if (!p->ahead_ready)
            return PB_OK;
        swap(&p->cur, &p->ahead);
        p->ahead_ready = false;
        b->behind_unsettled = blind;
        /* awake again: producers may stop notifying (the settle session is idle: nothing was
         * settled since the lock was granted) */
        if ((st = pb_sleep_lock_release(&p->sleep, err)) != PB_OK)
            return st;
    }
    p->cur_out = true;
    b->events = p->cur->events;
    b->n = p->cur->n_events;
    b->full = p->cur->n_events + p->cur->n_parked >= (size_t)p->sent_limit;
    return PB_OK;
}

static bool poll_ready(const pb_capture_t *cap)
{
    return ((const poll_capture_t *)cap)->ahead_ready;
}

static pb_status_t poll_overlap(pb_capture_t *cap, pb_error_t *err)
{
    poll_capture_t *p = (poll_capture_t *)cap;
    return send_round(p, in_flight(p, true), err);
}

static pb_status_t poll_settle(pb_capture_t *cap, const pb_result_t *results,
                               const pb_settle_plan_t *plans, pb_error_t *err)
{
    poll_capture_t *p = (poll_capture_t *)cap;
    pb_status_t st = collect(p, err);
    if (st != PB_OK)
        return st;
    PB_ASSERT(!p->settle_pending);
    ids_of(&p->settle_ids, p->cur);
    pb_settle_counts_t counts;
    pb_outbox_build_arrays(p->cur, results, plans, &counts);
    pb_outbox_release_batch(p->cur);
    p->cur_out = false;
    swap(&p->settling, &p->cur);
    p->settle_pending = counts.published + counts.retried + counts.dead > 0;
    return PB_OK;
}

/* Writes what is settled; forgets what was claimed ahead (it stays pending). */
static pb_status_t poll_finish(pb_capture_t *cap, pb_error_t *err)
{
    poll_capture_t *p = (poll_capture_t *)cap;
    if (!p->conn)
        return PB_OK;
    pb_status_t st = collect(p, err);
    if (st == PB_OK && p->settle_pending && (st = send_round(p, NULL, err)) == PB_OK)
        st = collect(p, err);
    if (st == PB_OK)
        st = finish_commit(p, err);
    pb_outbox_release_batch(p->ahead);
    p->ahead_ready = false;
    return st;
}

/* Whether a NOTIFY came (each is read and dropped). */
static pb_status_t notified(poll_capture_t *p, bool *woken, pb_error_t *err)
{
    if (!PQconsumeInput(p->conn))
        return pb_fail(err, PB_TRANSIENT, "postgresql connection lost: %s",
                       PQerrorMessage(p->conn));
    PGnotify *note;
    *woken = false;
    while ((note = PQnotifies(p->conn)) != NULL) {
        *woken = true;
        PQfreemem(note);
    }
    return PB_OK;
}

/* The sleep lock was granted. With several relays (shards), those that asked before waited for
 * the same producers, which are done now; but they are not granted while this one sleeps with the
 * lock: a NOTIFY makes them claim once more (model/wake.pml). */
static pb_status_t on_granted(poll_capture_t *p, pb_error_t *err)
{
    if (p->sleep.state != PB_SLEEP_HELD || p->shards.n == 1)
        return PB_OK;
    return pb_pg_exec(p->settle_conn, "NOTIFY " NOTIFY_CHANNEL, err);
}

/* Sleeps until a NOTIFY arrives, the poll interval passes, or stop; tick keeps the broker
 * connection serviced meanwhile. Asks for the sleep lock first (unless held already) and returns
 * as soon as it is granted: the claim after the grant sees every event committed without a
 * NOTIFY, and the next wait sleeps with the lock. */
static pb_status_t poll_wait(pb_capture_t *cap, pb_capture_tick_fn tick, void *arg,
                             pb_error_t *err)
{
    poll_capture_t *p = (poll_capture_t *)cap;
    int64_t until = pb_monotonic_ms() + cap->cfg->relay_poll_interval;
    int fd = PQsocket(p->conn), sleep_fd = PQsocket(p->settle_conn);
    pb_status_t st = PB_OK;
    bool woken = false;
    while (!*cap->stop) {
        if ((st = notified(p, &woken, err)) != PB_OK || woken)
            break;
        if (p->sleep.state == PB_SLEEP_AWAKE) {
            if ((st = finish_commit(p, err)) != PB_OK ||
                (st = pb_sleep_lock_ask(&p->sleep, p->settle_conn, err)) != PB_OK)
                return st;
        } else if (p->sleep.state == PB_SLEEP_ASKED) {
            if ((st = pb_sleep_lock_poll(&p->sleep, err)) != PB_OK)
                return st;
            if (p->sleep.state == PB_SLEEP_HELD)
                return on_granted(p, err);
        }
        if (!tick(arg))
            break;
        int64_t left = until - pb_monotonic_ms();
        if (left <= 0)
            break;
        if (left > IDLE_TICK_MS)
            left = IDLE_TICK_MS;
        bool asked = p->sleep.state == PB_SLEEP_ASKED;
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(fd, &rd);
        if (asked)
            FD_SET(sleep_fd, &rd);
        struct timeval tv = {.tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000};
        int nfds = (asked && sleep_fd > fd ? sleep_fd : fd) + 1;
        if (select(nfds, &rd, NULL, NULL, &tv) < 0 && errno != EINTR)
            return pb_fail(err, PB_TRANSIENT, "select: %s", strerror(errno));
    }
    /* woken before the grant: the settle session is needed again (a grant may have come first) */
    if (st == PB_OK && p->sleep.state == PB_SLEEP_ASKED &&
        (st = pb_sleep_lock_withdraw(&p->sleep, err)) == PB_OK)
        st = on_granted(p, err);
    return st;
}

static pb_status_t poll_keepalive(pb_capture_t *cap, pb_error_t *err)
{
    (void)cap;
    (void)err;
    return PB_OK;
}

/* Takes shards that came free (an instance died) and gives away those above the fair share (an
 * instance joined), after writing and letting go of every batch in hand. */
static pb_status_t poll_tick(pb_capture_t *cap, pb_error_t *err)
{
    poll_capture_t *p = (poll_capture_t *)cap;
    int64_t now = pb_monotonic_ms();
    if (p->shards.n == 1 || now < p->next_balance)
        return PB_OK;
    p->next_balance = now + cap->cfg->relay_poll_interval;
    bool changed;
    pb_status_t st = balance_shards(p, false, &changed, err);
    if (st == PB_OK && pb_shards_excess(&p->shards)) {
        bool more;
        if ((st = poll_finish(cap, err)) != PB_OK)
            return st;
        st = balance_shards(p, true, &more, err);
        changed = changed || more;
    }
    if (st == PB_OK && changed) {
        char owned[256];
        pb_shards_describe(&p->shards, owned, sizeof owned);
        log_info(FAC, "now relaying shards %s of %d (fair share %d)", owned, p->shards.n,
                 p->shards.fair);
    }
    return st;
}

static pb_status_t poll_drained(pb_capture_t *cap, bool *done, pb_error_t *err)
{
    poll_capture_t *p = (poll_capture_t *)cap;
    int64_t pending;
    p->ahead->conn = p->conn;
    pb_status_t st = p->settle_pending ? PB_OK : finish_commit(p, err);
    if (st == PB_OK)
        st = pb_outbox_pending(p->ahead, &pending, err);
    *done = st == PB_OK && pending == 0 && !p->settle_pending && !p->ahead_ready;
    return st;
}

static void poll_free(pb_capture_t *cap)
{
    poll_capture_t *p = (poll_capture_t *)cap;
    if (!p)
        return;
    poll_disconnect(cap);
    for (int i = 0; i < 3; i++)
        pb_outbox_free(&p->obs[i]);
    pb_shards_free(&p->shards);
    free(p->settle_ids.ids);
    free(p->commit_ids.ids);
    free(p->scratch.ids);
    pb_buf_free(&p->in_flight);
    free(p);
}

static const pb_capture_ops_t poll_ops = {
    .name = "poll",
    .retries_in_place = false,
    .connect = poll_connect,
    .connected = poll_connected,
    .disconnect = poll_disconnect,
    .ready = poll_ready,
    .next = poll_next,
    .overlap = poll_overlap,
    .settle = poll_settle,
    .wait = poll_wait,
    .keepalive = poll_keepalive,
    .tick = poll_tick,
    .drained = poll_drained,
    .finish = poll_finish,
    .free = poll_free,
};

pb_status_t pb_capture_poll_new(const pb_config_t *cfg, volatile sig_atomic_t *stop,
                                pb_capture_t **out, pb_error_t *err)
{
    (void)err;
    poll_capture_t *p = pb_malloc(sizeof *p);
    memset(p, 0, sizeof *p);
    p->base = (pb_capture_t){.ops = &poll_ops, .cfg = cfg, .stop = stop};
    bool delete_on_publish = strcmp(cfg->relay_on_publish, "delete") == 0;
    for (int i = 0; i < 3; i++)
        pb_outbox_init(&p->obs[i], NULL, delete_on_publish);
    p->settling = &p->obs[0];
    p->cur = &p->obs[1];
    p->ahead = &p->obs[2];
    p->claim_limit = pb_claim_limit_first((int)cfg->relay_batch_size, cfg->relay_batch_bytes);
    pb_shards_init(&p->shards, (int)cfg->relay_shards);
    *out = &p->base;
    return PB_OK;
}
