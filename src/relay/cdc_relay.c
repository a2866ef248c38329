/* The relay with cdc capture: events come from the logical replication stream instead of a
 * polling query. Batches are cut from the stream, published, and only when every event of a
 * transaction is confirmed by the broker (or dead-lettered) is the transaction's end LSN
 * confirmed to PostgreSQL. A crash anywhere replays from the last confirmed position:
 * duplicates are possible, losses are not.
 *
 * A failed publish blocks the stream: the failed events are retried with backoff (the rest of
 * the batch is confirmed already) and dead-lettered after relay.max_attempts, then the stream
 * moves on. Per-aggregate order thus holds for everything after the failure. */
#include <stdlib.h>
#include <string.h>

#include "cdc/events.h"
#include "cdc/pgoutput.h"
#include "cdc/stream.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/str.h"
#include "metrics/metrics.h"
#include "metrics/service.h"
#include "relay/relay.h"
#include "relay/support.h"
#include "store/dead_letters.h"
#include "store/outbox.h"
#include "store/pg.h"

#define FAC "relay.cdc"
#define IDLE_TICK_MS 1000
#define DRAIN_PREFIX "postbox-drain"
#define COMMIT_WAIT_MS 20
#define FILL_WINDOW_MS 2
/* The window is for a backlog: it opens only when the batch's first event was already waiting
 * (arrived within this many ms of the start of the fill). At a low rate the relay waits for
 * every event, and a window would only add to each event's latency. */
#define FILL_BACKLOG_MS 1

/* A relayed outbox row to be marked published. A row can come through the stream a moment
 * before its transaction is visible to other sessions (the commit record is flushed first), so
 * a mark that finds nothing is tried again with the next batches. */
typedef struct mark {
    int64_t id;
    int tries;
} mark_t;

#define MARK_TRIES 200
/* Publishing waits for the mark in flight only when more than this many batches' rows wait for
 * the next one: the marks follow the stream at their own pace, in larger statements. */
#define MARK_QUEUE_BATCHES 8

/* Events cut from the stream, with what the sink needs of them. */
typedef struct cdc_batch {
    pb_cdc_event_t *items;
    pb_event_t *events; /* flat copies for the sink */
    pb_result_t *results;
    int *attempts;
    size_t n, cap;
} cdc_batch_t;

typedef struct cdc_relay {
    const pb_config_t *cfg;
    const pb_relay_opts_t *opts;
    volatile sig_atomic_t *stop;
    PGconn *conn; /* ordinary connection: marks, dead letters, lag */
    pb_cdc_stream_t stream;
    bool streaming;
    bool said_standby;
    pb_pgo_decoder_t dec;
    pb_cdc_outbox_map_t map;
    bool have_map;
    pb_sink_t *snk;
    bool sink_up;
    int sink_attempt;
    /* the batch being cut from the stream (b), and the next one, read ahead while the broker
     * acknowledges b when the sink can publish asynchronously */
    cdc_batch_t bufs[2];
    cdc_batch_t *b;
    pb_status_t ahead_st; /* an error of the read-ahead, for the next step to return */
    pb_error_t ahead_err;
    bool in_txn;
    uint64_t last_commit_end; /* end LSN of the last Commit read */
    bool drain_marker_sent, drain_marker_seen;
    pb_buf_t ids;
    /* Marking relayed rows published runs asynchronously on conn while the next batches are
     * published; a batch's LSN is confirmed once its rows are marked. */
    bool mark_in_flight;
    uint64_t mark_lsn;   /* confirmed when the mark in flight is done */
    uint64_t queued_lsn; /* covers the rows queued after the mark in flight was sent (0: none) */
    mark_t *marks; /* the first n_sent: in the mark in flight; then the ones still to send */
    size_t n_marks, n_sent, cap_marks;
    int64_t *mark_ids; /* room for cap_marks ids, for the mark's pb_outbox_ids_literal */
    pb_relay_totals_t totals;
    int64_t lag_at;
} cdc_relay_t;

static pb_status_t finish_mark(cdc_relay_t *r, bool wait, pb_error_t *err);

static void clear_buf(cdc_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        pb_cdc_event_free(&b->items[i]);
    b->n = 0;
}

static void clear_batch(cdc_relay_t *r)
{
    clear_buf(r->b);
}

/* The other buffer, holding what was read ahead. */
static cdc_batch_t *next_buf(cdc_relay_t *r)
{
    return r->b == &r->bufs[0] ? &r->bufs[1] : &r->bufs[0];
}

static void close_stream(cdc_relay_t *r)
{
    if (r->streaming)
        pb_cdc_stream_close(&r->stream);
    r->streaming = false;
    pb_pgo_decoder_free(&r->dec);
    pb_pgo_decoder_init(&r->dec);
    r->have_map = false;
    r->in_txn = false;
    /* everything unconfirmed is sent again by the server */
    clear_buf(&r->bufs[0]);
    clear_buf(&r->bufs[1]);
    r->ahead_st = PB_OK;
}

static void drop_conn(cdc_relay_t *r)
{
    PQfinish(r->conn);
    r->conn = NULL;
    r->mark_in_flight = false; /* unconfirmed: the stream replays it, and marks it again */
    r->n_sent = 0;
}

static pb_status_t exec(cdc_relay_t *r, const char *sql, pb_error_t *err)
{
    return pb_pg_exec(r->conn, sql, err);
}

static pb_status_t connect_conn(cdc_relay_t *r, pb_error_t *err)
{
    pb_status_t st = pb_pg_connect_retry(r->cfg->postgres_dsn, r->cfg->relay_reconnect_cap,
                                         r->stop, &r->conn, err);
    if (st != PB_OK)
        return st;
    /* the trigger that keeps the outbox empty follows the configuration */
    st = r->cfg->cdc_delete_after_insert
             ? exec(r, "CREATE OR REPLACE TRIGGER outbox_cdc_delete AFTER INSERT ON postbox.outbox "
                       "FOR EACH ROW EXECUTE FUNCTION postbox.delete_inserted_row()", err)
             : exec(r, "SET client_min_messages = warning; "
                       "DROP TRIGGER IF EXISTS outbox_cdc_delete ON postbox.outbox", err);
    if (st != PB_OK) {
        if (st == PB_FATAL && pb_error_schema_missing(err))
            pb_fail(err, PB_FATAL, "%s (run `postbox init` first)", err->msg);
        drop_conn(r);
    }
    return st;
}

static pb_status_t open_stream(cdc_relay_t *r, pb_error_t *err)
{
    pb_status_t st = pb_cdc_stream_open(&r->stream, r->cfg, err);
    if (st == PB_OK) {
        r->streaming = true;
        r->said_standby = false;
        return PB_OK;
    }
    if (r->stream.in_use_elsewhere) {
        if (!r->said_standby)
            log_info(FAC, "slot \"%s\" is streamed by another relay; standing by", r->cfg->cdc_slot);
        r->said_standby = true;
        pb_nap(r->stop, r->cfg->relay_poll_interval);
        return PB_TRANSIENT;
    }
    if (st == PB_TRANSIENT) {
        log_warn(FAC, "waiting for the replication stream: %s", err->msg);
        pb_nap(r->stop, 1000);
    }
    return st;
}

static void append(cdc_relay_t *r, pb_cdc_event_t *e)
{
    if (r->b->n == r->b->cap) {
        r->b->cap = r->b->cap ? r->b->cap * 2 : 256;
        r->b->items = pb_realloc(r->b->items, r->b->cap * sizeof *r->b->items);
        r->b->events = pb_realloc(r->b->events, r->b->cap * sizeof *r->b->events);
        r->b->results = pb_realloc(r->b->results, r->b->cap * sizeof *r->b->results);
        r->b->attempts = pb_realloc(r->b->attempts, r->b->cap * sizeof *r->b->attempts);
    }
    r->b->items[r->b->n] = *e;
    r->b->attempts[r->b->n] = e->ev.attempts;
    r->b->n++;
}

/* Feeds one decoded message into the batch. */
static pb_status_t on_message(cdc_relay_t *r, const pb_pgo_msg_t *m, pb_error_t *err)
{
    pb_cdc_event_t e;
    pb_status_t st;
    switch (m->kind) {
    case PB_PGO_BEGIN:
        r->in_txn = true;
        return PB_OK;
    case PB_PGO_COMMIT:
        r->in_txn = false;
        r->last_commit_end = m->u.commit.end_lsn;
        return PB_OK;
    case PB_PGO_RELATION: {
        const pb_pgo_relation_t *rel = pb_pgo_relation_lookup(&r->dec, m->u.relation.relid);
        if (!rel || strcmp(rel->nspname, "postbox") != 0 || strcmp(rel->relname, "outbox") != 0)
            return PB_OK;
        if ((st = pb_cdc_outbox_map(rel, &r->map, err)) != PB_OK)
            return st;
        r->have_map = true;
        log_debug(FAC, "postbox.outbox described: %u columns", rel->ncols);
        return PB_OK;
    }
    case PB_PGO_INSERT:
        if (!r->have_map || m->u.insert.relid != r->map.relid)
            return PB_OK;
        if ((st = pb_cdc_event_from_insert(&r->map, m, &e, err)) != PB_OK)
            return st;
        append(r, &e);
        return PB_OK;
    case PB_PGO_MESSAGE:
        if (strcmp(m->u.message.prefix, DRAIN_PREFIX) == 0) {
            r->drain_marker_seen = r->drain_marker_sent;
            return PB_OK;
        }
        if (strcmp(m->u.message.prefix, r->cfg->cdc_message_prefix) != 0)
            return PB_OK;
        if (!m->u.message.transactional) {
            log_warn(FAC, "ignoring a non-transactional \"%s\" message: it is not tied to a "
                          "commit (use postbox.emit)", m->u.message.prefix);
            return PB_OK;
        }
        if (pb_cdc_event_from_message(m->u.message.content, m->u.message.len, &e, err) != PB_OK) {
            log_warn(FAC, "skipping a malformed \"%s\" message: %s", m->u.message.prefix, err->msg);
            return PB_OK;
        }
        append(r, &e);
        return PB_OK;
    default:
        return PB_OK;
    }
}

/* Reads from the stream into the batch: waits up to wait_ms for the first message, then takes
 * what is already there without waiting, up to the batch size. ahead: takes only what is
 * already there (the read-ahead while the broker acknowledges the batch before). A batch that
 * holds read-ahead events already is a backlog: no long wait, the short window only. */
static pb_status_t fill(cdc_relay_t *r, int64_t wait_ms, bool ahead, pb_error_t *err)
{
    size_t limit = (size_t)r->cfg->relay_batch_size;
    int64_t started = pb_monotonic_ms();
    int64_t timeout = ahead ? 0 : r->b->n > 0 ? FILL_WINDOW_MS : wait_ms;
    bool waited_for_commit = ahead; /* the read-ahead never waits */
    /* set by the first event: how long more may join its batch */
    int64_t window_end = ahead ? started : r->b->n > 0 ? started + FILL_WINDOW_MS : 0;
    while (r->b->n < limit && !*r->stop) {
        const char *data;
        size_t len;
        pb_status_t st = pb_cdc_stream_read(&r->stream, timeout, &data, &len, err);
        if (st != PB_OK)
            return st;
        if (len == 0) {
            /* half a transaction in hand: its rest is on the way, and cutting the batch here
             * would cost a broker round trip for a handful of events */
            if (r->in_txn && !waited_for_commit && r->b->n > 0) {
                waited_for_commit = true;
                timeout = COMMIT_WAIT_MS;
                continue;
            }
            return PB_OK;
        }
        pb_pgo_msg_t m;
        if ((st = pb_pgo_decode(&r->dec, data, len, &m, err)) != PB_OK ||
            (st = on_message(r, &m, err)) != PB_OK)
            return st == PB_FATAL && strstr(err->msg, "pgoutput") ? PB_TRANSIENT : st;
        /* a short window lets a backlog arriving in bursts fill the batch: fewer broker round
         * trips for a few milliseconds of latency at most */
        int64_t now = pb_monotonic_ms();
        if (r->b->n > 0 && window_end == 0)
            window_end = now - started <= FILL_BACKLOG_MS ? now + FILL_WINDOW_MS : now;
        timeout = window_end - now;
        if (timeout < 0)
            timeout = 0;
    }
    return PB_OK;
}

/* While the broker acknowledges the batch: decodes what the stream already holds into the other
 * buffer, which the next step makes current. */
static void read_ahead(cdc_relay_t *r)
{
    if (r->ahead_st != PB_OK)
        return;
    cdc_batch_t *cur = r->b;
    r->b = next_buf(r);
    r->ahead_st = fill(r, 0, true, &r->ahead_err);
    r->b = cur;
}

static void reject_aggregate_rest(cdc_relay_t *r, size_t from)
{
    /* later events of a dead-lettered event's aggregate wait for the next round */
    const pb_event_t *a = &r->b->events[from];
    for (size_t j = from + 1; j < r->b->n; j++)
        if (r->b->results[j].outcome == PB_OUT_UNTRIED &&
            strcmp(r->b->events[j].aggregate_id, a->aggregate_id) == 0 &&
            strcmp(r->b->events[j].aggregate_type, a->aggregate_type) == 0)
            r->b->results[j].outcome = PB_OUT_HELD;
}

static pb_status_t dead_letter(cdc_relay_t *r, size_t i, const char *reason, pb_error_t *err)
{
    pb_status_t fst = finish_mark(r, true, err); /* the connection serves one statement at a time */
    if (fst != PB_OK)
        return fst;
    log_warn(FAC, "event %s (%s) dead-lettered: %s", r->b->events[i].event_id, r->b->events[i].event_type,
             reason);
    pb_status_t st = pb_dead_letter_event(r->conn, &r->b->events[i], r->b->attempts[i], reason, err);
    if (st == PB_OK) {
        pb_metrics_publish_failed(r->snk->ops->name, r->b->events[i].event_type, true);
        r->totals.dead++;
        r->b->results[i].outcome = PB_OUT_PUBLISHED; /* done with: the stream may move past it */
    }
    return st;
}

/* Publishes the batch until every event is confirmed or dead-lettered. */
static pb_status_t publish_batch(cdc_relay_t *r, pb_error_t *err)
{
    for (size_t i = 0; i < r->b->n; i++) {
        r->b->events[i] = r->b->items[i].ev;
        r->b->results[i].outcome = PB_OUT_UNTRIED;
        r->b->results[i].error[0] = '\0';
    }
    pb_status_t st;
    for (int round = 1;; round++) {
        /* events the sink can never take: dead letters before anything is sent */
        for (size_t i = 0; i < r->b->n; i++) {
            if (r->b->results[i].outcome != PB_OUT_UNTRIED || !r->snk->ops->check ||
                r->snk->ops->check(r->snk, &r->b->events[i], &r->b->results[i]))
                continue;
            r->b->attempts[i]++;
            char reason[sizeof r->b->results[i].error];
            snprintf(reason, sizeof reason, "%s", r->b->results[i].error);
            if ((st = dead_letter(r, i, reason, err)) != PB_OK)
                return st;
            reject_aggregate_rest(r, i);
        }
        if (!r->sink_up) {
            if ((st = pb_connect_sink(r->snk, &r->sink_attempt, r->cfg->relay_reconnect_cap,
                                      r->stop, err)) != PB_OK)
                return st;
            r->sink_up = true;
        }
        pb_error_t sink_err;
        pb_status_t sst;
        if (round == 1 && r->snk->ops->send) {
            sst = r->snk->ops->send(r->snk, r->b->events, r->b->n, r->b->results, &sink_err);
            if (sst == PB_OK) {
                read_ahead(r); /* the next batch's decoding overlaps the acknowledgements */
                sst = r->snk->ops->await(r->snk, &sink_err);
            }
        } else {
            sst = r->snk->ops->publish(r->snk, r->b->events, r->b->n, r->b->results, &sink_err);
        }
        if (sst != PB_OK) {
            log_warn(FAC, "%s broker connection lost: %s", r->snk->ops->name, sink_err.msg);
            r->sink_up = false;
        }
        size_t failed = 0, published = 0;
        int worst = 0;
        for (size_t i = 0; i < r->b->n; i++) {
            pb_result_t *res = &r->b->results[i];
            if (res->outcome == PB_OUT_REJECT || res->outcome == PB_OUT_RETRY) {
                r->b->attempts[i]++;
                bool give_up = res->outcome == PB_OUT_REJECT ||
                               r->b->attempts[i] >= r->cfg->relay_max_attempts;
                if (give_up) {
                    char reason[sizeof res->error + 64];
                    snprintf(reason, sizeof reason, "%s%s",
                             res->outcome == PB_OUT_RETRY ? "gave up: " : "", res->error);
                    if ((st = dead_letter(r, i, reason, err)) != PB_OK)
                        return st;
                    continue;
                }
                log_warn(FAC, "publish of event %s (%s, attempt %d) failed: %s",
                         r->b->events[i].event_id, r->b->events[i].event_type, r->b->attempts[i], res->error);
                pb_metrics_publish_failed(r->snk->ops->name, r->b->events[i].event_type, false);
                res->outcome = PB_OUT_UNTRIED;
                r->totals.retried++;
                failed++;
                if (r->b->attempts[i] > worst)
                    worst = r->b->attempts[i];
            } else if (res->outcome == PB_OUT_HELD) {
                res->outcome = PB_OUT_UNTRIED; /* its predecessor is settled now */
                failed++;
            } else if (res->outcome == PB_OUT_PUBLISHED && round == 1) {
                published++;
            }
        }
        r->totals.published += published;
        if (failed == 0)
            return PB_OK;
        /* wait, keeping the replication connection alive with status updates */
        int64_t until = pb_monotonic_ms() +
                        pb_backoff_ms(worst ? worst : 1, r->cfg->relay_backoff_base,
                                      r->cfg->relay_backoff_cap, pb_random_unit());
        while (!*r->stop && pb_monotonic_ms() < until) {
            pb_nap(r->stop, 500);
            if ((st = pb_cdc_stream_confirm(&r->stream, r->stream.confirmed_lsn, err)) != PB_OK)
                return st;
        }
        if (*r->stop)
            return pb_fail(err, PB_TRANSIENT, "stopped while retrying (the batch is sent again at the next start)");
    }
}

static void add_mark(cdc_relay_t *r, int64_t id, int tries)
{
    if (r->n_marks == r->cap_marks) {
        r->cap_marks = r->cap_marks ? r->cap_marks * 2 : 1024;
        r->marks = pb_realloc(r->marks, r->cap_marks * sizeof *r->marks);
        r->mark_ids = pb_realloc(r->mark_ids, r->cap_marks * sizeof *r->mark_ids);
    }
    r->marks[r->n_marks++] = (mark_t){id, tries};
}

static int compare_ids(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Collects the result of the mark in flight (without wait: only if it is done), keeps the rows
 * it did not find for another try, and confirms the LSN it covered. */
static pb_status_t finish_mark(cdc_relay_t *r, bool wait, pb_error_t *err)
{
    if (!r->mark_in_flight)
        return PB_OK;
    if (!wait) {
        if (PQconsumeInput(r->conn) != 1)
            return pb_fail(err, PB_TRANSIENT, "mark published: %s", PQerrorMessage(r->conn));
        if (PQisBusy(r->conn))
            return PB_OK; /* still running: publishing goes on meanwhile */
    }
    r->mark_in_flight = false;
    PGresult *res = PQgetResult(r->conn);
    pb_status_t st = pb_pg_check(r->conn, res, PGRES_TUPLES_OK, "mark published", err);
    for (PGresult *extra; (extra = PQgetResult(r->conn)) != NULL;)
        PQclear(extra);
    if (st != PB_OK)
        return st;
    size_t n_found = (size_t)PQntuples(res);
    int64_t *found = pb_malloc((n_found ? n_found : 1) * sizeof *found);
    for (size_t i = 0; i < n_found; i++)
        found[i] = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
    PQclear(res);
    qsort(found, n_found, sizeof *found, compare_ids);
    size_t kept = 0;
    for (size_t i = 0; i < r->n_marks; i++) {
        mark_t m = r->marks[i];
        if (i < r->n_sent) {
            if (bsearch(&m.id, found, n_found, sizeof *found, compare_ids))
                continue;
            if (++m.tries >= MARK_TRIES) {
                log_warn(FAC, "outbox row %lld was relayed but could not be marked published "
                              "(not visible after %d tries); it stays pending",
                         (long long)m.id, m.tries);
                continue;
            }
        }
        r->marks[kept++] = m;
    }
    r->n_marks = kept;
    r->n_sent = 0;
    free(found);
    return r->streaming ? pb_cdc_stream_confirm(&r->stream, r->mark_lsn, err) : PB_OK;
}

/* Queues the outbox rows of the batch just published, to be marked. */
static void queue_marks(cdc_relay_t *r)
{
    if (r->cfg->cdc_mark_published && !r->cfg->cdc_delete_after_insert)
        for (size_t i = 0; i < r->b->n; i++)
            if (r->b->events[i].id > 0)
                add_mark(r, r->b->events[i].id, 0);
}

/* Sends every queued row in one mark unless one is in flight (then lsn waits with them), or,
 * with nothing to mark, confirms lsn at once. */
static pb_status_t send_mark(cdc_relay_t *r, uint64_t lsn, pb_error_t *err)
{
    if (r->mark_in_flight) {
        if (lsn > r->queued_lsn)
            r->queued_lsn = lsn;
        return PB_OK;
    }
    if (r->queued_lsn > lsn)
        lsn = r->queued_lsn;
    r->queued_lsn = 0;
    if (r->n_marks == 0)
        return pb_cdc_stream_confirm(&r->stream, lsn, err);
    for (size_t i = 0; i < r->n_marks; i++)
        r->mark_ids[i] = r->marks[i].id;
    bool sparse = pb_outbox_ids_literal(r->mark_ids, r->n_marks, &r->ids);
    const char *params[1] = {r->ids.data};
    /* returns the rows marked now and those marked before (replayed after a restart); only
     * rows this session cannot see yet are missing */
    static const char dense_sql[] =
        "WITH " PB_OUTBOX_MOVE_PUBLISHED_CTES(PB_OUTBOX_IDS_IN_RANGES("o"))
        "SELECT id FROM kept UNION ALL "
        "SELECT p.id FROM postbox.outbox_published p WHERE " PB_OUTBOX_IDS_IN_RANGES("p");
    static const char sparse_sql[] =
        "WITH " PB_OUTBOX_MOVE_PUBLISHED_CTES(PB_OUTBOX_IDS_IN_ARRAY("o"))
        "SELECT id FROM kept UNION ALL "
        "SELECT p.id FROM postbox.outbox_published p WHERE " PB_OUTBOX_IDS_IN_ARRAY("p");
    if (PQsendQueryParams(r->conn, sparse ? sparse_sql : dense_sql, 1, NULL, params, NULL, NULL,
                          0) != 1)
        return pb_fail(err, PB_TRANSIENT, "mark published: %s", PQerrorMessage(r->conn));
    r->mark_in_flight = true;
    r->n_sent = r->n_marks;
    r->mark_lsn = lsn;
    return PB_OK;
}

/* Writes every mark still queued or in flight, waiting for them. */
static pb_status_t flush_marks(cdc_relay_t *r, pb_error_t *err)
{
    pb_status_t st = finish_mark(r, true, err);
    if (st == PB_OK && (r->n_marks || r->queued_lsn)) {
        st = send_mark(r, r->stream.confirmed_lsn, err);
        if (st == PB_OK)
            st = finish_mark(r, true, err);
    }
    return st;
}

static void measure_lag(cdc_relay_t *r)
{
    int64_t now = pb_monotonic_ms();
    if (now - r->lag_at < r->cfg->cdc_lag_interval)
        return;
    pb_error_t ignored; /* the connection serves one statement at a time; a failed mark is
                           found again by the next step */
    if (r->mark_in_flight && finish_mark(r, true, &ignored) != PB_OK)
        return;
    r->lag_at = now;
    const char *params[1] = {r->cfg->cdc_slot};
    PGresult *res = PQexecParams(r->conn,
                                 "SELECT pg_current_wal_lsn() - confirmed_flush_lsn "
                                 "FROM pg_replication_slots WHERE slot_name = $1",
                                 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0)) {
        log_info(FAC, "slot \"%s\" lag: %s bytes behind the current WAL position",
                 r->cfg->cdc_slot, PQgetvalue(res, 0, 0));
        pb_metrics_set_slot_lag(r->cfg->cdc_slot, strtoll(PQgetvalue(res, 0, 0), NULL, 10));
    }
    PQclear(res);
}

/* One round: cut a batch from the stream, publish it, confirm. *idle when nothing came. */
static pb_status_t step(cdc_relay_t *r, bool *idle, pb_error_t *err)
{
    if (r->ahead_st != PB_OK) { /* what the read-ahead ran into */
        pb_status_t st = r->ahead_st;
        *err = r->ahead_err;
        r->ahead_st = PB_OK;
        return st;
    }
    pb_status_t st = fill(r, IDLE_TICK_MS, false, err);
    if (st != PB_OK)
        return st;
    *idle = r->b->n == 0;
    if (r->b->n == 0) {
        /* the marks catch up; rows that were not visible yet get another try */
        if ((st = flush_marks(r, err)) != PB_OK)
            return st;
        /* nothing pending and between transactions: let the server forget what it has sent,
         * or a quiet outbox on a busy database would hold WAL forever */
        uint64_t safe = r->in_txn ? r->last_commit_end : r->stream.keepalive_end;
        if (safe < r->last_commit_end)
            safe = r->last_commit_end;
        return pb_cdc_stream_confirm(&r->stream, safe, err);
    }
    /* what the batch covers up to its last complete transaction */
    uint64_t confirmable = r->last_commit_end;
    if ((st = publish_batch(r, err)) != PB_OK)
        return st;
    /* earlier marks ran meanwhile: collect them if done (confirming their LSN), then queue or
     * send this batch's; wait only when too many rows queue up behind a slow mark */
    bool wait = r->n_marks - r->n_sent > MARK_QUEUE_BATCHES * (size_t)r->cfg->relay_batch_size;
    queue_marks(r);
    if ((st = finish_mark(r, wait, err)) != PB_OK || (st = send_mark(r, confirmable, err)) != PB_OK)
        return st;
    int64_t now_us = pb_wall_us();
    pb_metrics_batch(r->b->n);
    for (size_t i = 0; i < r->b->n; i++) {
        double delay_ms = (double)(now_us - r->b->events[i].created_at_us) / 1000.0;
        pb_metrics_published(r->snk->ops->name, r->b->events[i].event_type, delay_ms / 1000.0);
        log_debug(FAC, "published event %s (%s) %.1f ms after its commit", r->b->events[i].event_id,
                  r->b->events[i].event_type, delay_ms);
    }
    clear_batch(r);
    r->b = next_buf(r); /* what was read ahead */
    /* the LSN is confirmed with the batch's marks (send_mark, finish_mark); until then a status
     * update repeats the last confirmed position */
    return pb_cdc_stream_confirm(&r->stream, r->stream.confirmed_lsn, err);
}

/* --drain: writes a marker into the WAL; once the stream reaches it, everything committed
 * before it has been relayed. */
static bool drained(cdc_relay_t *r)
{
    if (r->mark_in_flight || r->n_marks || r->queued_lsn)
        return false;
    if (r->drain_marker_seen && !r->in_txn && r->b->n == 0 && next_buf(r)->n == 0)
        return true;
    if (!r->drain_marker_sent) {
        PGresult *res = PQexec(r->conn, "SELECT pg_logical_emit_message(true, '" DRAIN_PREFIX "', '')");
        r->drain_marker_sent = PQresultStatus(res) == PGRES_TUPLES_OK;
        PQclear(res);
    }
    return false;
}

pb_status_t pb_relay_run_cdc(const pb_config_t *cfg, const pb_relay_opts_t *opts,
                             volatile sig_atomic_t *stop, pb_error_t *err)
{
    cdc_relay_t r = {.cfg = cfg, .opts = opts, .stop = stop};
    r.b = &r.bufs[0];
    pb_pgo_decoder_init(&r.dec);
    pb_status_t st = pb_sink_new(cfg, &r.snk, err);
    if (st != PB_OK)
        return st;
    pb_ops_t *ops; /* /metrics, /healthz, /readyz; backlog sampling and retention purge */
    if ((st = pb_ops_start(cfg, "relay", &ops, err)) != PB_OK) {
        pb_sink_free(r.snk);
        return st;
    }
    r.totals.logged_at = pb_monotonic_ms();
    while (!*stop) {
        pb_metrics_set_state(r.conn != NULL, r.sink_up, r.streaming);
        if (!r.conn && (st = connect_conn(&r, err)) != PB_OK) {
            if (st == PB_FATAL)
                break;
            continue;
        }
        if (!r.sink_up) {
            close_stream(&r); /* no confirms while the broker is away: replay afterwards */
            if ((st = pb_connect_sink(r.snk, &r.sink_attempt, cfg->relay_reconnect_cap, stop,
                                      err)) != PB_OK) {
                if (st == PB_FATAL)
                    break;
                continue;
            }
            r.sink_up = true;
        }
        if (!r.streaming && (st = open_stream(&r, err)) != PB_OK) {
            if (st == PB_FATAL)
                break;
            continue;
        }
        bool idle = false;
        st = step(&r, &idle, err);
        if (st == PB_FATAL)
            break;
        if (st == PB_TRANSIENT) {
            log_warn(FAC, "%s; reconnecting", err->msg);
            close_stream(&r);
            pb_error_t ignored; /* the stream replays whatever this mark was for */
            if (r.conn && r.mark_in_flight && finish_mark(&r, true, &ignored) != PB_OK)
                drop_conn(&r);
            if (PQstatus(r.conn) != CONNECTION_OK)
                drop_conn(&r);
            continue;
        }
        measure_lag(&r);
        pb_relay_totals_log(&r.totals, FAC, false);
        if (idle && opts->drain && drained(&r)) {
            log_info(FAC, "stream drained");
            break;
        }
    }
    if (st != PB_FATAL)
        st = PB_OK;
    if (r.conn && r.streaming && flush_marks(&r, err) != PB_OK)
        log_warn(FAC, "could not mark the last batch published: %s", err->msg);
    pb_relay_totals_log(&r.totals, FAC, true);
    close_stream(&r);
    drop_conn(&r);
    pb_pgo_decoder_free(&r.dec);
    pb_sink_free(r.snk);
    pb_ops_stop(ops);
    for (int i = 0; i < 2; i++) {
        free(r.bufs[i].items);
        free(r.bufs[i].events);
        free(r.bufs[i].results);
        free(r.bufs[i].attempts);
    }
    free(r.marks);
    free(r.mark_ids);
    pb_buf_free(&r.ids);
    return st;
}
