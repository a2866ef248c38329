#include "relay/driver.h"

#include <stdlib.h>
#include <string.h>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/log_limit.h"
#include "common/retry.h"
#include "common/str.h"
#include "metrics/metrics.h"
#include "relay/holdback.h"
#include "relay/mask.h"
#include "relay/publish_span.h"

#define FAC "relay"
#define TOTALS_LOG_INTERVAL_MS 10000
#define KEEPALIVE_MS 500
#define UNFIT_LOG_INTERVAL_MS 10000 /* values dropped as unfit for a [mask] rule: one record */
#define EXPIRED_LOG_INTERVAL_MS 10000 /* events that expired before they went out: one record */
#define REASON_MAX (sizeof ((pb_result_t *)0)->error + 64)
#define FAILURE_REASONS 3 /* distinct reasons a failed batch's warning names */

typedef struct driver {
    const pb_config_t *cfg;
    volatile sig_atomic_t *stop;
    pb_capture_t *cap;
    pb_sink_t *snk;
    pb_mask_t *mask; /* the [mask] rules, applied before any sink sees an event */
    pb_otlp_t *otlp; /* relay.otlp_endpoint's exporter, NULL when off */
    pb_publish_span_t span; /* the span of the send in hand */
    pb_log_limit_t unfit_log;
    pb_log_limit_t expired_log;
    bool sink_up;
    bool sink_was_up; /* connected once: a later loss is a loss, not the start */
    pb_retry_t sink_retry; /* the backoff of the sink's connects */
    pb_holdback_t hold;
    /* per event of the batch in hand */
    size_t cap_events;
    pb_result_t *results;
    pb_settle_plan_t *plans;
    char (*reasons)[REASON_MAX];
    bool *final;        /* its outcome is decided (in-place retries skip it) */
    bool *checked;      /* masked and checked by the sink */
    pb_masked_t *masked; /* its masked payload and headers, until the batch is released */
    size_t *rejected;   /* indexes of the events check refused */
    size_t *retries;    /* indexes of the events that failed before */
    size_t *deferred;   /* indexes of the events deferred by precheck */
    /* the published events of the last batch decided, not yet counted in the metrics nor
     * logged: per event a double (ms from commit to confirm), then "event_id\0event_type\0".
     * Reported once the next batch is sent, while the broker works on it, so that per-event
     * logging does not stand between two batches. */
    pb_buf_t unreported;
    size_t n_unreported;
    /* totals for the periodic log line */
    uint64_t published, retried, dead, expired, deferred_total, logged_published;
    int64_t logged_at;
} driver_t;

static void log_totals(driver_t *d, bool force)
{
    int64_t now = pb_monotonic_ms();
    if (!force && now - d->logged_at < TOTALS_LOG_INTERVAL_MS)
        return;
    uint64_t delta = d->published - d->logged_published;
    double secs = (double)(now - d->logged_at) / 1000.0;
    if (delta || force)
        log_info(FAC, "published %llu events in %.1f s (%.0f/s); totals: published %llu, "
                      "retried %llu, dead-lettered %llu (expired %llu), set aside until due %llu",
                 (unsigned long long)delta, secs, secs > 0 ? (double)delta / secs : 0.0,
                 (unsigned long long)d->published, (unsigned long long)d->retried,
                 (unsigned long long)d->dead, (unsigned long long)d->expired,
                 (unsigned long long)d->deferred_total);
    d->logged_published = d->published;
    d->logged_at = now;
}

/* Waits ms (or until stop); with keep, keeps the capture alive meanwhile (a replication stream
 * that hears nothing from its client is dropped by the server). */
static pb_status_t wait_keeping(driver_t *d, int64_t ms, bool keep, pb_error_t *err)
{
    int64_t until = pb_monotonic_ms() + ms;
    while (!*d->stop) {
        int64_t left = until - pb_monotonic_ms();
        if (left <= 0)
            break;
        pb_nap(d->stop, keep && left > KEEPALIVE_MS ? KEEPALIVE_MS : left);
        pb_otlp_poll(d->otlp);
        pb_status_t st;
        if (keep && (st = d->cap->ops->keepalive(d->cap, err)) != PB_OK)
            return st;
    }
    return PB_OK;
}

static pb_status_t wait_keeping_alive(void *arg, int64_t ms, pb_error_t *err)
{
    return wait_keeping(arg, ms, true, err);
}

static pb_status_t sink_connect(void *arg, pb_error_t *err)
{
    pb_sink_t *snk = arg;
    return snk->ops->connect(snk, err);
}

/* Connects the sink, retrying transient failures with backoff (keeping the capture alive with
 * keep). PB_TRANSIENT only when stopped. */
static pb_status_t connect_sink(driver_t *d, bool keep, pb_error_t *err)
{
    char what[64];
    snprintf(what, sizeof what, "the %s broker", d->snk->ops->name);
    d->sink_retry.fac = FAC;
    d->sink_retry.what = what;
    d->sink_retry.cap_ms = d->cfg->relay_reconnect_cap;
    d->sink_retry.stop = d->stop;
    d->sink_retry.wait = keep ? wait_keeping_alive : NULL;
    d->sink_retry.wait_arg = d;
    pb_status_t st = pb_retry_connect(&d->sink_retry, sink_connect, d->snk, err);
    d->sink_up = st == PB_OK;
    return st;
}

static void ensure_capacity(driver_t *d, size_t n)
{
    if (n <= d->cap_events)
        return;
    d->results = pb_realloc(d->results, n * sizeof *d->results);
    d->plans = pb_realloc(d->plans, n * sizeof *d->plans);
    d->reasons = pb_realloc(d->reasons, n * sizeof *d->reasons);
    d->final = pb_realloc(d->final, n * sizeof *d->final);
    d->checked = pb_realloc(d->checked, n * sizeof *d->checked);
    d->masked = pb_realloc(d->masked, n * sizeof *d->masked);
    memset(d->masked + d->cap_events, 0, (n - d->cap_events) * sizeof *d->masked);
    d->rejected = pb_realloc(d->rejected, n * sizeof *d->rejected);
    d->retries = pb_realloc(d->retries, n * sizeof *d->retries);
    d->deferred = pb_realloc(d->deferred, n * sizeof *d->deferred);
    d->cap_events = n;
}

static bool same_aggregate(const pb_event_t *a, const pb_event_t *b)
{
    return strcmp(a->aggregate_id, b->aggregate_id) == 0 &&
           strcmp(a->aggregate_type, b->aggregate_type) == 0;
}

/* Logs, at a bounded rate, that masking dropped values of ev that a rule could not apply to. */
static void log_unfit(driver_t *d, const pb_event_t *ev, const pb_mask_unfit_t *unfit)
{
    uint64_t held;
    if (!pb_log_limit_pass(&d->unfit_log, pb_monotonic_ms(), &held))
        return;
    log_warn_f(FAC,
               PB_FIELDS(PB_LF_STR("event_id", ev->event_id),
                         PB_LF_STR("event_type", ev->event_type), PB_LF_NUM("dropped", unfit->n),
                         PB_LF_NUM("events_not_logged", held)),
               "[mask]: %zu value(s) that a rule could not apply to were dropped, not published "
               "(%s)",
               unfit->n, unfit->first);
}

/* Masks and checks every untried event of the batch once (checked[i] remembers it): what every
 * sink publishes is the masked payload and headers; an event that cannot be masked or that the
 * sink can never publish is rejected, and the later untried events of its aggregate are held
 * back, so that they follow its dead letter instead of overtaking it. */
static void check_untried(driver_t *d, const pb_capture_batch_t *b)
{
    size_t n_rejected = 0;
    for (size_t i = 0; i < b->n; i++) {
        pb_result_t *r = &d->results[i];
        const pb_event_t *ev = &b->events[i];
        if (r->outcome != PB_OUT_UNTRIED)
            continue;
        for (size_t k = 0; k < n_rejected && r->outcome == PB_OUT_UNTRIED; k++)
            if (same_aggregate(&b->events[d->rejected[k]], ev))
                r->outcome = PB_OUT_HELD;
        if (r->outcome != PB_OUT_UNTRIED || d->checked[i])
            continue;
        d->checked[i] = true;
        bool masked = pb_mask_event(d->mask, &b->events[i], &d->masked[i], r);
        if (masked && d->masked[i].unfit.n)
            log_unfit(d, &b->events[i], &d->masked[i].unfit);
        if (!masked || !pb_sink_prepare(d->snk, &b->events[i], r))
            d->rejected[n_rejected++] = i;
    }
}

/* Whether the event i of b is not to be published before its time: its available_at is still to
 * come (when the capture asks the driver to look), it comes after an event of its aggregate
 * that the capture set aside before, or after one deferred earlier in this batch (deferred[0..n)). */
static bool not_due(const pb_capture_batch_t *b, size_t i, int64_t now_us, const size_t *deferred,
                    size_t n_deferred)
{
    const pb_event_t *ev = &b->events[i];
    if (b->check_due && ev->available_at_us > now_us)
        return true;
    if (b->behind_deferred && b->behind_deferred[i])
        return true;
    for (size_t k = 0; k < n_deferred; k++)
        if (same_aggregate(&b->events[deferred[k]], ev))
            return true;
    return false;
}

/* Before publishing: an event past its expiry is expired (dead-lettered, never sent; the later
 * events of its aggregate go on); an event not due yet is deferred, and so is every later one of
 * its aggregate in the batch (per-aggregate order); an event behind an unsettled failure of the
 * batches before is held back, and so is one behind an event of its aggregate that failed before
 * (a retry): the batch is sent pipelined, so a retry that fails again would otherwise be
 * overtaken every time. Then each event is checked. */
static void precheck(driver_t *d, const pb_capture_batch_t *b)
{
    size_t n_retries = 0, n_deferred = 0;
    int64_t now_us = pb_wall_us();
    for (size_t i = 0; i < b->n; i++) {
        pb_result_t *r = &d->results[i];
        const pb_event_t *ev = &b->events[i];
        r->outcome = PB_OUT_UNTRIED;
        r->duplicate = false;
        r->error[0] = '\0';
        d->final[i] = false;
        d->checked[i] = false;
        memset(&d->plans[i], 0, sizeof d->plans[i]);
        if (pb_event_expired(ev, now_us)) {
            r->outcome = PB_OUT_EXPIRED;
            continue;
        }
        if (not_due(b, i, now_us, d->deferred, n_deferred)) {
            r->outcome = PB_OUT_DEFERRED;
            d->deferred[n_deferred++] = i;
            /* relay.mask_stored: set aside masked, as it will be published; one that cannot be
             * masked is dead-lettered now (REJECT), never set aside with the producer's texts */
            if (d->cfg->relay_mask_stored)
                (void)pb_mask_event(d->mask, &b->events[i], &d->masked[i], r);
            continue;
        }
        if (b->behind_unsettled && pb_holdback_blocks(&d->hold, ev))
            r->outcome = PB_OUT_HELD;
        for (size_t k = 0; k < n_retries && r->outcome == PB_OUT_UNTRIED; k++)
            if (same_aggregate(&b->events[d->retries[k]], ev))
                r->outcome = PB_OUT_HELD;
        if (ev->attempts > 0)
            d->retries[n_retries++] = i;
    }
    check_untried(d, b);
}

static void note_published(driver_t *d, const pb_event_t *ev, int64_t confirmed_us)
{
    /* a delayed event's latency counts from its available_at: the wait was asked for */
    double delay_ms = (double)(confirmed_us - pb_event_due_us(ev)) / 1000.0;
    const char *id = ev->event_id ? ev->event_id : "", *type = ev->event_type ? ev->event_type : "";
    pb_buf_append(&d->unreported, (const char *)&delay_ms, sizeof delay_ms);
    pb_buf_append(&d->unreported, id, strlen(id) + 1);
    pb_buf_append(&d->unreported, type, strlen(type) + 1);
    d->n_unreported++;
}

/* Counts and logs the published events noted since the last report. */
static void report_published(driver_t *d)
{
    const char *sink = d->snk->ops->name;
    const char *p = d->unreported.data;
    for (size_t i = 0; i < d->n_unreported; i++) {
        double delay_ms;
        memcpy(&delay_ms, p, sizeof delay_ms);
        const char *event_id = p + sizeof delay_ms, *event_type = event_id + strlen(event_id) + 1;
        p = event_type + strlen(event_type) + 1;
        pb_metrics_published(sink, event_type, delay_ms / 1000.0);
        log_debug_f(FAC,
                    PB_FIELDS(PB_LF_STR("event_id", event_id),
                              PB_LF_STR("event_type", event_type),
                              PB_LF_NUM("delay_ms", delay_ms)),
                    "published event %s (%s) %.1f ms after its commit (or its available_at)",
                    event_id, event_type, delay_ms);
    }
    pb_buf_reset(&d->unreported);
    d->n_unreported = 0;
}

/* The failures of one round of a batch, for its one warning: how many, and the first distinct
 * reasons with how often each came (an outage fails every event for the same reason). */
typedef struct failures {
    size_t failed, dead, other;     /* other: failures whose reason is not among the first */
    int attempt_lo, attempt_hi;
    size_t n_reasons;
    struct {
        const char *text; /* a result's error, valid until the batch is released */
        const char *event_id;
        size_t count;
    } reasons[FAILURE_REASONS];
} failures_t;

static void note_failure(failures_t *f, const pb_event_t *ev, const pb_result_t *r, int attempt,
                         bool dead)
{
    f->failed++;
    f->dead += dead;
    if (!f->attempt_lo || attempt < f->attempt_lo)
        f->attempt_lo = attempt;
    if (attempt > f->attempt_hi)
        f->attempt_hi = attempt;
    for (size_t k = 0; k < f->n_reasons; k++)
        if (strcmp(f->reasons[k].text, r->error) == 0) {
            f->reasons[k].count++;
            return;
        }
    if (f->n_reasons == FAILURE_REASONS) {
        f->other++;
        return;
    }
    f->reasons[f->n_reasons].text = r->error;
    f->reasons[f->n_reasons].event_id = ev->event_id ? ev->event_id : "";
    f->reasons[f->n_reasons++].count = 1;
}

/* One warning for the failures of a round, whatever their number (each event is logged at
 * debug level): an outage of the broker logs a line per batch, not one per event. */
static void log_failures(const failures_t *f, size_t batch)
{
    if (!f->failed)
        return;
    pb_buf_t why = {0};
    for (size_t k = 0; k < f->n_reasons; k++)
        pb_buf_printf(&why, "%s%zu x %s (first: event %s)", k ? "; " : "", f->reasons[k].count,
                      f->reasons[k].text, f->reasons[k].event_id);
    if (f->other)
        pb_buf_printf(&why, "; %zu more with other reasons", f->other);
    char attempts[32];
    if (f->attempt_lo == f->attempt_hi)
        snprintf(attempts, sizeof attempts, "attempt %d", f->attempt_lo);
    else
        snprintf(attempts, sizeof attempts, "attempts %d-%d", f->attempt_lo, f->attempt_hi);
    log_warn_f(FAC,
               PB_FIELDS(PB_LF_NUM("failed", f->failed), PB_LF_NUM("batch", batch),
                         PB_LF_NUM("retry", f->failed - f->dead), PB_LF_NUM("dead", f->dead),
                         PB_LF_NUM("attempt", f->attempt_hi)),
               "publish failed for %zu of %zu events of the batch (%zu to retry, %zu "
               "dead-lettered; %s): %s",
               f->failed, batch, f->failed - f->dead, f->dead, attempts, why.data);
    pb_buf_free(&why);
}

/* Logs, at a bounded rate, that ev expired before it could be published. */
static void log_expired(driver_t *d, const pb_event_t *ev, int64_t now_us)
{
    uint64_t held;
    if (!pb_log_limit_pass(&d->expired_log, pb_monotonic_ms(), &held))
        return;
    char at[PB_UTC_TEXT_LEN];
    pb_format_utc_us(ev->expires_at_us, at, sizeof at);
    log_info_f(FAC,
               PB_FIELDS(PB_LF_STR("event_id", ev->event_id),
                         PB_LF_STR("event_type", ev->event_type), PB_LF_STR("expires_at", at),
                         PB_LF_NUM("late_ms", (double)(now_us - ev->expires_at_us) / 1000.0),
                         PB_LF_NUM("events_not_logged", held)),
               "event %s (%s) expired at %s before it could be published; dead-lettered with "
               "reason \"" PB_EXPIRED_REASON "\" (%llu more since the last such line)",
               ev->event_id, ev->event_type, at, (unsigned long long)held);
}

/* Decides, per event whose outcome this round brought, between published, another attempt
 * (later, or in place) and a dead letter; counts, logs and measures the failures now and notes
 * the published ones for report_published. Returns the highest attempt number among the events
 * to retry (0: none). */
static int plan(driver_t *d, const pb_capture_batch_t *b)
{
    const pb_config_t *cfg = d->cfg;
    const char *sink = d->snk->ops->name;
    int worst = 0;
    failures_t failures = {0};
    int64_t now_us = pb_wall_us(); /* the batch's confirms are in */
    for (size_t i = 0; i < b->n; i++) {
        if (d->final[i])
            continue;
        const pb_event_t *ev = &b->events[i];
        pb_settle_plan_t *p = &d->plans[i];
        const pb_result_t *r = &d->results[i];
        int attempt = ev->attempts + 1;
        memset(p, 0, sizeof *p);
        switch (r->outcome) {
        case PB_OUT_PUBLISHED:
            note_published(d, ev, now_us);
            d->published++;
            d->final[i] = true;
            break;
        case PB_OUT_EXPIRED:
            p->dead = true;
            p->reason = PB_EXPIRED_REASON;
            pb_metrics_expired(sink, ev->event_type);
            log_expired(d, ev, now_us);
            d->dead++;
            d->expired++;
            d->final[i] = true;
            break;
        case PB_OUT_DEFERRED:
            d->deferred_total++;
            d->final[i] = true;
            break;
        case PB_OUT_REJECT:
            p->dead = true;
            pb_text_copy(d->reasons[i], sizeof d->reasons[i], r->error);
            p->reason = d->reasons[i];
            pb_metrics_publish_failed(sink, ev->event_type, true);
            log_debug_f(FAC,
                        PB_FIELDS(PB_LF_STR("event_id", ev->event_id),
                                  PB_LF_STR("event_type", ev->event_type),
                                  PB_LF_NUM("attempt", attempt), PB_LF_STR("error", r->error)),
                        "event %s (%s) can never be published: %s; dead-lettered", ev->event_id,
                        ev->event_type, r->error);
            note_failure(&failures, ev, r, attempt, true);
            d->dead++;
            d->final[i] = true;
            break;
        case PB_OUT_RETRY:
            if (attempt >= cfg->relay_max_attempts) {
                char reason[REASON_MAX];
                snprintf(reason, sizeof reason, "gave up after %d attempts: %s", attempt,
                         r->error);
                pb_text_copy(d->reasons[i], sizeof d->reasons[i], reason);
                p->dead = true;
                p->reason = d->reasons[i];
                d->dead++;
                d->final[i] = true;
            } else {
                p->retry_delay_ms = pb_backoff_ms(attempt, cfg->relay_backoff_base,
                                                  cfg->relay_backoff_cap, pb_random_unit());
                d->retried++;
                if (attempt > worst)
                    worst = attempt;
            }
            pb_metrics_publish_failed(sink, ev->event_type, p->dead);
            log_debug_f(FAC,
                        PB_FIELDS(PB_LF_STR("event_id", ev->event_id),
                                  PB_LF_STR("event_type", ev->event_type),
                                  PB_LF_NUM("attempt", attempt), PB_LF_STR("error", r->error)),
                        "publish of event %s (%s, attempt %d) failed: %s%s", ev->event_id,
                        ev->event_type, attempt, r->error, p->dead ? "; dead-lettered" : "");
            note_failure(&failures, ev, r, attempt, p->dead);
            break;
        default: /* HELD, or UNTRIED (not sent): left as it is */
            break;
        }
    }
    log_failures(&failures, b->n);
    return worst;
}

/* Whether an in-place retry round is due: an event to retry, or one held behind a decided one. */
static bool retry_due(const driver_t *d, const pb_capture_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        if (!d->final[i])
            return true;
    return false;
}

/* In-place retries (captures that cannot leave an event behind): waits the backoff while
 * keeping the capture alive, reconnects the broker if it went, and makes every undecided event
 * untried again, but the first undecided one of each aggregate only: the round is sent
 * pipelined, and a retry that failed again must not be overtaken by its aggregate's later
 * events (they follow in the next round). */
static pb_status_t prepare_retry(driver_t *d, pb_capture_batch_t *b, int worst, pb_error_t *err)
{
    int64_t now_us = pb_wall_us();
    for (size_t i = 0; i < b->n; i++) {
        if (d->final[i])
            continue;
        if (d->results[i].outcome == PB_OUT_RETRY)
            b->events[i].attempts++;
        d->results[i].outcome = PB_OUT_UNTRIED;
        d->results[i].error[0] = '\0';
        /* retried past its expiry: it expires now (dead-lettered once this round is decided),
         * and the later events of its aggregate need not wait for it */
        if (pb_event_expired(&b->events[i], now_us)) {
            d->results[i].outcome = PB_OUT_EXPIRED;
            continue;
        }
        for (size_t j = 0; j < i; j++) {
            if (!d->final[j] && d->results[j].outcome != PB_OUT_EXPIRED &&
                same_aggregate(&b->events[j], &b->events[i])) {
                d->results[i].outcome = PB_OUT_HELD;
                break;
            }
        }
    }
    int64_t backoff = worst ? pb_backoff_ms(worst, d->cfg->relay_backoff_base,
                                            d->cfg->relay_backoff_cap, pb_random_unit())
                            : 0;
    pb_status_t st;
    if ((st = wait_keeping(d, backoff, true, err)) != PB_OK)
        return st;
    if (!d->sink_up && (st = connect_sink(d, true, err)) != PB_OK)
        return st;
    check_untried(d, b); /* events held behind a rejection were never checked */
    if (*d->stop)
        return pb_fail(err, PB_TRANSIENT,
                       "stopped while retrying (the batch is relayed again at the next start)");
    return PB_OK;
}

/* Before the capture settles the batch: what prepare attached is freed and, unless unmask is
 * false (relay.mask_stored: restore_masks after the settle), the events point at the outbox
 * rows' texts again (a dead letter keeps the row as it was). */
static void release_batch(driver_t *d, pb_capture_batch_t *b, bool unmask)
{
    for (size_t i = 0; i < b->n; i++) {
        pb_sink_release(&b->events[i]);
        if (unmask)
            pb_mask_restore(&b->events[i], &d->masked[i]);
    }
}

static void restore_masks(driver_t *d, pb_capture_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++)
        pb_mask_restore(&b->events[i], &d->masked[i]);
}

/* relay.mask_stored: each event the settle stores is stored masked as it was published, or as it
 * would have been (a dead letter never sent, such as an expired event, is masked now; an event
 * deferred was masked by precheck). One that rules apply to but that cannot be masked is stored
 * with a null payload and no headers, never with the producer's texts (fail closed; its reason
 * says why). An event masked before it was set aside is stored as it is. The texts stay in place
 * until the capture has copied them (restore_masks). */
static void mask_for_storage(driver_t *d, pb_capture_batch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        pb_event_t *ev = &b->events[i];
        pb_masked_t *keep = &d->masked[i];
        bool stores = pb_settle_stores(&d->results[i], &d->plans[i]) ||
                      d->results[i].outcome == PB_OUT_DEFERRED;
        if (stores && ev->masked)
            ev->store_masked = true;
        if (!stores || ev->masked || !pb_mask_applies(d->mask, ev->event_type))
            continue;
        /* a published event was masked before it went out; a dead one may not have been */
        pb_result_t scratch = {0};
        if (!keep->active && d->results[i].outcome != PB_OUT_PUBLISHED &&
            !pb_mask_event(d->mask, ev, keep, &scratch)) {
            keep->active = true;
            keep->orig_payload = ev->payload;
            keep->orig_payload_len = ev->payload_len;
            keep->orig_headers = ev->headers;
            ev->payload = "null";
            ev->payload_len = 4;
            ev->headers = NULL;
        }
        ev->store_masked = keep->active;
    }
}

/* One batch: next, check, publish (with the capture's overlap work), decide, settle. *idle when
 * the capture had nothing. */
static pb_status_t step(driver_t *d, bool *idle, pb_error_t *err)
{
    pb_capture_batch_t b = {0};
    if (!d->cap->ops->ready(d->cap))
        report_published(d); /* next may wait: the events published so far are reported now */
    pb_status_t st = d->cap->ops->next(d->cap, &b, err);
    *idle = st == PB_OK && b.n == 0;
    if (st != PB_OK || b.n == 0)
        return st;
    ensure_capacity(d, b.n);
    if (!b.behind_unsettled)
        pb_holdback_clear(&d->hold);
    precheck(d, &b);
    pb_metrics_batch(b.n);
    for (int round = 1;; round++) {
        pb_sink_batch_t sb = {.events = b.events, .results = d->results, .n = b.n};
        pb_error_t sink_err;
        PB_ASSERT(d->sink_up); /* the loop and prepare_retry connect it first */
        pb_publish_span_begin(&d->span, d->results, b.n);
        pb_status_t sst = d->snk->ops->send(d->snk, &sb, &sink_err);
        /* the capture's database work, the report of the batch before and the span export run
         * while the broker acknowledges the batch */
        pb_status_t ost = round == 1 ? d->cap->ops->overlap(d->cap, err) : PB_OK;
        report_published(d);
        pb_otlp_poll(d->otlp);
        if (sst == PB_OK)
            sst = d->snk->ops->await(d->snk, &sb, &sink_err);
        pb_publish_span_end(&d->span, b.events, d->results);
        if (sst != PB_OK && d->sink_up) {
            log_warn(FAC, "%s broker connection lost: %s", d->snk->ops->name, sink_err.msg);
            d->sink_up = false;
        }
        if (ost != PB_OK) {
            release_batch(d, &b, true);
            return ost; /* nothing of the batch is settled: it is relayed again */
        }
        int worst = plan(d, &b);
        if (!d->cap->ops->retries_in_place || !retry_due(d, &b))
            break;
        if ((st = prepare_retry(d, &b, worst, err)) != PB_OK) {
            release_batch(d, &b, true);
            return st;
        }
    }
    pb_holdback_record(&d->hold, b.events, d->results, b.n);
    bool mask_stored = d->cfg->relay_mask_stored;
    if (mask_stored)
        mask_for_storage(d, &b);
    release_batch(d, &b, !mask_stored);
    st = d->cap->ops->settle(d->cap, d->results, d->plans, err);
    if (mask_stored)
        restore_masks(d, &b);
    return st;
}

static bool idle_tick(void *arg)
{
    driver_t *d = arg;
    pb_otlp_poll(d->otlp); /* the spans of the last batches go out while nothing comes */
    if (!d->sink_up || *d->stop)
        return !*d->stop;
    pb_error_t err;
    if (d->snk->ops->idle(d->snk, &err) != PB_OK) {
        log_warn(FAC, "%s broker connection lost while idle: %s", d->snk->ops->name, err.msg);
        d->sink_up = false;
        return false;
    }
    return true;
}

/* Logs a transient database error and drops the capture's connections (it reconnects). */
static void reconnect_capture(driver_t *d, const pb_error_t *err)
{
    log_warn(FAC, "%s; reconnecting", err->msg);
    d->cap->ops->disconnect(d->cap);
    pb_holdback_clear(&d->hold);
}

pb_status_t pb_driver_run(const pb_config_t *cfg, const pb_relay_opts_t *opts,
                          volatile sig_atomic_t *stop, pb_capture_t *cap, pb_sink_t *snk,
                          pb_error_t *err)
{
    driver_t d = {.cfg = cfg, .stop = stop, .cap = cap, .snk = snk,
                  .unfit_log = {.interval_ms = UNFIT_LOG_INTERVAL_MS},
                  .expired_log = {.interval_ms = EXPIRED_LOG_INTERVAL_MS}};
    pb_status_t st = pb_mask_new(cfg, &d.mask, err);
    if (st != PB_OK)
        return st;
    if ((st = pb_otlp_new(cfg, &d.otlp, err)) != PB_OK) {
        pb_mask_free(d.mask);
        return st;
    }
    pb_publish_span_init(&d.span, cfg, snk->ops->name, d.otlp);
    if (cfg->n_masks)
        log_info(FAC, "masking the payload and headers of %zu event type(s) before publishing "
                      "([mask])%s%s",
                 cfg->n_masks, *cfg->relay_mask_allow_types ? "; by allow-list: " : "",
                 cfg->relay_mask_allow_types);
    d.logged_at = pb_monotonic_ms();
    ensure_capacity(&d, (size_t)cfg->relay_batch_size);
    while (!*stop) {
        bool up = cap->ops->connected(cap);
        pb_metrics_set_state(up, d.sink_up, up);
        if (!up && (st = cap->ops->connect(cap, err)) != PB_OK) {
            if (st == PB_FATAL)
                break;
            continue; /* interrupted: the loop condition ends it */
        }
        if (!d.sink_up) {
            /* the broker was lost: record the outcomes in hand and hold nothing while waiting */
            if (d.sink_was_up && (st = cap->ops->finish(cap, err)) != PB_OK) {
                if (st == PB_FATAL)
                    break;
                reconnect_capture(&d, err);
                continue;
            }
            pb_holdback_clear(&d.hold);
            /* a stream's slot keeps WAL meanwhile: its lag is watched while waiting (keepalive) */
            if ((st = connect_sink(&d, cap->ops->retries_in_place, err)) != PB_OK) {
                if (st == PB_FATAL)
                    break;
                continue;
            }
            if (!d.sink_was_up)
                log_info(FAC, "%s", snk->ops->caps & PB_SINK_DEDUPS_BY_ID
                                        ? "the broker drops a message whose event id it stored "
                                          "within its window: a batch published again after a "
                                          "crash is stored once"
                                        : "a batch published again after a crash reaches the "
                                          "broker twice; the consumer's inbox absorbs the copy");
            d.sink_was_up = true;
            continue; /* the capture may have let go of its connection */
        }
        if ((st = cap->ops->tick(cap, err)) == PB_OK) {
            bool idle;
            st = step(&d, &idle, err);
            if (st != PB_OK)
                report_published(&d); /* before reconnecting, which may take long */
            if (st == PB_OK && idle) {
                bool done = false;
                if (opts->drain && (st = cap->ops->drained(cap, &done, err)) == PB_OK && done) {
                    log_info(FAC, "%s drained", strcmp(cap->ops->name, "cdc") == 0
                                                      ? "stream"
                                                      : "outbox");
                    break;
                }
                if (st == PB_OK)
                    st = cap->ops->wait(cap, idle_tick, &d, err);
            }
        }
        if (st == PB_FATAL)
            break;
        if (st == PB_TRANSIENT) {
            reconnect_capture(&d, err);
            continue;
        }
        log_totals(&d, false);
    }
    if (st != PB_FATAL && cap->ops->connected(cap) && cap->ops->finish(cap, err) != PB_OK)
        log_warn(FAC, "could not record the last batch (it will be published again): %s",
                 err->msg);
    if (st != PB_FATAL)
        st = PB_OK;
    report_published(&d);
    log_totals(&d, true);
    pb_otlp_flush(d.otlp); /* the last spans, for at most relay.otlp_timeout */
    pb_publish_span_free(&d.span);
    pb_otlp_free(d.otlp);
    pb_holdback_free(&d.hold);
    pb_buf_free(&d.unreported);
    free(d.results);
    free(d.plans);
    free(d.reasons);
    free(d.final);
    free(d.checked);
    free(d.masked);
    pb_mask_free(d.mask);
    free(d.rejected);
    free(d.retries);
    free(d.deferred);
    return st;
}
