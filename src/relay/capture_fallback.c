/* cdc with a poll fallback (cdc.on_excess_lag = poll): a capture made of the two others, so
 * that the one driver runs it like any capture. It hands every call to the active capture and,
 * between batches (tick, nothing with the driver), switches:
 *
 * cdc -> poll, when the slot's lag was over cdc.max_slot_lag (or its age over
 * cdc.max_slot_lag_age) at its last measure: the cdc capture finishes (relayed rows marked, their
 * LSN confirmed) and lets go of the stream; during a broker outage too (fb_keepalive): a failed
 * batch retried in place is given up first, unconfirmed and unmarked, and a relay waiting for a
 * broker it lost between batches falls back from the wait; then
 * postbox.cdc_fallback records the fallback, the slot's recorded position is forgotten, the
 * outbox rows set aside in postbox.cdc_deferred go back to the outbox (store/cdc_fallback.h) and
 * the slot is dropped: the server keeps no more WAL for the relay. Every relayed row is marked
 * published, so the poll capture publishes exactly the rows not relayed yet (a row published
 * but not marked when the relay died comes again, as after any crash). postbox.emit events exist
 * only in the WAL: those after the slot's confirmed position when it is dropped, and those written
 * while no slot exists, are lost (emit events already set aside in postbox.cdc_deferred stay there
 * and are published once the relay streams again). Hence the option is for outbox rows.
 *
 * poll -> cdc, once the poll capture has caught up (a batch smaller than relay.batch_size) and
 * the fallback is at least cdc.lag_interval old: a new slot is created with an exported
 * snapshot. The outbox rows pending in that snapshot are not in the slot: the poll capture goes
 * on until each of them is published; everything committed later is in the slot. Then the
 * fallback row is deleted and the cdc capture streams the new slot from its consistent point.
 * Per aggregate, a row pending in the snapshot committed before any row the slot carries, so
 * the stream's first event of an aggregate comes after the poll capture's last one of the
 * snapshot: nothing is lost or reordered. Rows committed after the snapshot that the poll
 * capture published meanwhile are published again from the stream (same event id: the broker's
 * dedup or the consumer's inbox absorbs them; only there is "exactly once" kept). A delayed row
 * (available_at to come) pending in the snapshot would be in neither: the new slot is dropped
 * and the return tried again a cdc.lag_interval later.
 *
 * cdc -> poll too when the cdc capture finds its slot missing, lost or replaced (at connect or
 * between batches; it stops the relay only while a failed event is retried in place): the rows
 * the slot skipped are pending, since the cdc capture marks rows before it confirms their LSN
 * (cdc.mark_published, required), so the fallback publishes them, and drops the slot.
 *
 * A relay that dies anywhere in this starts in the fallback while the row exists (dropping a
 * slot it may have created for a return that did not finish) and in cdc once it is gone. A relay
 * in the fallback whose row another relay of the slot deleted follows it back to cdc. */
#include <stdlib.h>
#include <string.h>

#include "cdc/stream.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/retry.h"
#include "metrics/metrics.h"
#include "relay/capture.h"
#include "store/cdc_fallback.h"
#include "store/pg.h"

#define FAC "relay.cdc"

typedef enum phase { PHASE_CDC, PHASE_POLL, PHASE_RETURNING } phase_t;

typedef struct fallback_capture {
    pb_capture_t base;
    pb_capture_t *active; /* owned: cdc in PHASE_CDC, else poll */
    PGconn *conn;         /* the fallback's own statements */
    phase_t phase;
    bool known;           /* the phase was read from the database since the last connect */
    bool slot_dropped;    /* in the fallback, the old slot (or a return's) is gone */
    bool caught_up;       /* the poll capture's last batch was not full (fewer than it asked for) */
    bool out;             /* a batch is with the driver */
    /* the slot went over its limit during a broker outage (fb_keepalive): the fallback is
     * entered at the next connect (fall_reason says why), a batch in hand given up first */
    bool fall_due;
    bool fall_in_place; /* a batch was with the driver, else it waited for a broker lost */
    char fall_reason[256];
    int64_t since_ms;     /* when the fallback (or the last try to return) began */
    int64_t *snap_ids;    /* PHASE_RETURNING: the rows pending in the new slot's snapshot */
    size_t n_snap;
} fallback_capture_t;

/* The same calls under the active capture's name and retry rule (the driver reads both per
 * batch). */
static const pb_capture_ops_t fallback_cdc_ops, fallback_poll_ops;

static pb_status_t replace_active(fallback_capture_t *f, bool cdc, pb_error_t *err)
{
    pb_capture_t *next;
    pb_status_t st = cdc ? pb_capture_cdc_new(f->base.cfg, f->base.stop, &next, err)
                         : pb_capture_poll_new(f->base.cfg, f->base.stop, &next, err);
    if (st != PB_OK)
        return st;
    pb_capture_free(f->active);
    f->active = next;
    return PB_OK;
}

static void end_return(fallback_capture_t *f)
{
    free(f->snap_ids);
    f->snap_ids = NULL;
    f->n_snap = 0;
}

/* Into the fallback (or on in it, after a restart): recorded, the slot dropped, poll active. */
static pb_status_t enter_poll(fallback_capture_t *f, const char *reason, pb_error_t *err)
{
    const char *slot = f->base.cfg->cdc_slot;
    int64_t kept_emit = 0;
    pb_status_t st = pb_cdc_fallback_enter(f->conn, slot, reason, &kept_emit, err);
    f->slot_dropped = st == PB_OK;
    if (st == PB_TRANSIENT) /* the slot is dropped at a later tick */
        st = PB_OK;
    if (st != PB_OK)
        return st;
    if (strcmp(f->active->ops->name, "poll") != 0 && (st = replace_active(f, false, err)) != PB_OK)
        return st;
    end_return(f);
    f->phase = PHASE_POLL;
    f->base.ops = &fallback_poll_ops;
    pb_metrics_set_cdc_fallback(slot, true);
    /* the slot is given up: no lag it keeps, nothing over a limit (the alerts quieten) */
    pb_metrics_set_slot_lag(slot, 0);
    pb_metrics_set_slot_lag_age(slot, 0);
    pb_metrics_set_slot_lag_over(slot, false);
    f->caught_up = false;
    f->since_ms = pb_monotonic_ms();
    log_warn(FAC, "capture poll active (cdc.on_excess_lag = poll): %s; replication slot \"%s\" "
                  "%s, the outbox rows not yet published are published by polling until the "
                  "relay streams from a new slot (postbox.emit events not relayed before are "
                  "lost; %lld set aside stay for the new slot)",
             reason, slot, f->slot_dropped ? "dropped" : "to be dropped", (long long)kept_emit);
    return PB_OK;
}

/* The active capture lets go of everything in hand, every outcome written. */
static pb_status_t stop_active(fallback_capture_t *f, pb_error_t *err)
{
    pb_status_t st = f->active->ops->connected(f->active) ? f->active->ops->finish(f->active, err)
                                                          : PB_OK;
    f->active->ops->disconnect(f->active);
    return st;
}

/* cdc -> poll; why: the limit exceeded */
static pb_status_t fall_back(fallback_capture_t *f, const char *why, pb_error_t *err)
{
    pb_status_t st = stop_active(f, err);
    if (st != PB_OK)
        return st;
    char reason[320];
    snprintf(reason, sizeof reason, "slot %s", why);
    return enter_poll(f, reason, err);
}

/* poll -> returning: a new slot and the rows its snapshot leaves to the poll capture. */
static pb_status_t try_return(fallback_capture_t *f, pb_error_t *err)
{
    const pb_config_t *cfg = f->base.cfg;
    pb_cdc_stream_t s;
    char snapshot[128];
    uint64_t consistent;
    f->since_ms = pb_monotonic_ms(); /* the next try, if this one does not do, is as far off */
    pb_status_t st = pb_cdc_stream_create_exported(&s, cfg, snapshot, sizeof snapshot, &consistent,
                                                   err);
    if (st != PB_OK) {
        log_warn(FAC, "return to cdc: %s; trying again later", err->msg);
        return st == PB_FATAL ? PB_OK : st;
    }
    bool delayed;
    st = pb_cdc_fallback_pending_in(f->conn, snapshot, &f->snap_ids, &f->n_snap, &delayed, err);
    pb_cdc_stream_close(&s); /* the snapshot is taken; the slot stays */
    char lsn[32];
    pb_lsn_format(consistent, lsn, sizeof lsn);
    if (st == PB_OK && delayed) {
        log_info(FAC, "return to cdc: a delayed event is pending (available_at to come), which "
                      "the new slot would not carry; staying on poll, trying again in %lld ms",
                 (long long)cfg->cdc_lag_interval);
        end_return(f);
        f->slot_dropped = false;
        st = pb_cdc_fallback_drop_slot(f->conn, cfg->cdc_slot, err);
        f->slot_dropped = st == PB_OK;
        return st == PB_TRANSIENT ? PB_OK : st;
    }
    if (st != PB_OK) { /* the new slot is dropped at the next tick, the return tried later */
        end_return(f);
        f->slot_dropped = false;
        if (st == PB_TRANSIENT)
            return st;
        log_warn(FAC, "return to cdc: %s; trying again later", err->msg);
        return PB_OK;
    }
    f->phase = PHASE_RETURNING;
    f->slot_dropped = false;
    log_info(FAC, "return to cdc: created replication slot \"%s\" at %s with an exported "
                  "snapshot; %zu row(s) pending in it are published by polling first",
             cfg->cdc_slot, lsn, f->n_snap);
    return PB_OK;
}

/* The cdc capture takes over (the fallback row is gone). */
static pb_status_t become_cdc(fallback_capture_t *f, const char *why, pb_error_t *err)
{
    pb_status_t st = replace_active(f, true, err);
    if (st != PB_OK)
        return st;
    end_return(f);
    f->phase = PHASE_CDC;
    f->base.ops = &fallback_cdc_ops;
    pb_metrics_set_cdc_fallback(f->base.cfg->cdc_slot, false);
    log_info(FAC, "capture cdc active again: %s; streaming replication slot \"%s\"", why,
             f->base.cfg->cdc_slot);
    return PB_OK;
}

/* returning -> cdc, once every row of the snapshot is published. */
static pb_status_t finish_return(fallback_capture_t *f, pb_error_t *err)
{
    int64_t left;
    pb_status_t st = pb_cdc_fallback_left(f->conn, f->snap_ids, f->n_snap, &left, err);
    if (st != PB_OK || left > 0)
        return st;
    if ((st = stop_active(f, err)) != PB_OK)
        return st;
    if ((st = pb_cdc_fallback_leave(f->conn, f->base.cfg->cdc_slot, err)) != PB_OK)
        return st;
    return become_cdc(f, "every row pending in the new slot's snapshot is published, the stream "
                         "starts at its consistent point",
                      err);
}

/* poll -> cdc when another relay of the slot ended the fallback (its row is gone). */
static pb_status_t follow_return(fallback_capture_t *f, bool *followed, pb_error_t *err)
{
    bool active;
    pb_status_t st = pb_cdc_fallback_active(f->conn, f->base.cfg->cdc_slot, &active, err);
    *followed = st == PB_OK && !active;
    if (!*followed)
        return st;
    if ((st = stop_active(f, err)) != PB_OK)
        return st;
    return become_cdc(f, "another relay of the slot ended the fallback", err);
}

/* A slot missing, lost or replaced under the cdc capture (its PB_FATAL, st): the rows it had not
 * relayed are still pending (cdc.mark_published: it marks before it confirms), so the fallback
 * publishes them instead of the relay stopping; then the poll capture is connected. Other
 * statuses pass. */
static pb_status_t recover_gone_slot(fallback_capture_t *f, pb_status_t st, pb_error_t *err)
{
    if (st != PB_FATAL || f->phase != PHASE_CDC || !pb_capture_cdc_slot_gone(f->active))
        return st;
    log_warn(FAC, "%s", err->msg);
    pb_error_t why;
    if (f->active->ops->connected(f->active) && f->active->ops->finish(f->active, &why) != PB_OK)
        log_warn(FAC, "could not record the last batch before the fallback (it is published "
                      "again): %s",
                 why.msg);
    f->active->ops->disconnect(f->active);
    if ((st = enter_poll(f, "replication slot missing, lost or replaced (said above)", err)) != PB_OK)
        return st;
    return f->active->ops->connect(f->active, err);
}

/* ---- the capture interface: the active capture's, with the switches ---------------------- */

static pb_status_t fb_connect(pb_capture_t *cap, pb_error_t *err)
{
    fallback_capture_t *f = (fallback_capture_t *)cap;
    pb_status_t st;
    if (!f->conn) {
        st = pb_pg_connect_retry(cap->cfg->postgres_dsn, cap->cfg->relay_reconnect_cap, cap->stop,
                                 &f->conn, err);
        if (st != PB_OK)
            return st;
        f->known = false;
    }
    /* the database says which capture: a relay that died in the fallback resumes it, and a
     * standby relay of the slot follows the one that fell back */
    if (!f->known || f->phase == PHASE_CDC) {
        bool active;
        st = pb_cdc_fallback_active(f->conn, cap->cfg->cdc_slot, &active, err);
        if (st == PB_FATAL && pb_error_schema_missing(err))
            pb_fail(err, PB_FATAL, "%s (cdc.on_excess_lag = poll needs schema version 22: run "
                                   "`postbox init`)",
                    err->msg);
        if (st == PB_OK && active && f->phase == PHASE_CDC)
            st = enter_poll(f, "the relay was in its poll fallback", err);
        else if (st == PB_OK && active && !f->known) /* a return under way is started over */
            st = enter_poll(f, "the relay was in its poll fallback", err);
        else if (st == PB_OK && f->phase != PHASE_CDC) /* ended by another relay of the slot */
            st = become_cdc(f, "another relay of the slot ended the fallback", err);
        if (st != PB_OK) {
            PQfinish(f->conn);
            f->conn = NULL;
            return st;
        }
        if (!f->known && f->phase == PHASE_CDC)
            pb_metrics_set_cdc_fallback(cap->cfg->cdc_slot, false);
        f->known = true;
    }
    if (f->fall_due) { /* over the limit during a broker outage (fb_keepalive) */
        char reason[320];
        snprintf(reason, sizeof reason, "slot %s %s", f->fall_reason,
                 f->fall_in_place ? "while a failed batch was retried in place"
                                  : "while the broker was unreachable");
        st = f->phase == PHASE_CDC ? enter_poll(f, reason, err) : PB_OK;
        if (st != PB_OK)
            return st;
        f->fall_due = false;
    }
    return recover_gone_slot(f, f->active->ops->connect(f->active, err), err);
}

static bool fb_connected(const pb_capture_t *cap)
{
    const fallback_capture_t *f = (const fallback_capture_t *)cap;
    return f->conn && f->known && f->active->ops->connected(f->active);
}

static void fb_disconnect(pb_capture_t *cap)
{
    fallback_capture_t *f = (fallback_capture_t *)cap;
    pb_error_t why;
    if (f->fall_due && f->fall_in_place && f->phase == PHASE_CDC &&
        f->active->ops->connected(f->active) &&
        pb_capture_cdc_give_up(f->active, &why) != PB_OK)
        log_warn(FAC, "could not record the batches before the fallback (they are published "
                      "again): %s",
                 why.msg);
    f->active->ops->disconnect(f->active);
    f->out = false;
    if (f->conn && PQstatus(f->conn) != CONNECTION_OK) {
        PQfinish(f->conn);
        f->conn = NULL;
    }
}

static bool fb_ready(const pb_capture_t *cap)
{
    const fallback_capture_t *f = (const fallback_capture_t *)cap;
    return f->active->ops->ready(f->active);
}

static pb_status_t fb_next(pb_capture_t *cap, pb_capture_batch_t *b, pb_error_t *err)
{
    fallback_capture_t *f = (fallback_capture_t *)cap;
    pb_status_t st = f->active->ops->next(f->active, b, err);
    if (st == PB_OK && f->phase != PHASE_CDC)
        f->caught_up = !b->full;
    f->out = st == PB_OK && b->n > 0;
    return st;
}

static pb_status_t fb_overlap(pb_capture_t *cap, pb_error_t *err)
{
    fallback_capture_t *f = (fallback_capture_t *)cap;
    return f->active->ops->overlap(f->active, err);
}

static pb_status_t fb_settle(pb_capture_t *cap, const pb_result_t *results,
                             const pb_settle_plan_t *plans, pb_error_t *err)
{
    fallback_capture_t *f = (fallback_capture_t *)cap;
    f->out = false;
    return f->active->ops->settle(f->active, results, plans, err);
}

static pb_status_t fb_wait(pb_capture_t *cap, pb_capture_tick_fn tick, void *arg, pb_error_t *err)
{
    fallback_capture_t *f = (fallback_capture_t *)cap;
    return f->active->ops->wait(f->active, tick, arg, err);
}

/* A broker outage is the usual way a slot falls behind, and the driver calls keepalive meanwhile:
 * while it retries a failed batch in place, and while it waits for a broker lost between batches
 * (the cdc capture finished then). Over the limit, this PB_TRANSIENT ends the wait: a batch in
 * hand is given up (the driver lets go of it, and fb_disconnect has the cdc capture write what
 * it settled before), and fb_connect falls back. Nothing of the batch was confirmed or marked:
 * the poll capture publishes it again, in id order per aggregate, once the broker is back. */
static pb_status_t fb_keepalive(pb_capture_t *cap, pb_error_t *err)
{
    fallback_capture_t *f = (fallback_capture_t *)cap;
    pb_status_t st = f->active->ops->keepalive(f->active, err);
    if (st != PB_OK || f->phase != PHASE_CDC ||
        !pb_capture_cdc_over_limit(f->active, f->fall_reason, sizeof f->fall_reason))
        return st;
    f->fall_due = true;
    f->fall_in_place = f->out;
    return pb_fail(err, PB_TRANSIENT,
                   "replication slot \"%s\" %s %s: falling back to poll (cdc.on_excess_lag = "
                   "poll)%s",
                   cap->cfg->cdc_slot, f->fall_reason,
                   f->out ? "while a failed batch is retried in place"
                          : "while the broker is unreachable",
                   f->out ? ", the batch given up to the poll capture" : "");
}

static pb_status_t switch_if_due(fallback_capture_t *f, pb_error_t *err);

static pb_status_t fb_tick(pb_capture_t *cap, pb_error_t *err)
{
    fallback_capture_t *f = (fallback_capture_t *)cap;
    pb_status_t st = f->active->ops->tick(f->active, err);
    if (st != PB_OK || f->out)
        return f->out ? st : recover_gone_slot(f, st, err);
    const pb_capture_ops_t *before = cap->ops; /* changes with the active capture */
    if ((st = switch_if_due(f, err)) != PB_OK || cap->ops == before)
        return st;
    /* the driver goes on to next in this round: the new capture must be connected by then */
    return f->active->ops->connect(f->active, err);
}

static pb_status_t switch_if_due(fallback_capture_t *f, pb_error_t *err)
{
    const pb_config_t *cfg = f->base.cfg;
    pb_status_t st;
    switch (f->phase) {
    case PHASE_CDC:
        return pb_capture_cdc_over_limit(f->active, f->fall_reason, sizeof f->fall_reason)
                   ? fall_back(f, f->fall_reason, err)
                   : PB_OK;
    case PHASE_POLL:
        if (!f->slot_dropped) {
            st = pb_cdc_fallback_drop_slot(f->conn, cfg->cdc_slot, err);
            f->slot_dropped = st == PB_OK;
            return st == PB_TRANSIENT ? PB_OK : st;
        }
        if (f->caught_up && pb_monotonic_ms() - f->since_ms >= cfg->cdc_lag_interval) {
            bool followed;
            st = follow_return(f, &followed, err);
            return st != PB_OK || followed ? st : try_return(f, err);
        }
        return PB_OK;
    case PHASE_RETURNING:
        return finish_return(f, err);
    }
    return PB_OK;
}

static pb_status_t fb_drained(pb_capture_t *cap, bool *done, pb_error_t *err)
{
    fallback_capture_t *f = (fallback_capture_t *)cap;
    return f->active->ops->drained(f->active, done, err);
}

static pb_status_t fb_finish(pb_capture_t *cap, pb_error_t *err)
{
    fallback_capture_t *f = (fallback_capture_t *)cap;
    f->out = false;
    return f->active->ops->finish(f->active, err);
}

static void fb_free(pb_capture_t *cap)
{
    fallback_capture_t *f = (fallback_capture_t *)cap;
    if (!f)
        return;
    pb_capture_free(f->active);
    PQfinish(f->conn);
    end_return(f);
    free(f);
}

/* The calls of both tables: only the name and the retry rule differ. */
#define FALLBACK_CALLS           \
    .connect = fb_connect,       \
    .connected = fb_connected,   \
    .disconnect = fb_disconnect, \
    .ready = fb_ready,           \
    .next = fb_next,             \
    .overlap = fb_overlap,       \
    .settle = fb_settle,         \
    .wait = fb_wait,             \
    .keepalive = fb_keepalive,   \
    .tick = fb_tick,             \
    .drained = fb_drained,       \
    .finish = fb_finish,         \
    .free = fb_free

static const pb_capture_ops_t fallback_cdc_ops = {
    .name = "cdc",
    .retries_in_place = true,
    FALLBACK_CALLS
};

static const pb_capture_ops_t fallback_poll_ops = {
    .name = "poll",
    .retries_in_place = false,
    FALLBACK_CALLS
};

pb_status_t pb_capture_fallback_new(const pb_config_t *cfg, volatile sig_atomic_t *stop,
                                    pb_capture_t **out, pb_error_t *err)
{
    fallback_capture_t *f = pb_malloc(sizeof *f);
    memset(f, 0, sizeof *f);
    f->base = (pb_capture_t){.ops = &fallback_cdc_ops, .cfg = cfg, .stop = stop};
    f->phase = PHASE_CDC;
    pb_status_t st = pb_capture_cdc_new(cfg, stop, &f->active, err);
    if (st != PB_OK) {
        free(f);
        return st;
    }
    *out = &f->base;
    return PB_OK;
}
