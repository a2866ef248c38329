/* The cdc capture: events from the logical replication stream (cdc/stream.h, pgoutput) instead
 * of a polling query. Batches are cut from the stream; only when every event of a transaction is
 * confirmed by the broker (or dead-lettered) and its outbox rows are marked published is the
 * transaction's end LSN confirmed to PostgreSQL. A crash anywhere replays from the last
 * confirmed position: duplicates are possible, losses are not.
 *
 * The stream cannot leave a failed event behind: the driver retries it in place (blocking the
 * stream) until it is published or dead-lettered, so per-aggregate order holds for everything
 * after a failure. While the broker acknowledges a batch, the next one is decoded from what the
 * stream already holds.
 *
 * Delayed events (available_at still to come) cannot wait in the stream either: holding one
 * would hold every later transaction's confirmation, and the WAL with it, for as long as the
 * delay. The driver defers them (PB_OUT_DEFERRED), with every later event of their aggregate,
 * and settle writes them to postbox.cdc_deferred (sql/016_expiry_delay.sql) before the batch's
 * LSN is confirmed: once confirmed, the stream has let go of them and the table holds them. A
 * later event of an aggregate with rows there is deferred behind them (next asks the table for
 * the aggregates of each batch from the stream, while it holds rows). When rows come due, next
 * hands out a batch claimed from the table instead of the stream (by the table's order per
 * aggregate; the driver publishes them as they are, retried in place like the stream's), and
 * settle deletes them there, marking their outbox rows published in the same transaction. A
 * row is claimed only once the slot's confirmed position has passed the transaction that wrote
 * its event: a relay killed after publishing it cannot meet the event in the stream again and
 * set it aside twice. The table's work runs on a connection of its own (dconn), beside the marks
 * in flight on conn.
 *
 * Large transactions (PostgreSQL 14+, pgoutput protocol 2): the server streams a transaction
 * past its logical_decoding_work_mem while it runs. Its events go to a spill file (cdc/streamed.h)
 * instead of the batch; at its Stream Commit, which comes in commit order, fill reads them back
 * into the batches before anything after it on the stream (replay), and only the batch holding
 * its last event carries its end LSN. Re-reading the rows from postbox.outbox at the commit
 * instead would cost no disk, but works only for marked rows: events of postbox.emit and rows
 * of cdc.delete_after_insert exist only in the WAL. A crash loses the spill files (unlinked)
 * and nothing else: the slot has not passed the transaction, so the server streams it again.
 *
 * relay.mask_stored: what the capture stores of an event is what the driver hands to settle,
 * the masked payload and headers (driver.c, mask_for_storage): dead letters are written from
 * them, events set aside go to the table masked (its column masked: published as they are), and
 * the marks carry them, so that a relayed row moves to the history with the texts it was
 * published with instead of the producer's. A row leaves the outbox only with its mark or its
 * dead letter: until then (relayed, mark not yet run; set aside, not due) it holds what the
 * producer wrote, as a pending row does in the poll capture. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cdc/events.h"
#include "cdc/pgoutput.h"
#include "cdc/signature.h"
#include "cdc/spill.h"
#include "cdc/stream.h"
#include "cdc/streamed.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/log_limit.h"
#include "common/retry.h"
#include "common/str.h"
#include "metrics/metrics.h"
#include "relay/capture.h"
#include "relay/slot_age.h"
#include "relay/slot_guard.h"
#include "store/dead_letters.h"
#include "store/outbox.h"
#include "store/pg.h"
#include "store/slot_position.h"

#define FAC "relay.cdc"
#define IDLE_TICK_MS 1000
/* --drain whose marker could not be written: how long the stream may take to reach the WAL
 * position of the failure before the error is returned anyway */
#define DRAIN_FAILED_WAIT_MS 30000
#define DRAIN_PREFIX "postbox-drain"
#define COMMIT_WAIT_MS 20
#define FILL_WINDOW_MS 2
/* The window is for a backlog: it opens only when the batch's first event was already waiting
 * (arrived within this many ms of the start of the fill). At a low rate the relay waits for
 * every event, and a window would only add to each event's latency. */
#define FILL_BACKLOG_MS 1
/* Inside the window, what the stream gathers is taken after naps of this many ms. */
#define GATHER_NAP_MS 1
/* Rejected (forged) messages are logged one by one up to this many, then every 1000th, so a
 * flood of them cannot flood the log. */
#define REJECT_LOG_ALL 10
/* Non-transactional messages with the relay's prefix (any role may write them while PUBLIC may
 * execute pg_logical_emit_message) are logged at most once per this many ms, with a count. */
#define NONTXN_LOG_INTERVAL_MS 60000

/* A relayed outbox row to be marked published. A row can come through the stream a moment
 * before its transaction is visible to other sessions (the commit record is flushed first), so
 * a mark that finds nothing is tried again with the next batches, for MARK_GIVE_UP_MS: a row
 * still missing then is gone (deleted while the stream held it), not late. */
typedef struct mark {
    int64_t id;
    int64_t first_missed_ms; /* when a mark first did not find it (0: not yet) */
    /* relay.mask_stored: the texts it was published with, stored in the history instead of the
     * row's (owned; payload NULL when it was not masked) */
    char *payload, *headers;
} mark_t;

#define MARK_GIVE_UP_MS 5000
/* Publishing waits for the mark in flight only when more than this many batches' rows wait for
 * the next one: the marks follow the stream at their own pace, in larger statements. */
#define MARK_QUEUE_BATCHES 8
/* A mark costs a fixed part per statement (measured: 40 rows take 2.5 times as long per row as
 * 5,000): while the stream gives small batches, their rows wait to go in one mark until a batch's
 * worth is queued or the oldest has waited this long (or the stream is idle: flush_marks). The
 * events are published already; only the history and the slot's confirmation wait. */
#define MARK_HOLD_MS 20

/* A deferred batch whose claim found nothing due waits this long before the next try, when rows
 * are due but their transactions are not behind the slot's confirmed position yet. */
#define DEFERRED_RETRY_MS 200

/* Events cut from the stream, with what the sink needs of them. */
typedef struct cdc_batch {
    pb_cdc_event_t *items;
    pb_event_t *events; /* flat copies for the driver and the sink */
    size_t n, cap;
    size_t bytes; /* payload bytes of the items (relay.batch_bytes) */
} cdc_batch_t;

typedef struct cdc_capture {
    pb_capture_t base;
    PGconn *conn; /* ordinary connection: marks, dead letters, lag */
    pb_cdc_stream_t stream;
    bool streaming;
    bool said_standby;
    pb_pgo_decoder_t dec;
    pb_cdc_outbox_map_t map;
    bool have_map;
    /* the batch being cut from the stream or with the driver (b), and the next one, read ahead
     * while the broker acknowledges b */
    cdc_batch_t bufs[2];
    cdc_batch_t *b;
    bool b_out;           /* b is with the driver until settle */
    uint64_t b_lsn;       /* what b covers up to its last complete transaction */
    pb_status_t ahead_st; /* an error of the read-ahead, for the next batch to return */
    pb_error_t ahead_err;
    bool in_txn;
    uint64_t last_commit_end; /* end LSN of the last Commit read */
    bool drain_marker_sent, drain_marker_seen;
    char drain_nonce[33]; /* the content of this relay's own drain marker */
    /* the marker could not be written: the error, returned once the stream has passed the WAL
     * position of that moment (what was committed before is relayed first) */
    uint64_t drain_failed_lsn;
    int64_t drain_failed_at;
    pb_error_t drain_failed_err;
    pb_emit_key_t emit_key; /* verifies the messages of postbox.emit */
    uint64_t n_rejected;
    pb_log_limit_t nontxn_log; /* the warning about non-transactional messages */
    bool had_events;       /* the last batch from next was not empty */
    int64_t last_event_at; /* when the stream last gave events (or opened) */
    pb_buf_t ids;
    /* Marking relayed rows published runs asynchronously on conn while the next batches are
     * published; a batch's LSN is confirmed once its rows are marked. */
    bool mark_in_flight;
    uint64_t mark_lsn;   /* confirmed when the mark in flight is done */
    uint64_t queued_lsn; /* covers the rows queued after the mark in flight was sent (0: none) */
    mark_t *marks; /* the first n_sent: in the mark in flight; then the ones still to send */
    size_t n_marks, n_sent, cap_marks;
    int64_t held_since; /* when the oldest of the ones still to send was queued */
    int64_t *mark_ids; /* room for cap_marks ids */
    pb_masked_texts_t mark_texts; /* the masked texts of the mark being sent */
    /* dead letters of a batch, for one statement */
    const pb_event_t **dead_events;
    int *dead_attempts;
    const char **dead_reasons;
    size_t cap_dead;
    int64_t lag_at;
    pb_slot_guard_t guard; /* the slot is the relay's own; nothing confirmed before recorded */
    /* events set aside until due (postbox.cdc_deferred, the rows of cfg->cdc_slot) */
    PGconn *dconn;
    bool deferred_rows;      /* the table may hold rows of the slot */
    int64_t deferred_due_ms; /* monotonic ms when the next row is due (INT64_MAX: none) */
    PGresult *dres;          /* the batch claimed from the table, with the driver (d_out) */
    pb_event_t *devents;
    int64_t *dids;           /* their ids in the table */
    size_t dn, dcap;
    bool d_out;
    bool *behind;            /* per event of b: its aggregate has rows set aside */
    size_t cap_behind;
    uint64_t txn_commit_lsn; /* the commit LSN of the transaction being read (from its Begin) */
    int64_t txn_commit_time; /* and its commit time (pgoutput: microseconds since 2000-01-01) */
    pb_slot_age_t age;       /* the transactions with events read and not confirmed yet */
    /* Large transactions streamed while in progress (protocol 2): their events wait on disk
     * until their Stream Commit (cdc/streamed.h), and are then read back into the batches
     * (replay) before anything later on the stream. last_commit_end passes such a transaction
     * only once its last event is in a batch, so no LSN covering it is confirmed before the
     * broker has acknowledged all of it. */
    pb_streamed_t streamed;
    pb_spill_t *replay;          /* the committed streamed transaction being read back */
    uint64_t replay_commit_lsn;  /* its commit LSN and end LSN (Stream Commit) */
    uint64_t replay_end_lsn;
    int64_t replay_commit_time;
    uint32_t drain_xid;          /* the streamed transaction holding this relay's drain marker */
} cdc_capture_t;

static const pb_capture_ops_t cdc_ops;

static pb_status_t finish_mark(cdc_capture_t *r, bool wait, pb_error_t *err);
static pb_status_t load_deferred(cdc_capture_t *r, pb_error_t *err);
static void ensure_dead(cdc_capture_t *r, size_t n);

/* Confirms lsn to the server once the guard has recorded it (slot_guard.h); the record is
 * written only while no mark runs on the connection. */
static pb_status_t confirm(cdc_capture_t *r, uint64_t lsn, bool force, pb_error_t *err)
{
    uint64_t allowed;
    pb_status_t st = pb_slot_guard_allow(&r->guard, r->conn, !r->mark_in_flight, lsn, force,
                                         &allowed, err);
    if (st == PB_OK)
        st = pb_cdc_stream_confirm(&r->stream, allowed, err);
    if (st == PB_OK)
        pb_slot_age_confirmed(&r->age, r->stream.confirmed_lsn);
    return st;
}

static void clear_buf(cdc_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        pb_cdc_event_free(&b->items[i]);
    b->n = 0;
    b->bytes = 0;
}

static void clear_batch(cdc_capture_t *r)
{
    clear_buf(r->b);
}

/* The other buffer, holding what was read ahead. */
static cdc_batch_t *next_buf(cdc_capture_t *r)
{
    return r->b == &r->bufs[0] ? &r->bufs[1] : &r->bufs[0];
}

static void close_stream(cdc_capture_t *r)
{
    if (r->streaming)
        pb_cdc_stream_close(&r->stream);
    r->streaming = false;
    pb_pgo_decoder_free(&r->dec);
    pb_pgo_decoder_init(&r->dec);
    r->have_map = false;
    r->in_txn = false;
    r->b_out = false;
    /* the server streams every unconfirmed transaction again, from its first block */
    pb_streamed_clear(&r->streamed);
    pb_spill_free(r->replay);
    r->replay = NULL;
    r->drain_xid = 0;
    /* r->age stays: the slot holds those transactions until it confirms past them */
    /* everything unconfirmed is sent again by the server */
    clear_buf(&r->bufs[0]);
    clear_buf(&r->bufs[1]);
    r->ahead_st = PB_OK;
}

static void release_deferred_batch(cdc_capture_t *r)
{
    PQclear(r->dres);
    r->dres = NULL;
    r->dn = 0;
    r->d_out = false;
}

static void drop_conn(cdc_capture_t *r)
{
    release_deferred_batch(r);
    PQfinish(r->dconn);
    r->dconn = NULL;
    PQfinish(r->conn);
    r->conn = NULL;
    r->mark_in_flight = false; /* unconfirmed: the stream replays it, and marks it again */
    r->n_sent = 0;
}

static pb_status_t exec(cdc_capture_t *r, const char *sql, pb_error_t *err)
{
    return pb_pg_exec(r->conn, sql, err);
}

/* Whether the trigger of cdc.delete_after_insert is on postbox.outbox. */
static pb_status_t trigger_present(cdc_capture_t *r, bool *present, pb_error_t *err)
{
    PGresult *res = PQexec(r->conn, "SELECT count(*) FROM pg_trigger WHERE tgrelid = "
                                    "'postbox.outbox'::regclass AND tgname = 'outbox_cdc_delete'");
    pb_status_t st = pb_pg_check(r->conn, res, PGRES_TUPLES_OK, "look for the cdc delete trigger",
                                 err);
    if (st != PB_OK)
        return st;
    *present = strcmp(PQgetvalue(res, 0, 0), "0") != 0;
    PQclear(res);
    return PB_OK;
}

static pb_status_t connect_conn(cdc_capture_t *r, pb_error_t *err)
{
    pb_status_t st = pb_pg_connect_retry(r->base.cfg->postgres_dsn, r->base.cfg->relay_reconnect_cap,
                                         r->base.stop, &r->conn, err);
    if (st != PB_OK)
        return st;
    /* the trigger that keeps the outbox empty follows the configuration; changed only when it
     * differs, which needs the outbox's owner (a least-privilege relay finds it in place) */
    bool present;
    st = trigger_present(r, &present, err);
    if (st == PB_OK && present != r->base.cfg->cdc_delete_after_insert)
        st = present ? exec(r, "DROP TRIGGER IF EXISTS outbox_cdc_delete ON postbox.outbox", err)
                     : exec(r, "CREATE OR REPLACE TRIGGER outbox_cdc_delete AFTER INSERT ON "
                               "postbox.outbox FOR EACH ROW EXECUTE FUNCTION "
                               "postbox.delete_inserted_row()",
                            err);
    if (st == PB_OK)
        st = pb_outbox_prepare_mark_relayed(r->conn, err);
    if (st == PB_OK)
        st = pb_emit_key_load(r->conn, &r->emit_key, err);
    if (st == PB_OK)
        st = pb_pg_connect_retry(r->base.cfg->postgres_dsn, r->base.cfg->relay_reconnect_cap,
                                 r->base.stop, &r->dconn, err);
    if (st == PB_OK)
        st = load_deferred(r, err);
    if (st != PB_OK) {
        if (st == PB_FATAL && pb_error_schema_missing(err))
            pb_fail(err, PB_FATAL, "%s (run `postbox init` first)", err->msg);
        drop_conn(r);
    }
    return st;
}

static pb_status_t open_stream(cdc_capture_t *r, pb_error_t *err)
{
    bool create = r->base.cfg->cdc_create_slot && !r->guard.have_record;
    pb_status_t st = pb_cdc_stream_open(&r->stream, r->base.cfg, create, err);
    if (st == PB_OK) {
        r->streaming = true;
        r->said_standby = false;
        r->last_event_at = pb_monotonic_ms();
        return PB_OK;
    }
    if (r->stream.in_use_elsewhere) {
        if (!r->said_standby)
            log_info(FAC, "slot \"%s\" is streamed by another relay; standing by", r->base.cfg->cdc_slot);
        r->said_standby = true;
        pb_nap(r->base.stop, r->base.cfg->relay_poll_interval);
        return PB_TRANSIENT;
    }
    if (st == PB_TRANSIENT) {
        log_warn(FAC, "waiting for the replication stream: %s", err->msg);
        pb_nap(r->base.stop, 1000);
    }
    return st;
}

static void append(cdc_capture_t *r, pb_cdc_event_t *e)
{
    if (r->b->n == r->b->cap) {
        r->b->cap = r->b->cap ? r->b->cap * 2 : 256;
        r->b->items = pb_realloc(r->b->items, r->b->cap * sizeof *r->b->items);
        r->b->events = pb_realloc(r->b->events, r->b->cap * sizeof *r->b->events);
    }
    r->b->items[r->b->n] = *e;
    r->b->n++;
    r->b->bytes += e->ev.payload_len;
}

/* Whether the batch holds relay.batch_bytes already (0: no bound). */
static bool bytes_full(const cdc_capture_t *r)
{
    int64_t cap = r->base.cfg->relay_batch_bytes;
    return cap > 0 && r->b->bytes >= (uint64_t)cap;
}

/* A message with the relay's prefix that postbox.emit did not write: any role that may call
 * pg_logical_emit_message can write one. Dropped, and said so. */
static void reject_message(cdc_capture_t *r, const pb_pgo_msg_t *m, pb_emit_verdict_t verdict)
{
    r->n_rejected++;
    pb_metrics_cdc_rejected(r->base.cfg->cdc_slot);
    if (r->n_rejected > REJECT_LOG_ALL && r->n_rejected % 1000 != 0)
        return;
    char lsn[32];
    pb_lsn_format(m->u.message.lsn, lsn, sizeof lsn);
    log_warn(FAC, "rejected a \"%s\" message at %s: %s, so not written by postbox.emit (a forged "
                  "event?); not published (%llu rejected so far; revoke EXECUTE on "
                  "pg_logical_emit_message from PUBLIC: see `postbox init`)",
             m->u.message.prefix, lsn,
             verdict == PB_EMIT_UNSIGNED ? "it is not signed" : "its signature does not verify",
             (unsigned long long)r->n_rejected);
}

/* An event decoded from m: into the batch when its transaction has committed (m is not part of
 * a stream block), else into the spill file of its streamed transaction. Takes e. */
static pb_status_t take_event(cdc_capture_t *r, const pb_pgo_msg_t *m, pb_cdc_event_t *e,
                              pb_error_t *err)
{
    if (m->xid == 0) {
        e->commit_lsn = r->txn_commit_lsn;
        pb_slot_age_note(&r->age, r->txn_commit_lsn, r->txn_commit_time);
        append(r, e);
        return PB_OK;
    }
    pb_status_t st = pb_streamed_add(&r->streamed, m->xid, &e->ev, err);
    pb_cdc_event_free(e);
    return st;
}

/* Stream Commit: the transaction's events are read back from its spill file before anything
 * after it on the stream (fill); one without events is done at once. */
static pb_status_t on_stream_commit(cdc_capture_t *r, const pb_pgo_msg_t *m, pb_error_t *err)
{
    PB_ASSERT(!r->replay);
    uint32_t xid = m->u.stream_commit.xid;
    pb_status_t st = pb_streamed_commit(&r->streamed, xid, &r->replay, err);
    if (st != PB_OK)
        return st;
    if (r->drain_xid == xid) {
        r->drain_marker_seen = true;
        r->drain_xid = 0;
    }
    if (!r->replay) {
        r->last_commit_end = m->u.stream_commit.end_lsn;
        return PB_OK;
    }
    r->replay_commit_lsn = m->u.stream_commit.commit_lsn;
    r->replay_end_lsn = m->u.stream_commit.end_lsn;
    r->replay_commit_time = m->u.stream_commit.commit_time;
    log_info(FAC, "streamed transaction %u committed: relaying its %llu event(s) from the spill "
                  "file (%llu bytes)",
             xid, (unsigned long long)pb_spill_count(r->replay),
             (unsigned long long)pb_spill_bytes(r->replay));
    return PB_OK;
}

/* The next event of the transaction being read back into the batch; at its end the transaction
 * is done (its end LSN may be confirmed with the batch) and its file goes. */
static pb_status_t replay_one(cdc_capture_t *r, pb_error_t *err)
{
    pb_cdc_event_t e;
    bool got;
    pb_status_t st = pb_spill_read(r->replay, &e, &got, err);
    if (st != PB_OK)
        return st;
    if (got) {
        e.commit_lsn = r->replay_commit_lsn;
        pb_slot_age_note(&r->age, r->replay_commit_lsn, r->replay_commit_time);
        append(r, &e);
        return PB_OK;
    }
    pb_spill_free(r->replay);
    r->replay = NULL;
    r->last_commit_end = r->replay_end_lsn;
    return PB_OK;
}

/* Feeds one decoded message into the batch. */
static pb_status_t on_message(cdc_capture_t *r, const pb_pgo_msg_t *m, pb_error_t *err)
{
    pb_cdc_event_t e;
    pb_status_t st;
    switch (m->kind) {
    case PB_PGO_STREAM_START:
        return pb_streamed_start(&r->streamed, m->u.stream_start.xid,
                                 m->u.stream_start.first_segment, err);
    case PB_PGO_STREAM_STOP:
        pb_streamed_stop(&r->streamed);
        return PB_OK;
    case PB_PGO_STREAM_COMMIT:
        return on_stream_commit(r, m, err);
    case PB_PGO_STREAM_ABORT:
        if (m->u.stream_abort.subxid == m->u.stream_abort.xid && r->drain_xid == m->u.stream_abort.xid)
            r->drain_xid = 0;
        log_debug(FAC, "streamed transaction %u: %s aborted, its events dropped",
                  m->u.stream_abort.xid,
                  m->u.stream_abort.subxid == m->u.stream_abort.xid ? "all of it" : "a subtransaction");
        return pb_streamed_abort(&r->streamed, m->u.stream_abort.xid, m->u.stream_abort.subxid, err);
    case PB_PGO_BEGIN:
        r->in_txn = true;
        r->txn_commit_lsn = m->u.begin.final_lsn;
        r->txn_commit_time = m->u.begin.commit_time;
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
        return take_event(r, m, &e, err);
    case PB_PGO_MESSAGE:
        if (strcmp(m->u.message.prefix, DRAIN_PREFIX) == 0) {
            /* only this relay's own marker: another one proves nothing about what it read */
            if (r->drain_marker_sent && m->u.message.len == strlen(r->drain_nonce) &&
                memcmp(m->u.message.content, r->drain_nonce, m->u.message.len) == 0) {
                if (m->xid) /* seen once its streamed transaction commits */
                    r->drain_xid = r->streamed.block_xid;
                else
                    r->drain_marker_seen = true;
            }
            return PB_OK;
        }
        if (strcmp(m->u.message.prefix, r->base.cfg->cdc_message_prefix) != 0)
            return PB_OK;
        if (!m->u.message.transactional) {
            uint64_t skipped;
            if (pb_log_limit_pass(&r->nontxn_log, pb_monotonic_ms(), &skipped))
                log_warn(FAC, "ignoring a non-transactional \"%s\" message: it is not tied to a "
                              "commit (use postbox.emit); %llu more ignored since the last such "
                              "warning (logged at most once a minute)",
                         m->u.message.prefix, (unsigned long long)skipped);
            return PB_OK;
        }
        const char *json;
        size_t json_len;
        pb_emit_verdict_t verdict = pb_emit_verify(&r->emit_key, m->u.message.lsn,
                                                   m->u.message.content, m->u.message.len,
                                                   &json, &json_len);
        if (verdict == PB_EMIT_UNSIGNED || verdict == PB_EMIT_FORGED) {
            reject_message(r, m, verdict);
            return PB_OK;
        }
        if (pb_cdc_event_from_message(json, json_len, &e, err) != PB_OK) {
            log_warn(FAC, "skipping a malformed \"%s\" message: %s", m->u.message.prefix, err->msg);
            return PB_OK;
        }
        return take_event(r, m, &e, err);
    default:
        return PB_OK;
    }
}

/* Reads from the stream into the batch: waits up to wait_ms for the first message, then takes
 * what is already there without waiting, up to the batch size. ahead: takes only what is
 * already there (the read-ahead while the broker acknowledges the batch before). A batch that
 * holds read-ahead events already is a backlog: no long wait, the short window only. */
static pb_status_t fill(cdc_capture_t *r, int64_t wait_ms, bool ahead, pb_error_t *err)
{
    size_t limit = (size_t)r->base.cfg->relay_batch_size;
    int64_t started = pb_monotonic_ms();
    int64_t timeout = ahead ? 0 : r->b->n > 0 ? FILL_WINDOW_MS : wait_ms;
    bool waited_for_commit = ahead; /* the read-ahead never waits */
    /* set by the first event: how long more may join its batch */
    int64_t window_end = ahead ? started : r->b->n > 0 ? started + FILL_WINDOW_MS : 0;
    while (r->b->n < limit && !bytes_full(r) && !*r->base.stop) {
        /* a committed streamed transaction goes first, from disk: it is older than the rest */
        if (r->replay) {
            pb_status_t st = replay_one(r, err);
            if (st != PB_OK)
                return st;
            continue;
        }
        const char *data;
        size_t len;
        /* Inside the window the batch is cut at its end in any case: rather than waking for each
         * message the server sends (one per send; a backlog of small transactions arrives a few
         * hundred bytes at a time), nap and take what has gathered. The wake-ups cost the relay
         * more CPU than decoding, and the walsender needs that CPU on a small machine. */
        bool gathering = window_end > 0 && !waited_for_commit;
        pb_status_t st = pb_cdc_stream_read(&r->stream, gathering ? 0 : timeout, &data, &len, err);
        if (st != PB_OK)
            return st;
        if (len == 0 && gathering && timeout > 0) {
            pb_sleep_ms(timeout < GATHER_NAP_MS ? timeout : GATHER_NAP_MS);
            timeout = window_end - pb_monotonic_ms();
            continue;
        }
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
        /* a message the decoder cannot read: reconnect and read it again (the stream replays it) */
        if (pb_pgo_decode(&r->dec, data, len, &m, err) != PB_OK)
            return pb_fail(err, PB_TRANSIENT, "%s", err->msg);
        if ((st = on_message(r, &m, err)) != PB_OK)
            return st == PB_FATAL && m.kind >= PB_PGO_STREAM_START && m.kind <= PB_PGO_STREAM_ABORT
                       ? pb_fail(err, PB_TRANSIENT, "%s", err->msg) /* as a decoder error */
                       : st;
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
static void read_ahead(cdc_capture_t *r)
{
    if (r->ahead_st != PB_OK)
        return;
    cdc_batch_t *cur = r->b;
    r->b = next_buf(r);
    r->ahead_st = fill(r, 0, true, &r->ahead_err);
    r->b = cur;
}

/* Queues the outbox row of ev to be marked, with the texts it was published with when they
 * are to be stored masked. */
static void add_mark(cdc_capture_t *r, const pb_event_t *ev)
{
    if (r->n_marks == r->cap_marks) {
        r->cap_marks = r->cap_marks ? r->cap_marks * 2 : 1024;
        r->marks = pb_realloc(r->marks, r->cap_marks * sizeof *r->marks);
        r->mark_ids = pb_realloc(r->mark_ids, r->cap_marks * sizeof *r->mark_ids);
    }
    mark_t m = {.id = ev->id};
    if (ev->store_masked) {
        m.payload = pb_strdup(ev->payload);
        m.headers = ev->headers ? pb_strdup(ev->headers) : NULL;
    }
    r->marks[r->n_marks++] = m;
}

static void free_mark(mark_t *m)
{
    free(m->payload);
    free(m->headers);
    m->payload = m->headers = NULL;
}

static int compare_ids(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Collects the result of the mark in flight (without wait: only if it is done), keeps the rows
 * it did not find for another try, and confirms the LSN it covered. */
static pb_status_t finish_mark(cdc_capture_t *r, bool wait, pb_error_t *err)
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
    bool all_found = PQntuples(res) == 1 &&
                     strtoll(PQgetvalue(res, 0, 0), NULL, 10) == (long long)r->n_sent;
    PQclear(res);
    if (all_found) { /* the usual case: nothing to try again */
        for (size_t i = 0; i < r->n_sent; i++)
            free_mark(&r->marks[i]);
        memmove(r->marks, r->marks + r->n_sent, (r->n_marks - r->n_sent) * sizeof *r->marks);
        r->n_marks -= r->n_sent;
        r->n_sent = 0;
        return r->streaming ? confirm(r, r->mark_lsn, false, err) : PB_OK;
    }
    /* some were not found (or an id was sent twice): which ones are in the history now */
    for (size_t i = 0; i < r->n_sent; i++)
        r->mark_ids[i] = r->marks[i].id;
    if ((st = pb_outbox_find_published(r->conn, r->mark_ids, r->n_sent, &r->ids, &res, err)) !=
        PB_OK)
        return st;
    size_t n_found = (size_t)PQntuples(res);
    int64_t *found = pb_malloc((n_found ? n_found : 1) * sizeof *found);
    for (size_t i = 0; i < n_found; i++)
        found[i] = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
    PQclear(res);
    qsort(found, n_found, sizeof *found, compare_ids);
    size_t kept = 0, n_lost = 0;
    int64_t now = pb_monotonic_ms(), lost_lo = INT64_MAX, lost_hi = 0;
    for (size_t i = 0; i < r->n_marks; i++) {
        mark_t m = r->marks[i];
        if (i < r->n_sent) {
            if (bsearch(&m.id, found, n_found, sizeof *found, compare_ids)) {
                free_mark(&m);
                continue;
            }
            if (m.first_missed_ms == 0)
                m.first_missed_ms = now;
            else if (now - m.first_missed_ms >= MARK_GIVE_UP_MS) {
                n_lost++;
                lost_lo = m.id < lost_lo ? m.id : lost_lo;
                lost_hi = m.id > lost_hi ? m.id : lost_hi;
                free_mark(&m);
                continue;
            }
        }
        r->marks[kept++] = m;
    }
    if (n_lost)
        log_warn(FAC, "%zu relayed outbox row(s) between ids %lld and %lld could not be marked "
                      "published: not found for %d s (deleted while the stream held them?); any "
                      "that appears later stays pending",
                 n_lost, (long long)lost_lo, (long long)lost_hi, MARK_GIVE_UP_MS / 1000);
    r->n_marks = kept;
    r->n_sent = 0;
    free(found);
    return r->streaming ? confirm(r, r->mark_lsn, false, err) : PB_OK;
}

/* Queues the outbox rows of the batch just published, to be marked (a dead letter took its row
 * with it). */
static void queue_marks(cdc_capture_t *r, const pb_result_t *results)
{
    if (r->n_marks == r->n_sent)
        r->held_since = pb_monotonic_ms();
    if (r->base.cfg->cdc_mark_published && !r->base.cfg->cdc_delete_after_insert)
        for (size_t i = 0; i < r->b->n; i++)
            if (r->b->events[i].id > 0 && results[i].outcome == PB_OUT_PUBLISHED)
                add_mark(r, &r->b->events[i]);
}

/* Sends every queued row in one mark unless one is in flight or, without force, too few rows
 * have waited too short a time (MARK_HOLD_MS; then lsn waits with them), or, with nothing to
 * mark, confirms lsn at once. */
static pb_status_t send_mark(cdc_capture_t *r, uint64_t lsn, bool force, pb_error_t *err)
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
        return confirm(r, lsn, false, err);
    if (!force && r->n_marks < (size_t)r->base.cfg->relay_batch_size &&
        pb_monotonic_ms() - r->held_since < MARK_HOLD_MS) {
        r->queued_lsn = lsn;
        return PB_OK;
    }
    pb_masked_texts_reset(&r->mark_texts);
    for (size_t i = 0; i < r->n_marks; i++) {
        const mark_t *m = &r->marks[i];
        r->mark_ids[i] = m->id;
        if (m->payload)
            pb_masked_texts_add(&r->mark_texts, m->id, m->payload, m->headers);
    }
    pb_masked_texts_end(&r->mark_texts);
    pb_status_t st = pb_outbox_send_mark_relayed(r->conn, r->mark_ids, r->n_marks, &r->ids,
                                                 &r->mark_texts, err);
    if (st != PB_OK)
        return st;
    r->mark_in_flight = true;
    r->n_sent = r->n_marks;
    r->mark_lsn = lsn;
    return PB_OK;
}

/* Writes every mark still queued or in flight, waiting for them. */
static pb_status_t flush_marks(cdc_capture_t *r, pb_error_t *err)
{
    pb_status_t st = finish_mark(r, true, err);
    if (st == PB_OK && (r->n_marks || r->queued_lsn)) {
        st = send_mark(r, r->stream.confirmed_lsn, true, err);
        if (st == PB_OK)
            st = finish_mark(r, true, err);
    }
    return st;
}

/* Every cdc.lag_interval: the slot's lag (log, metrics, cdc.max_slot_lag) and whether it is
 * still the relay's own (slot_guard.h). */
static pb_status_t measure_lag(cdc_capture_t *r, pb_error_t *err)
{
    int64_t now = pb_monotonic_ms();
    if (!r->conn || now - r->lag_at < r->base.cfg->cdc_lag_interval)
        return PB_OK;
    /* the connection serves one statement at a time */
    pb_status_t st = finish_mark(r, true, err);
    if (st != PB_OK)
        return st;
    r->lag_at = now;
    int64_t age_ms = pb_slot_age_ms(&r->age, pb_wall_us());
    /* with the stream closed (a broker lost between batches) nothing is read: the oldest outbox
     * row not relayed tells the age instead, as `postbox status` judges it */
    const pb_config_t *cfg = r->base.cfg;
    if (!r->streaming && cfg->cdc_max_slot_lag_age > 0 && cfg->cdc_mark_published &&
        !cfg->cdc_delete_after_insert) {
        int64_t unrelayed_ms;
        if ((st = pb_slot_unrelayed_age(r->conn, cfg->cdc_slot, &unrelayed_ms, err)) != PB_OK)
            return st;
        if (unrelayed_ms > age_ms)
            age_ms = unrelayed_ms;
    }
    return pb_slot_guard_measure(&r->guard, r->conn, age_ms, err);
}

/* --drain: writes a marker into the WAL; once the stream reaches it, everything committed
 * before it has been relayed. A marker that cannot be written is an error, not a silent wait. */
static pb_status_t cdc_drained(pb_capture_t *cap, bool *done, pb_error_t *err)
{
    cdc_capture_t *r = (cdc_capture_t *)cap;
    *done = false;
    if (r->mark_in_flight || r->n_marks || r->queued_lsn)
        return PB_OK;
    /* events set aside that are due are relayed first (those not due stay for later) */
    if (r->deferred_rows && pb_monotonic_ms() >= r->deferred_due_ms)
        return PB_OK;
    bool idle = !r->in_txn && !r->replay && r->b->n == 0 && next_buf(r)->n == 0;
    if (r->drain_marker_seen && idle) {
        *done = true;
        return PB_OK;
    }
    if (r->drain_failed_lsn) {
        uint64_t reached = r->stream.received_lsn > r->stream.keepalive_end
                               ? r->stream.received_lsn : r->stream.keepalive_end;
        if ((reached >= r->drain_failed_lsn && idle) ||
            pb_monotonic_ms() - r->drain_failed_at >= DRAIN_FAILED_WAIT_MS) {
            *err = r->drain_failed_err;
            return PB_FATAL;
        }
        return PB_OK;
    }
    if (r->drain_marker_sent)
        return PB_OK;
    unsigned char rnd[16];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return pb_fail(err, PB_FATAL, "write the drain marker: no random bytes for its nonce");
    for (size_t i = 0; i < sizeof rnd; i++)
        snprintf(r->drain_nonce + 2 * i, 3, "%02x", rnd[i]);
    const char *params[1] = {r->drain_nonce};
    PGresult *res = PQexecParams(r->conn, "SELECT postbox.emit_drain_marker($1)", 1, NULL, params,
                                 NULL, NULL, 0);
    pb_status_t st = pb_pg_check(r->conn, res, PGRES_TUPLES_OK, "write the drain marker", err);
    if (st == PB_FATAL) {
        /* the error once the stream has passed what was committed before it */
        r->drain_failed_err = *err;
        int64_t lsn = 0;
        if (pb_pg_query_int64(r->conn, "SELECT pg_current_wal_lsn() - '0/0'", "read the WAL position",
                              &lsn, NULL, err) != PB_OK || lsn <= 0) {
            *err = r->drain_failed_err; /* the marker's error is the one to report */
            return PB_FATAL;
        }
        r->drain_failed_lsn = (uint64_t)lsn;
        r->drain_failed_at = pb_monotonic_ms();
        return PB_OK;
    }
    if (st != PB_OK)
        return st;
    PQclear(res);
    r->drain_marker_sent = true;
    return PB_OK;
}

/* ---- events set aside until due (postbox.cdc_deferred) ---------------------------------------- */

/* When the slot's next row is due, in ms from now (NULL: the slot has none). */
static const char deferred_next_sql[] =
    "SELECT (extract(epoch FROM min(due_at) - now()) * 1000)::float8 "
    "FROM postbox.cdc_deferred WHERE slot = $1";

/* The due rows of the slot ($1) whose transactions the slot's confirmed position has passed, in
 * publish order, at most $2. */
static const char deferred_claim_sql[] =
    "SELECT id, outbox_id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, "
    "       destination, created_at_us, sequence, "
    "       (extract(epoch FROM available_at) * 1000000)::bigint, "
    "       (extract(epoch FROM expires_at) * 1000000)::bigint, masked "
    "FROM postbox.cdc_deferred "
    "WHERE slot = $1 AND due_at <= now() "
    "  AND commit_lsn < (SELECT confirmed_flush_lsn FROM pg_replication_slots "
    "                    WHERE slot_name = $1) "
    "ORDER BY due_at, id LIMIT $2::int";

/* Which events of a batch ($2 aggregate types, $3 ids, in batch order) have rows of their
 * aggregate set aside: their 1-based positions. */
static const char deferred_behind_sql[] =
    "SELECT k.i FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS k(t, a, i) "
    "WHERE EXISTS (SELECT FROM postbox.cdc_deferred d WHERE d.slot = $1 "
    "              AND d.aggregate_type = k.t AND d.aggregate_id = k.a)";

/* Sets events aside, in batch order (the table's ids follow it). Each is due at its available_at,
 * or at the latest due time of the events of its aggregate before it (set aside already, or
 * earlier in the batch), and not before now: due times never decrease along an aggregate's
 * rows, so the claim's (due_at, id) order is the aggregate's order. An event met again after a
 * restart (the stream replays what was not confirmed) is there already. Its outbox row, when
 * there is one, waits too (for postbox status and the metrics: the event is not due). Returns
 * in how many ms the first of them is due. With relay.mask_stored the payload and headers are
 * the masked ones (masked: published as they are); the parked outbox row keeps the producer's
 * texts while it is pending, as in the poll capture, and is stored masked once published. */
static const char deferred_insert_sql[] =
    "WITH f AS (SELECT * FROM unnest($2::uuid[], $3::bigint[], $4::text[], $5::text[], "
    "               $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::bigint[], "
    "               $12::bigint[], $13::bigint[], $14::pg_lsn[], $15::bool[]) WITH ORDINALITY "
    "           AS f(event_id, outbox_id, aggregate_type, aggregate_id, event_type, payload, "
    "                headers, destination, created_us, sequence, available_us, expires_us, "
    "                commit_lsn, masked, ord)), "
    "g AS (SELECT f.*, 'epoch'::timestamptz + f.available_us * interval '1 microsecond' AS available_at, "
    "             'epoch'::timestamptz + f.expires_us * interval '1 microsecond' AS expires_at "
    "      FROM f), "
    "h AS (SELECT g.*, greatest(max(g.available_at) OVER (PARTITION BY g.aggregate_type, "
    "                              g.aggregate_id ORDER BY g.ord), "
    "                           (SELECT max(d.due_at) FROM postbox.cdc_deferred d "
    "                            WHERE d.slot = $1 AND d.aggregate_type = g.aggregate_type "
    "                              AND d.aggregate_id = g.aggregate_id), "
    "                           now()) AS due_at "
    "      FROM g), "
    "ins AS (INSERT INTO postbox.cdc_deferred (slot, event_id, outbox_id, aggregate_type, "
    "            aggregate_id, event_type, payload, headers, destination, created_at_us, "
    "            sequence, available_at, expires_at, due_at, commit_lsn, masked) "
    "        SELECT $1, event_id, nullif(outbox_id, 0), aggregate_type, aggregate_id, "
    "               event_type, payload, headers, destination, created_us, "
    "               nullif(sequence, 0), available_at, expires_at, due_at, commit_lsn, masked "
    "        FROM h ORDER BY ord ON CONFLICT (slot, event_id) DO NOTHING RETURNING 1), "
    "park AS (UPDATE postbox.outbox o SET waiting = true, next_attempt_at = h.due_at FROM h "
    "         WHERE h.outbox_id > 0 AND o.id = h.outbox_id RETURNING 1) "
    "SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM park), "
    "       (extract(epoch FROM (SELECT min(due_at) FROM h) - now()) * 1000)::float8";

/* The rows of a batch from the table are done ($3: published or dead-lettered): they leave it,
 * and the outbox rows of the published ones ($1, as pb_outbox_ids_literal wrote them: always an
 * array here) move to the history. $2: the slot. */
#define DEFERRED_DONE_TAIL                                                                      \
    ", done AS (DELETE FROM postbox.cdc_deferred d WHERE d.slot = $2 "                          \
    "           AND d.id = ANY($3::bigint[]) RETURNING 1) "                                     \
    "SELECT (SELECT count(*) FROM done), (SELECT count(*) FROM kept)"
static const char deferred_done_sql[] =
    "WITH " PB_OUTBOX_MOVE_PUBLISHED_CTES(PB_OUTBOX_IDS_IN_ARRAY("o")) DEFERRED_DONE_TAIL;
/* relay.mask_stored: the same, the rows that $4..$6 name stored with the masked texts */
static const char deferred_done_masked_sql[] =
    "WITH " PB_OUTBOX_MOVE_PUBLISHED_MASKED_CTES(PB_OUTBOX_IDS_IN_ARRAY("o"), "$4", "$5", "$6")
    DEFERRED_DONE_TAIL;

/* ms from now -> the monotonic time it is due at */
static int64_t due_in(double ms)
{
    if (ms > 1e12) /* some 30 years: later than anything the relay will wait for at once */
        ms = 1e12;
    return pb_monotonic_ms() + (ms > 0 ? (int64_t)ms + 1 : 0);
}

/* Reads whether the slot has rows set aside, and when the next is due. */
static pb_status_t load_deferred(cdc_capture_t *r, pb_error_t *err)
{
    const char *params[1] = {r->base.cfg->cdc_slot};
    PGresult *res = PQexecParams(r->dconn, deferred_next_sql, 1, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(r->dconn, res, PGRES_TUPLES_OK, "read the events set aside", err);
    if (st != PB_OK)
        return st;
    r->deferred_rows = !PQgetisnull(res, 0, 0);
    r->deferred_due_ms = r->deferred_rows ? due_in(strtod(PQgetvalue(res, 0, 0), NULL)) : INT64_MAX;
    PQclear(res);
    return PB_OK;
}

/* Claims the due rows into dres / devents (dn: how many). */
static pb_status_t claim_deferred(cdc_capture_t *r, pb_error_t *err)
{
    char limit[24];
    snprintf(limit, sizeof limit, "%lld", (long long)r->base.cfg->relay_batch_size);
    const char *params[2] = {r->base.cfg->cdc_slot, limit};
    release_deferred_batch(r);
    PGresult *res = PQexecParams(r->dconn, deferred_claim_sql, 2, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(r->dconn, res, PGRES_TUPLES_OK, "claim the events set aside", err);
    if (st != PB_OK)
        return st;
    size_t n = (size_t)PQntuples(res);
    if (n > r->dcap) {
        r->devents = pb_realloc(r->devents, n * sizeof *r->devents);
        r->dids = pb_realloc(r->dids, n * sizeof *r->dids);
        r->dcap = n;
    }
    for (size_t i = 0; i < n; i++) {
        int k = (int)i;
        pb_event_t *ev = &r->devents[i];
        memset(ev, 0, sizeof *ev);
        r->dids[i] = strtoll(PQgetvalue(res, k, 0), NULL, 10);
        ev->id = PQgetisnull(res, k, 1) ? 0 : strtoll(PQgetvalue(res, k, 1), NULL, 10);
        ev->event_id = PQgetvalue(res, k, 2);
        ev->aggregate_type = PQgetvalue(res, k, 3);
        ev->aggregate_id = PQgetvalue(res, k, 4);
        ev->event_type = PQgetvalue(res, k, 5);
        ev->payload = PQgetvalue(res, k, 6);
        ev->payload_len = (size_t)PQgetlength(res, k, 6);
        ev->headers = PQgetisnull(res, k, 7) ? NULL : PQgetvalue(res, k, 7);
        ev->destination = PQgetisnull(res, k, 8) ? NULL : PQgetvalue(res, k, 8);
        ev->created_at_us = strtoll(PQgetvalue(res, k, 9), NULL, 10);
        ev->sequence = PQgetisnull(res, k, 10) ? 0 : strtoll(PQgetvalue(res, k, 10), NULL, 10);
        ev->available_at_us = PQgetisnull(res, k, 11) ? 0 : strtoll(PQgetvalue(res, k, 11), NULL, 10);
        ev->expires_at_us = PQgetisnull(res, k, 12) ? 0 : strtoll(PQgetvalue(res, k, 12), NULL, 10);
        ev->masked = PQgetvalue(res, k, 13)[0] == 't';
        pb_event_fix_times(ev);
    }
    r->dres = res;
    r->dn = n;
    return PB_OK;
}

/* behind[i]: whether the aggregate of event i of b has rows set aside (asked only while the
 * slot may have some). */
static pb_status_t find_behind(cdc_capture_t *r, pb_error_t *err)
{
    cdc_batch_t *b = r->b;
    if (b->n > r->cap_behind) {
        r->behind = pb_realloc(r->behind, b->n * sizeof *r->behind);
        r->cap_behind = b->n;
    }
    memset(r->behind, 0, b->n * sizeof *r->behind);
    if (!r->deferred_rows)
        return PB_OK;
    pb_buf_t types = {0}, ids = {0};
    for (size_t i = 0; i < b->n; i++) {
        pb_buf_puts(&types, i ? "," : "{");
        pb_buf_append_array_text(&types, b->events[i].aggregate_type);
        pb_buf_puts(&ids, i ? "," : "{");
        pb_buf_append_array_text(&ids, b->events[i].aggregate_id);
    }
    pb_buf_putc(&types, '}');
    pb_buf_putc(&ids, '}');
    const char *params[3] = {r->base.cfg->cdc_slot, types.data, ids.data};
    PGresult *res = PQexecParams(r->dconn, deferred_behind_sql, 3, NULL, params, NULL, NULL, 0);
    pb_buf_free(&types);
    pb_buf_free(&ids);
    pb_status_t st = pb_pg_check(r->dconn, res, PGRES_TUPLES_OK,
                                 "look for events set aside before", err);
    if (st != PB_OK)
        return st;
    for (int k = 0; k < PQntuples(res); k++) {
        long long i = strtoll(PQgetvalue(res, k, 0), NULL, 10);
        if (i >= 1 && (size_t)i <= b->n)
            r->behind[i - 1] = true;
    }
    PQclear(res);
    return PB_OK;
}

/* Appends a bigint element to an array literal, NULL for 0. */
static void put_int_or_null(pb_buf_t *a, size_t i, int64_t v)
{
    pb_buf_puts(a, i ? "," : "{");
    if (v)
        pb_buf_printf(a, "%lld", (long long)v);
    else
        pb_buf_puts(a, "NULL");
}

static void put_text_or_null(pb_buf_t *a, size_t i, const char *v)
{
    pb_buf_puts(a, i ? "," : "{");
    if (v)
        pb_buf_append_array_text(a, v);
    else
        pb_buf_puts(a, "NULL");
}

/* Writes the events of b deferred by the driver to the table, before the batch's LSN may be
 * confirmed. */
static pb_status_t write_deferred(cdc_capture_t *r, const pb_result_t *results, pb_error_t *err)
{
    enum { N_COLS = 14 };
    pb_buf_t cols[N_COLS] = {{0}};
    size_t n = 0;
    for (size_t i = 0; i < r->b->n; i++) {
        if (results[i].outcome != PB_OUT_DEFERRED)
            continue;
        const pb_event_t *ev = &r->b->events[i];
        char lsn[32];
        pb_lsn_format(r->b->items[i].commit_lsn, lsn, sizeof lsn);
        put_text_or_null(&cols[0], n, ev->event_id);
        put_int_or_null(&cols[1], n, ev->id);
        put_text_or_null(&cols[2], n, ev->aggregate_type);
        put_text_or_null(&cols[3], n, ev->aggregate_id);
        put_text_or_null(&cols[4], n, ev->event_type);
        put_text_or_null(&cols[5], n, ev->payload);
        put_text_or_null(&cols[6], n, ev->headers);
        put_text_or_null(&cols[7], n, ev->destination);
        pb_buf_printf(&cols[8], "%s%lld", n ? "," : "{", (long long)ev->created_at_us);
        put_int_or_null(&cols[9], n, ev->sequence);
        put_int_or_null(&cols[10], n, ev->available_at_us);
        put_int_or_null(&cols[11], n, ev->expires_at_us);
        put_text_or_null(&cols[12], n, lsn);
        /* relay.mask_stored: the driver masked it (precheck), as it will be published */
        pb_buf_printf(&cols[13], "%s%s", n ? "," : "{", ev->store_masked ? "t" : "f");
        n++;
    }
    const char *params[N_COLS + 1] = {r->base.cfg->cdc_slot};
    for (int c = 0; c < N_COLS; c++) {
        pb_buf_putc(&cols[c], '}');
        params[c + 1] = cols[c].data;
    }
    PGresult *res = PQexecParams(r->dconn, deferred_insert_sql, N_COLS + 1, NULL, params, NULL,
                                 NULL, 0);
    for (int c = 0; c < N_COLS; c++)
        pb_buf_free(&cols[c]);
    pb_status_t st = pb_pg_check(r->dconn, res, PGRES_TUPLES_OK, "set delayed events aside", err);
    if (st != PB_OK)
        return st;
    int64_t due = due_in(strtod(PQgetvalue(res, 0, 2), NULL));
    log_debug(FAC, "set %zu event(s) aside until due (%s new)", n, PQgetvalue(res, 0, 0));
    PQclear(res);
    if (!r->deferred_rows || due < r->deferred_due_ms)
        r->deferred_due_ms = due;
    r->deferred_rows = true;
    return PB_OK;
}

/* The outcomes of a batch from the table, in one transaction: dead letters written, published
 * and dead rows gone from the table, the outbox rows of the published ones marked. */
static pb_status_t settle_deferred(cdc_capture_t *r, const pb_result_t *results,
                                   const pb_settle_plan_t *plans, pb_error_t *err)
{
    const pb_config_t *cfg = r->base.cfg;
    bool mark = cfg->cdc_mark_published && !cfg->cdc_delete_after_insert;
    size_t n_dead = 0, n_marked = 0, n_done = 0;
    ensure_dead(r, r->dn);
    pb_buf_t done = {0}, marked = {0};
    pb_buf_putc(&done, '{');
    pb_buf_putc(&marked, '{');
    pb_masked_texts_t masked = {0}; /* relay.mask_stored: what the marked rows were published as */
    pb_masked_texts_reset(&masked);
    for (size_t i = 0; i < r->dn; i++) {
        const pb_event_t *ev = &r->devents[i];
        if (plans[i].dead) {
            r->dead_events[n_dead] = ev;
            r->dead_attempts[n_dead] = ev->attempts + (results[i].outcome == PB_OUT_EXPIRED ? 0 : 1);
            r->dead_reasons[n_dead] = plans[i].reason;
            n_dead++;
        } else if (results[i].outcome != PB_OUT_PUBLISHED) {
            continue; /* not decided: stays set aside (retries_in_place makes this not happen) */
        } else if (mark && ev->id > 0) {
            pb_buf_printf(&marked, "%s%lld", n_marked++ ? "," : "", (long long)ev->id);
            if (ev->store_masked)
                pb_masked_texts_add(&masked, ev->id, ev->payload, ev->headers);
        }
        pb_buf_printf(&done, "%s%lld", n_done++ ? "," : "", (long long)r->dids[i]);
    }
    pb_buf_putc(&done, '}');
    pb_buf_putc(&marked, '}');
    pb_masked_texts_end(&masked);
    const char *params[6] = {marked.data, cfg->cdc_slot, done.data,
                             masked.ids.data, masked.payloads.data, masked.headers.data};
    pb_status_t st = pb_pg_exec(r->dconn, "BEGIN", err);
    if (st == PB_OK && n_dead)
        st = pb_dead_letter_events(r->dconn, r->dead_events, r->dead_attempts, r->dead_reasons,
                                   n_dead, err);
    if (st == PB_OK) {
        PGresult *res = masked.count ? PQexecParams(r->dconn, deferred_done_masked_sql, 6, NULL,
                                                    params, NULL, NULL, 0)
                                     : PQexecParams(r->dconn, deferred_done_sql, 3, NULL, params,
                                                    NULL, NULL, 0);
        st = pb_pg_check(r->dconn, res, PGRES_TUPLES_OK, "settle the events set aside", err);
        if (st == PB_OK)
            PQclear(res);
    }
    if (st == PB_OK)
        st = pb_pg_exec(r->dconn, "COMMIT", err);
    pb_buf_free(&done);
    pb_buf_free(&marked);
    pb_masked_texts_free(&masked);
    if (st != PB_OK) {
        if (PQstatus(r->dconn) == CONNECTION_OK)
            PQclear(PQexec(r->dconn, "ROLLBACK")); /* nothing of the batch is written */
        return st;
    }
    release_deferred_batch(r);
    return load_deferred(r, err);
}

/* ---- the capture interface ----------------------------------------------------------------- */

static bool cdc_connected(const pb_capture_t *cap)
{
    const cdc_capture_t *r = (const cdc_capture_t *)cap;
    return r->conn && r->streaming;
}

static void cdc_disconnect(pb_capture_t *cap)
{
    cdc_capture_t *r = (cdc_capture_t *)cap;
    close_stream(r);
    release_deferred_batch(r); /* its rows stay set aside, claimed again */
    pb_error_t ignored; /* the stream replays whatever this mark was for */
    if (r->conn && r->mark_in_flight && finish_mark(r, true, &ignored) != PB_OK)
        drop_conn(r);
    if (r->conn && (PQstatus(r->conn) != CONNECTION_OK || PQstatus(r->dconn) != CONNECTION_OK ||
                    PQtransactionStatus(r->dconn) != PQTRANS_IDLE))
        drop_conn(r);
}

/* The slot must be the relay's own before the stream opens (a missing slot would be created
 * afresh, skipping what it missed) and once it is held (it cannot change under the relay then). */
static pb_status_t check_slot(cdc_capture_t *r, bool streaming, pb_error_t *err)
{
    pb_status_t st = finish_mark(r, true, err);
    if (st == PB_OK)
        st = pb_slot_guard_check(&r->guard, r->conn, streaming, err);
    if (st == PB_FATAL && pb_error_schema_missing(err))
        pb_fail(err, PB_FATAL, "%s (run `postbox init` to upgrade the schema)", err->msg);
    return st;
}

static pb_status_t connect_and_stream(cdc_capture_t *r, pb_error_t *err)
{
    pb_status_t st;
    if (!r->conn && (st = connect_conn(r, err)) != PB_OK)
        return st;
    if (r->streaming)
        return PB_OK;
    if ((st = check_slot(r, false, err)) != PB_OK)
        return st;
    if ((st = open_stream(r, err)) != PB_OK) {
        /* dropped after the check: say so, not merely that it does not exist */
        pb_error_t why;
        if (st == PB_FATAL && check_slot(r, false, &why) == PB_FATAL)
            *err = why;
        return st;
    }
    if ((st = check_slot(r, true, err)) != PB_OK)
        close_stream(r);
    return st;
}

static pb_status_t cdc_connect(pb_capture_t *cap, pb_error_t *err)
{
    cdc_capture_t *r = (cdc_capture_t *)cap;
    pb_status_t st = connect_and_stream(r, err);
    /* The connections outlive a lost stream; when the server went away (a crash, a failover)
     * the slot check finds them dead. Let go of them, so the next attempt connects again, with
     * backoff, to whichever server the DSN leads to now, instead of failing on them forever. */
    if (st == PB_TRANSIENT && r->conn &&
        (PQstatus(r->conn) != CONNECTION_OK || PQstatus(r->dconn) != CONNECTION_OK))
        drop_conn(r);
    return st;
}

static pb_status_t cdc_next(pb_capture_t *cap, pb_capture_batch_t *out, pb_error_t *err)
{
    cdc_capture_t *r = (cdc_capture_t *)cap;
    PB_ASSERT(!r->b_out && !r->d_out);
    out->n = 0;
    out->behind_unsettled = false;
    out->check_due = true;
    out->behind_deferred = NULL;
    if (r->ahead_st != PB_OK) { /* what the read-ahead ran into */
        pb_status_t st = r->ahead_st;
        *err = r->ahead_err;
        r->ahead_st = PB_OK;
        return st;
    }
    pb_status_t st;
    /* events set aside that came due go first: they are older than what the stream holds */
    if (r->deferred_rows && pb_monotonic_ms() >= r->deferred_due_ms) {
        if ((st = claim_deferred(r, err)) != PB_OK)
            return st;
        if (r->dn > 0) {
            r->d_out = true;
            out->events = r->devents;
            out->n = r->dn;
            out->check_due = false; /* due by the database's clock */
            return PB_OK;
        }
        /* none claimable: due ones wait for the slot's confirmed position to pass them */
        release_deferred_batch(r);
        if ((st = load_deferred(r, err)) != PB_OK)
            return st;
        int64_t retry = pb_monotonic_ms() + DEFERRED_RETRY_MS;
        if (r->deferred_rows && r->deferred_due_ms < retry)
            r->deferred_due_ms = retry;
    }
    /* right after a batch, an empty stream returns at once: the driver learns that the backlog
     * is through (--drain writes its marker then) instead of after a whole idle tick; an idle
     * wait ends when the next event set aside is due */
    int64_t wait = r->had_events ? 0 : IDLE_TICK_MS;
    if (r->deferred_rows && r->deferred_due_ms - pb_monotonic_ms() < wait)
        wait = r->deferred_due_ms - pb_monotonic_ms() > 0 ? r->deferred_due_ms - pb_monotonic_ms()
                                                          : 0;
    st = fill(r, wait, false, err);
    if (st != PB_OK)
        return st;
    r->had_events = r->b->n > 0;
    if (r->had_events)
        r->last_event_at = pb_monotonic_ms();
    if (r->b->n == 0) {
        /* the marks catch up; rows that were not visible yet get another try */
        if ((st = flush_marks(r, err)) != PB_OK)
            return st;
        /* nothing pending and between transactions: let the server forget what it has sent,
         * or a quiet outbox on a busy database would hold WAL forever */
        uint64_t safe = r->in_txn || r->replay ? r->last_commit_end : r->stream.keepalive_end;
        if (safe < r->last_commit_end)
            safe = r->last_commit_end;
        return confirm(r, safe, false, err);
    }
    r->b_lsn = r->last_commit_end; /* what the batch covers up to its last complete transaction */
    for (size_t i = 0; i < r->b->n; i++) {
        r->b->events[i] = r->b->items[i].ev;
        r->b->events[i].header_obj = NULL;
    }
    /* the events after an event of their aggregate set aside before wait behind it */
    if ((st = find_behind(r, err)) != PB_OK)
        return st;
    out->behind_deferred = r->deferred_rows ? r->behind : NULL;
    r->b_out = true;
    out->events = r->b->events;
    out->n = r->b->n;
    return PB_OK;
}

static bool cdc_ready(const pb_capture_t *cap)
{
    const cdc_capture_t *r = (const cdc_capture_t *)cap;
    return !r->b_out && r->ahead_st == PB_OK && r->b->n > 0; /* settle made the read-ahead b */
}

static pb_status_t cdc_overlap(pb_capture_t *cap, pb_error_t *err)
{
    (void)err;
    cdc_capture_t *r = (cdc_capture_t *)cap;
    /* not beside a batch from the table: b may hold what an earlier read-ahead took, and the
     * stream's order must stay that of the buffers */
    if (!r->d_out)
        read_ahead(r); /* errors wait for the next batch */
    return PB_OK;
}

static void ensure_dead(cdc_capture_t *r, size_t n)
{
    if (n <= r->cap_dead)
        return;
    r->dead_events = pb_realloc(r->dead_events, n * sizeof *r->dead_events);
    r->dead_attempts = pb_realloc(r->dead_attempts, n * sizeof *r->dead_attempts);
    r->dead_reasons = pb_realloc(r->dead_reasons, n * sizeof *r->dead_reasons);
    r->cap_dead = n;
}

static pb_status_t cdc_settle(pb_capture_t *cap, const pb_result_t *results,
                              const pb_settle_plan_t *plans, pb_error_t *err)
{
    cdc_capture_t *r = (cdc_capture_t *)cap;
    if (r->d_out)
        return settle_deferred(r, results, plans, err);
    PB_ASSERT(r->b_out);
    pb_status_t st;
    size_t n_dead = 0, n_deferred = 0;
    ensure_dead(r, r->b->n);
    for (size_t i = 0; i < r->b->n; i++) {
        PB_ASSERT(results[i].outcome == PB_OUT_PUBLISHED ||
                  results[i].outcome == PB_OUT_DEFERRED || plans[i].dead);
        n_deferred += results[i].outcome == PB_OUT_DEFERRED;
        if (!plans[i].dead)
            continue;
        r->dead_events[n_dead] = &r->b->events[i];
        r->dead_attempts[n_dead] =
            r->b->events[i].attempts + (results[i].outcome == PB_OUT_EXPIRED ? 0 : 1);
        r->dead_reasons[n_dead] = plans[i].reason;
        n_dead++;
    }
    /* the dead letters are written before the LSN that covers them can be confirmed; the
     * connection serves one statement at a time */
    if (n_dead && ((st = finish_mark(r, true, err)) != PB_OK ||
                   (st = pb_dead_letter_events(r->conn, r->dead_events, r->dead_attempts,
                                               r->dead_reasons, n_dead, err)) != PB_OK))
        return st;
    /* so are the events set aside (on their own connection, beside the marks) */
    if (n_deferred && (st = write_deferred(r, results, err)) != PB_OK)
        return st;
    /* earlier marks ran meanwhile: collect them if done (confirming their LSN), then queue or
     * send this batch's; wait only when too many rows queue up behind a slow mark */
    bool wait = r->n_marks - r->n_sent > MARK_QUEUE_BATCHES * (size_t)cap->cfg->relay_batch_size;
    queue_marks(r, results);
    if ((st = finish_mark(r, wait, err)) != PB_OK || (st = send_mark(r, r->b_lsn, false, err)) != PB_OK)
        return st;
    clear_batch(r);
    r->b_out = false;
    r->b = next_buf(r); /* what was read ahead */
    /* the LSN is confirmed with the batch's marks (send_mark, finish_mark); until then a status
     * update repeats the last confirmed position */
    return confirm(r, r->stream.confirmed_lsn, false, err);
}

/* next waits for the stream by itself: only the broker needs a word while idle. */
static pb_status_t cdc_wait(pb_capture_t *cap, pb_capture_tick_fn tick, void *arg,
                            pb_error_t *err)
{
    (void)cap;
    (void)err;
    (void)tick(arg);
    return PB_OK;
}

/* While a failed event is retried in place the stream stands still and the WAL grows: the lag
 * is measured (and its limits watched) all the same. So it is while the driver waits for a
 * broker lost between batches, the stream closed by finish (nothing to confirm then). */
static pb_status_t cdc_keepalive(pb_capture_t *cap, pb_error_t *err)
{
    cdc_capture_t *r = (cdc_capture_t *)cap;
    pb_status_t st = measure_lag(r, err);
    return st == PB_OK && r->streaming ? confirm(r, r->stream.confirmed_lsn, false, err) : st;
}

static pb_status_t cdc_tick(pb_capture_t *cap, pb_error_t *err)
{
    return measure_lag((cdc_capture_t *)cap, err);
}

/* Marks what was relayed, then lets go of the stream: everything unconfirmed is replayed. */
static pb_status_t cdc_finish(pb_capture_t *cap, pb_error_t *err)
{
    cdc_capture_t *r = (cdc_capture_t *)cap;
    pb_status_t st = PB_OK;
    if (r->conn && r->streaming && !r->b_out)
        st = flush_marks(r, err);
    /* the last position is recorded, so the close reports all of it */
    if (st == PB_OK && r->conn && r->streaming && !r->b_out)
        st = confirm(r, r->guard.wanted, true, err);
    close_stream(r);
    return st;
}

static void cdc_free(pb_capture_t *cap)
{
    cdc_capture_t *r = (cdc_capture_t *)cap;
    if (!r)
        return;
    close_stream(r);
    drop_conn(r);
    pb_streamed_free(&r->streamed);
    pb_slot_age_free(&r->age);
    pb_pgo_decoder_free(&r->dec);
    pb_emit_key_clear(&r->emit_key);
    for (int i = 0; i < 2; i++) {
        free(r->bufs[i].items);
        free(r->bufs[i].events);
    }
    for (size_t i = 0; i < r->n_marks; i++)
        free_mark(&r->marks[i]);
    free(r->marks);
    free(r->mark_ids);
    pb_masked_texts_free(&r->mark_texts);
    free(r->dead_events);
    free(r->dead_attempts);
    free(r->dead_reasons);
    free(r->devents);
    free(r->dids);
    free(r->behind);
    pb_buf_free(&r->ids);
    free(r);
}

static const pb_capture_ops_t cdc_ops = {
    .name = "cdc",
    .retries_in_place = true,
    .connect = cdc_connect,
    .connected = cdc_connected,
    .disconnect = cdc_disconnect,
    .ready = cdc_ready,
    .next = cdc_next,
    .overlap = cdc_overlap,
    .settle = cdc_settle,
    .wait = cdc_wait,
    .keepalive = cdc_keepalive,
    .tick = cdc_tick,
    .drained = cdc_drained,
    .finish = cdc_finish,
    .free = cdc_free,
};

bool pb_capture_cdc_over_limit(const pb_capture_t *cap, char *why, size_t n)
{
    PB_ASSERT(cap->ops == &cdc_ops);
    const pb_slot_guard_t *g = &((const cdc_capture_t *)cap)->guard;
    if (g->over_limit)
        pb_slot_guard_explain_over(g, why, n);
    return g->over_limit;
}

pb_status_t pb_capture_cdc_give_up(pb_capture_t *cap, pb_error_t *err)
{
    PB_ASSERT(cap->ops == &cdc_ops);
    cdc_capture_t *r = (cdc_capture_t *)cap;
    r->b_out = false; /* its events are replayed by the server, or polled from the outbox */
    release_deferred_batch(r); /* its rows stay set aside */
    return cdc_finish(cap, err);
}

bool pb_capture_cdc_slot_gone(const pb_capture_t *cap)
{
    PB_ASSERT(cap->ops == &cdc_ops);
    return ((const cdc_capture_t *)cap)->guard.slot_gone;
}

pb_status_t pb_capture_cdc_new(const pb_config_t *cfg, volatile sig_atomic_t *stop,
                               pb_capture_t **out, pb_error_t *err)
{
    /* a spill directory that cannot take a file fails at start, not at the first large
     * transaction (the file is unlinked: nothing is left) */
    if (cfg->cdc_stream_in_progress) {
        pb_spill_t *probe;
        if (pb_spill_new(cfg->cdc_spill_dir, 0, &probe, err) != PB_OK)
            return pb_fail(err, PB_FATAL, "%s", err->msg);
        pb_spill_free(probe);
    }
    cdc_capture_t *r = pb_malloc(sizeof *r);
    memset(r, 0, sizeof *r);
    r->base = (pb_capture_t){.ops = &cdc_ops, .cfg = cfg, .stop = stop};
    r->b = &r->bufs[0];
    pb_slot_guard_init(&r->guard, cfg);
    pb_slot_age_init(&r->age);
    r->deferred_due_ms = INT64_MAX;
    pb_pgo_decoder_init(&r->dec);
    pb_streamed_init(&r->streamed, cfg->cdc_spill_dir);
    pb_log_limit_init(&r->nontxn_log, NONTXN_LOG_INTERVAL_MS);
    *out = &r->base;
    return PB_OK;
}
