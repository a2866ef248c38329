#include "relay/slot_guard.h"

#include <stdio.h>
#include <string.h>

#include "cdc/slot_check.h"
#include "cdc/stream.h"
#include "common/clock.h"
#include "common/log.h"
#include "metrics/metrics.h"
#include "store/slot_position.h"

#define FAC "relay.cdc"
/* While the lag stays over the limit, the warning is repeated at most this often. */
#define OVER_LOG_INTERVAL_MS 60000

void pb_slot_guard_init(pb_slot_guard_t *g, const pb_config_t *cfg)
{
    memset(g, 0, sizeof *g);
    g->cfg = cfg;
    g->lag = -1;
    pb_log_limit_init(&g->over_log, OVER_LOG_INTERVAL_MS);
}

static pb_status_t record(pb_slot_guard_t *g, PGconn *conn, uint64_t lsn, pb_error_t *err)
{
    pb_status_t st = pb_slot_position_record(conn, g->cfg->cdc_slot, lsn, err);
    if (st != PB_OK)
        return st;
    g->recorded = lsn;
    g->recorded_at = pb_monotonic_ms();
    return PB_OK;
}

/* The verdict on the slot as loaded: fatal ones become the error, the rest update the record. */
static pb_status_t judge(pb_slot_guard_t *g, PGconn *conn, bool streaming,
                         const pb_slot_state_t *slot, const pb_slot_record_t *rec, pb_error_t *err)
{
    const char *name = g->cfg->cdc_slot;
    pb_slot_verdict_t v = pb_slot_judge(slot, rec);
    g->have_record = rec->exists;
    g->slot_gone = pb_slot_verdict_fatal(v);
    if (g->slot_gone) {
        char why[sizeof err->msg];
        pb_slot_explain(v, name, slot, rec, why, sizeof why);
        return pb_fail(err, PB_FATAL, "%s", why);
    }
    switch (v) {
    case PB_SLOT_NEW: /* the stream creates it (cdc.create_slot) or says it is missing */
        return streaming ? pb_fail(err, PB_TRANSIENT, "replication slot \"%s\" vanished", name)
                         : PB_OK;
    case PB_SLOT_ADOPT:
        if (!streaming)
            return PB_OK; /* recorded once this relay holds the slot */
        {
            char at[32];
            pb_lsn_format(slot->confirmed_lsn, at, sizeof at);
            log_info(FAC, "recording the position of replication slot \"%s\" (%s) in "
                          "postbox.cdc_slot_positions: from now on a replaced or lost slot stops "
                          "the relay",
                     name, at);
        }
        return record(g, conn, slot->confirmed_lsn, err);
    default:
        if (rec->confirmed_lsn > g->recorded)
            g->recorded = rec->confirmed_lsn; /* another relay instance may have gone further */
        return PB_OK;
    }
}

pb_status_t pb_slot_guard_check(pb_slot_guard_t *g, PGconn *conn, bool streaming, pb_error_t *err)
{
    pb_slot_state_t slot;
    pb_slot_record_t rec;
    int64_t lag;
    pb_status_t st = pb_slot_position_load(conn, g->cfg->cdc_slot, &slot, &rec, &lag, err);
    g->unchecked = st == PB_FATAL && pb_error_sqlstate_is(err, PB_SQLSTATE_INSUFFICIENT_PRIVILEGE);
    if (g->unchecked) {
        if (!streaming)
            log_warn(FAC, "cannot check replication slot \"%s\" (%s): a dropped, lost or replaced "
                          "slot would go unnoticed; the relay's role needs SELECT on "
                          "pg_replication_slots and the grants of `postbox init --print-grants`",
                     g->cfg->cdc_slot, err->msg);
        return PB_OK;
    }
    if (st != PB_OK)
        return st;
    return judge(g, conn, streaming, &slot, &rec, err);
}

pb_status_t pb_slot_guard_allow(pb_slot_guard_t *g, PGconn *conn, bool conn_free, uint64_t lsn,
                                bool force, uint64_t *allowed, pb_error_t *err)
{
    if (lsn > g->wanted)
        g->wanted = lsn;
    if (g->unchecked) { /* nothing to keep in step with */
        *allowed = g->wanted;
        return PB_OK;
    }
    bool due = force || pb_monotonic_ms() - g->recorded_at >= PB_SLOT_RECORD_INTERVAL_MS;
    if (g->wanted > g->recorded && conn_free && due) {
        pb_status_t st = record(g, conn, g->wanted, err);
        if (st != PB_OK)
            return st;
    }
    *allowed = g->wanted < g->recorded ? g->wanted : g->recorded;
    return PB_OK;
}

static bool over_bytes(const pb_slot_guard_t *g)
{
    return g->cfg->cdc_max_slot_lag > 0 && g->lag > g->cfg->cdc_max_slot_lag;
}

static bool over_age(const pb_slot_guard_t *g)
{
    return g->cfg->cdc_max_slot_lag_age > 0 && g->age_ms > g->cfg->cdc_max_slot_lag_age;
}

void pb_slot_guard_explain_over(const pb_slot_guard_t *g, char *buf, size_t n)
{
    const pb_config_t *cfg = g->cfg;
    int len = 0;
    buf[0] = '\0';
    if (over_bytes(g))
        len = snprintf(buf, n, "lag %lld bytes is over cdc.max_slot_lag (%lld bytes)",
                       (long long)g->lag, (long long)cfg->cdc_max_slot_lag);
    if (over_age(g) && len >= 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len,
                 "%sage %lld ms (its oldest unconfirmed outbox change) is over "
                 "cdc.max_slot_lag_age (%lld ms)",
                 len ? "; " : "", (long long)g->age_ms, (long long)cfg->cdc_max_slot_lag_age);
}

/* Warns while the lag is over a limit (once a minute at most), says when it is back. */
static void watch_limit(pb_slot_guard_t *g)
{
    const char *name = g->cfg->cdc_slot;
    if (g->cfg->cdc_max_slot_lag <= 0 && g->cfg->cdc_max_slot_lag_age <= 0)
        return;
    bool over = over_bytes(g) || over_age(g);
    pb_metrics_set_slot_lag_over(name, over);
    uint64_t skipped;
    char why[256];
    pb_slot_guard_explain_over(g, why, sizeof why);
    if (over && pb_log_limit_pass(&g->over_log, pb_monotonic_ms(), &skipped))
        log_warn(FAC, "replication slot \"%s\" %s: the server keeps that WAL for the relay (a "
                      "broker outage, a relay that cannot keep up?); if max_slot_wal_keep_size is "
                      "reached the slot is lost",
                 name, why);
    else if (!over && g->over_limit)
        log_info(FAC, "replication slot \"%s\" lag %lld bytes is back under cdc.max_slot_lag, "
                      "its oldest unconfirmed outbox change %lld ms old under "
                      "cdc.max_slot_lag_age",
                 name, (long long)g->lag, (long long)g->age_ms);
    g->over_limit = over;
}

pb_status_t pb_slot_guard_measure(pb_slot_guard_t *g, PGconn *conn, int64_t age_ms,
                                  pb_error_t *err)
{
    pb_slot_state_t slot;
    pb_slot_record_t rec;
    int64_t lag;
    pb_error_t why;
    pb_status_t st = pb_slot_position_load(conn, g->cfg->cdc_slot, &slot, &rec, &lag, &why);
    if (st != PB_OK) {
        log_warn(FAC, "measure the slot lag: %s", why.msg);
        return st == PB_TRANSIENT ? pb_fail(err, st, "%s", why.msg) : PB_OK;
    }
    if ((st = judge(g, conn, true, &slot, &rec, err)) != PB_OK)
        return st;
    if (lag < 0)
        return PB_OK;
    if (age_ms > 0)
        log_info(FAC, "slot \"%s\" lag: %lld bytes behind the current WAL position; the oldest "
                      "unconfirmed outbox change committed %lld ms ago",
                 g->cfg->cdc_slot, (long long)lag, (long long)age_ms);
    else
        log_info(FAC, "slot \"%s\" lag: %lld bytes behind the current WAL position",
                 g->cfg->cdc_slot, (long long)lag);
    g->lag = lag;
    g->age_ms = age_ms;
    pb_metrics_set_slot_lag(g->cfg->cdc_slot, lag);
    pb_metrics_set_slot_lag_age(g->cfg->cdc_slot, age_ms);
    watch_limit(g);
    if (g->over_limit && strcmp(g->cfg->cdc_on_excess_lag, "stop") == 0) {
        char over[256];
        pb_slot_guard_explain_over(g, over, sizeof over);
        return pb_fail(err, PB_FATAL,
                       "replication slot \"%s\" %s, and cdc.on_excess_lag = stop: the relay "
                       "stops (the slot keeps its WAL; see why the relay fell behind, or drop the "
                       "slot with `postbox cdc drop-slot` after `postbox relay --capture poll "
                       "--drain`)",
                       g->cfg->cdc_slot, over);
    }
    return PB_OK;
}
