/* Unit tests for the relay driver (relay/driver.c) without servers: pb_driver_run against a fake
 * capture and a fake sink.
 *
 * The fake capture serves an in-memory outbox and emulates the poll capture (capture_poll.c,
 * store/outbox.h): a claim takes pending rows in id order, skips the rows of the batch in flight,
 * sets aside ("parks") rows behind an earlier event of their aggregate that waits for a retry,
 * and, in `ahead` mode, the next batch is claimed while the current one is published (in overlap,
 * beside the settle of the batch before, whose outcomes it cannot see, while the settle of the
 * batch before that may still be committing: the claim skips the rows of all three), so it is
 * behind_unsettled; outcomes are written one overlap later, or at next / finish, like the settle
 * on its own connection. RETRY makes a row wait
 * for its retry delay (relay.backoff_base/cap = 1 ms here unless a test says otherwise) with
 * attempts + 1; dead and published rows leave; HELD rows stay pending. A variant retries in place
 * (like cdc). Every settle is recorded (results and plans per event). A row may have an
 * available_at and an expires_at (unix microseconds): in `check_due` mode (like the cdc stream) the
 * fake hands them to the driver to judge by its clock, and rows marked `behind` come with
 * behind_deferred set (an earlier event of their aggregate was set aside before); a DEFERRED row
 * is set aside (ROW_SET_ASIDE), as the cdc capture writes it to postbox.cdc_deferred.
 *
 * The fake sink is scripted per event id (publish, fail N times with RETRY, always RETRY, reject
 * in check) and per send number (lose the connection in send or in await, set *stop in await);
 * it records the order in which events were confirmed. One sequence counter orders the sink's
 * confirms and the capture's writes, so a test can tell whether an event was published before or
 * after a dead letter of its aggregate was written. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "config/config.h"
#include "metrics/metrics.h"
#include "relay/capture.h"
#include "relay/driver.h"
#include "sink/sink.h"

#define MAX_ROWS 64
#define MAX_BATCH 16
#define MAX_SETTLES 512
#define MAX_PUBLISHED 512
#define REASON_LEN 400
#define RUN_LIMIT_MS 10000

static int64_t g_seq; /* orders the sink's confirms and the capture's writes */

/* ---- the fake capture ------------------------------------------------------------------------ */

typedef enum row_state { ROW_PENDING, ROW_WAITING, ROW_PUBLISHED, ROW_DEAD, ROW_SET_ASIDE } row_state_t;

typedef struct row {
    int64_t id;
    char event_id[48];
    char agg_type[16];
    char agg_id[16];
    int attempts;
    row_state_t state;
    int64_t available_at_us, expires_at_us;
    bool behind;           /* check_due mode: handed out as behind an event set aside before */
    int64_t due_at;        /* ROW_WAITING: monotonic ms */
    int64_t dead_seq;      /* when its dead letter was written */
    int dead_attempts;
    char dead_reason[REASON_LEN];
} row_t;

typedef struct settle_rec {
    int batch; /* number of the batch (1-based, in the order next handed them out) */
    int64_t seq;
    size_t n;
    int64_t ids[MAX_BATCH];
    int attempts[MAX_BATCH]; /* the event's attempts as the batch held it at settle */
    pb_outcome_t outcomes[MAX_BATCH];
    bool dead[MAX_BATCH];
    int64_t retry_delay_ms[MAX_BATCH];
    char reasons[MAX_BATCH][REASON_LEN];
} settle_rec_t;

typedef struct fake_batch {
    pb_event_t events[MAX_BATCH];
    bool behind[MAX_BATCH];
    size_t rows[MAX_BATCH];
    size_t n;
    int number;
} fake_batch_t;

typedef struct fake_settle {
    size_t n;
    size_t rows[MAX_BATCH];
    pb_outcome_t out[MAX_BATCH];
    bool dead[MAX_BATCH];
    int attempts[MAX_BATCH];
    int64_t delay[MAX_BATCH];
    char reason[MAX_BATCH][REASON_LEN];
} fake_settle_t;

typedef struct fake_cap {
    pb_capture_t base;
    bool ahead_mode; /* claim the next batch in overlap, before this one is settled */
    bool check_due;  /* hand the rows' available_at to the driver (as the cdc stream does) */
    row_t rows[MAX_ROWS];
    size_t n_rows;
    fake_batch_t cur, ahead;
    bool cur_out, ahead_ready;
    int batches;
    /* outcomes settled but not written yet (ahead mode: written beside the next claim, which
     * cannot see them, and committed one claim later, which may not see them either) */
    bool settle_pending;
    fake_settle_t s;
    bool committing_pending;
    fake_settle_t committing;
    bool connected;
    int connects, disconnects, nexts, overlaps, settles, finishes, waits, keepalives, ticks;
    int drained_calls, drained_false;
    int64_t last_settle_seq, last_finish_seq;
    settle_rec_t log[MAX_SETTLES];
    size_t n_log;
    int violations;
    char violation[256];
    int64_t deadline;
} fake_cap_t;

static void cap_violation(fake_cap_t *c, const char *what)
{
    if (!c->violations++)
        snprintf(c->violation, sizeof c->violation, "%s", what);
}

static bool same_agg(const row_t *a, const row_t *b)
{
    return strcmp(a->agg_type, b->agg_type) == 0 && strcmp(a->agg_id, b->agg_id) == 0;
}

static void add_row(fake_cap_t *c, const char *agg_id)
{
    assert_true(c->n_rows < MAX_ROWS);
    row_t *r = &c->rows[c->n_rows];
    memset(r, 0, sizeof *r);
    r->id = (int64_t)c->n_rows + 1;
    snprintf(r->event_id, sizeof r->event_id, "00000000-0000-4000-8000-%012lld", (long long)r->id);
    snprintf(r->agg_type, sizeof r->agg_type, "order");
    snprintf(r->agg_id, sizeof r->agg_id, "%s", agg_id);
    r->state = ROW_PENDING;
    c->n_rows++;
}

/* Adds rows for aggregates given as a string: "ABAB" adds ids 1..4 of aggregates A, B, A, B. */
static void add_rows(fake_cap_t *c, const char *aggs)
{
    for (const char *p = aggs; *p; p++) {
        char id[2] = {*p, '\0'};
        add_row(c, id);
    }
}

static row_t *row_of(fake_cap_t *c, int64_t id)
{
    assert_true(id >= 1 && (size_t)id <= c->n_rows);
    return &c->rows[id - 1];
}

static bool excluded(const fake_cap_t *c, const fake_batch_t *ex, bool ex_settling, size_t row)
{
    for (size_t k = 0; ex && k < ex->n; k++)
        if (ex->rows[k] == row)
            return true;
    for (size_t k = 0; ex_settling && c->settle_pending && k < c->s.n; k++)
        if (c->s.rows[k] == row)
            return true;
    for (size_t k = 0; ex_settling && c->committing_pending && k < c->committing.n; k++)
        if (c->committing.rows[k] == row)
            return true;
    return false;
}

/* The claim: wakes rows whose retry is due, then takes up to limit pending rows in id order that
 * are not in ex (the batch in flight) nor, with ex_settling, among the rows whose settle is
 * unwritten, parking the rows behind an earlier waiting row of their aggregate (until the same
 * time). */
static void claim(fake_cap_t *c, fake_batch_t *out, const fake_batch_t *ex, bool ex_settling,
                  size_t *parked, bool *due)
{
    int64_t now = pb_monotonic_ms();
    size_t limit = (size_t)c->base.cfg->relay_batch_size;
    if (limit > MAX_BATCH)
        limit = MAX_BATCH;
    for (size_t i = 0; i < c->n_rows; i++)
        if (c->rows[i].state == ROW_WAITING && c->rows[i].due_at <= now)
            c->rows[i].state = ROW_PENDING;
    out->n = 0;
    *parked = 0;
    for (size_t i = 0; i < c->n_rows && out->n < limit; i++) {
        row_t *r = &c->rows[i];
        if (r->state != ROW_PENDING || excluded(c, ex, ex_settling, i))
            continue;
        const row_t *blocker = NULL;
        for (size_t j = 0; j < i && !blocker; j++)
            if (c->rows[j].state == ROW_WAITING && same_agg(&c->rows[j], r))
                blocker = &c->rows[j];
        if (blocker) {
            r->state = ROW_WAITING;
            r->due_at = blocker->due_at;
            (*parked)++;
            continue;
        }
        out->rows[out->n++] = i;
    }
    *due = false;
    now = pb_monotonic_ms();
    for (size_t i = 0; i < c->n_rows; i++)
        if (c->rows[i].state == ROW_WAITING && c->rows[i].due_at <= now)
            *due = true;
    for (size_t k = 0; k < out->n; k++) {
        row_t *r = &c->rows[out->rows[k]];
        out->events[k] = (pb_event_t){
            .id = r->id,
            .event_id = r->event_id,
            .aggregate_type = r->agg_type,
            .aggregate_id = r->agg_id,
            .event_type = "order.changed",
            .payload = "{}",
            .payload_len = 2,
            .created_at_us = pb_wall_us(),
            .attempts = r->attempts,
            .available_at_us = r->available_at_us,
            .expires_at_us = r->expires_at_us,
        };
        out->behind[k] = r->behind;
    }
}

static void apply(fake_cap_t *c, const fake_settle_t *st)
{
    int64_t now = pb_monotonic_ms();
    for (size_t k = 0; k < st->n; k++) {
        row_t *r = &c->rows[st->rows[k]];
        if (st->dead[k]) {
            r->state = ROW_DEAD;
            r->dead_seq = ++g_seq;
            r->dead_attempts = st->attempts[k];
            snprintf(r->dead_reason, sizeof r->dead_reason, "%s", st->reason[k]);
        } else if (st->out[k] == PB_OUT_PUBLISHED) {
            r->state = ROW_PUBLISHED;
        } else if (st->out[k] == PB_OUT_RETRY) {
            r->state = ROW_WAITING;
            r->attempts++;
            r->due_at = now + st->delay[k];
        } else if (st->out[k] == PB_OUT_DEFERRED) {
            r->state = ROW_SET_ASIDE;
        } /* HELD: left pending as it is */
    }
}

/* Writes every outcome settled (poll: the settles sent, and their COMMITs waited for). */
static void apply_settling(fake_cap_t *c)
{
    if (c->committing_pending)
        apply(c, &c->committing);
    c->committing_pending = false;
    if (c->settle_pending)
        apply(c, &c->s);
    c->settle_pending = false;
}

/* Ahead mode, after the claim beside the settle: the settle before commits, this one is sent. */
static void commit_one(fake_cap_t *c)
{
    if (c->committing_pending)
        apply(c, &c->committing);
    c->committing_pending = c->settle_pending;
    if (c->settle_pending)
        c->committing = c->s;
    c->settle_pending = false;
}

static pb_status_t fc_connect(pb_capture_t *cap, pb_error_t *err)
{
    (void)err;
    fake_cap_t *c = (fake_cap_t *)cap;
    c->connects++;
    c->connected = true;
    return PB_OK;
}

static bool fc_connected(const pb_capture_t *cap)
{
    return ((const fake_cap_t *)cap)->connected;
}

static void fc_disconnect(pb_capture_t *cap)
{
    fake_cap_t *c = (fake_cap_t *)cap;
    c->disconnects++;
    c->connected = false;
    c->cur_out = c->ahead_ready = false;
    c->settle_pending = c->committing_pending = false; /* not written: relayed again */
}

static bool runaway(fake_cap_t *c)
{
    if (pb_monotonic_ms() < c->deadline)
        return false;
    cap_violation(c, "the run did not end in time (stopped by the test)");
    *c->base.stop = 1;
    return true;
}

static void hand_out(fake_cap_t *c, pb_capture_batch_t *b, bool behind)
{
    c->cur.number = ++c->batches;
    c->cur_out = true;
    b->events = c->cur.events;
    b->n = c->cur.n;
    b->behind_unsettled = behind;
    b->check_due = c->check_due;
    b->behind_deferred = c->check_due ? c->cur.behind : NULL;
}

static pb_status_t fc_next(pb_capture_t *cap, pb_capture_batch_t *b, pb_error_t *err)
{
    (void)err;
    fake_cap_t *c = (fake_cap_t *)cap;
    c->nexts++;
    b->n = 0;
    b->events = NULL;
    b->behind_unsettled = false;
    if (!c->connected)
        cap_violation(c, "next while disconnected");
    if (c->cur_out)
        cap_violation(c, "next before the batch before was settled");
    if (runaway(c))
        return PB_OK;
    if (c->ahead_ready) {
        c->cur = c->ahead;
        c->ahead_ready = false;
        hand_out(c, b, true);
        return PB_OK;
    }
    apply_settling(c);
    for (int tries = 0; tries < 100; tries++) {
        size_t parked;
        bool due;
        claim(c, &c->cur, NULL, false, &parked, &due);
        if (c->cur.n > 0 || (!parked && !due))
            break;
    }
    if (c->cur.n > 0)
        hand_out(c, b, false);
    return PB_OK;
}

static pb_status_t fc_overlap(pb_capture_t *cap, pb_error_t *err)
{
    (void)err;
    fake_cap_t *c = (fake_cap_t *)cap;
    c->overlaps++;
    if (!c->cur_out)
        cap_violation(c, "overlap without a batch out");
    if (!c->ahead_mode)
        return PB_OK;
    size_t parked;
    bool due;
    claim(c, &c->ahead, &c->cur, true, &parked, &due);
    commit_one(c);
    c->ahead_ready = c->ahead.n > 0;
    return PB_OK;
}

static void log_settle(fake_cap_t *c, const pb_result_t *results, const pb_settle_plan_t *plans)
{
    assert_true(c->n_log < MAX_SETTLES);
    settle_rec_t *s = &c->log[c->n_log++];
    s->batch = c->cur.number;
    s->seq = ++g_seq;
    s->n = c->cur.n;
    for (size_t i = 0; i < c->cur.n; i++) {
        s->ids[i] = c->cur.events[i].id;
        s->attempts[i] = c->cur.events[i].attempts;
        s->outcomes[i] = results[i].outcome;
        s->dead[i] = plans[i].dead;
        s->retry_delay_ms[i] = plans[i].retry_delay_ms;
        snprintf(s->reasons[i], sizeof s->reasons[i], "%s", plans[i].reason ? plans[i].reason : "");
    }
}

static pb_status_t fc_settle(pb_capture_t *cap, const pb_result_t *results,
                             const pb_settle_plan_t *plans, pb_error_t *err)
{
    (void)err;
    fake_cap_t *c = (fake_cap_t *)cap;
    c->settles++;
    if (!c->cur_out) {
        cap_violation(c, "settle without a batch out");
        return PB_OK;
    }
    log_settle(c, results, plans);
    c->last_settle_seq = g_seq;
    if (c->settle_pending)
        cap_violation(c, "settle while the outcomes of the batch before are unwritten");
    c->s.n = c->cur.n;
    for (size_t i = 0; i < c->cur.n; i++) {
        pb_outcome_t o = results[i].outcome;
        if (o == PB_OUT_UNTRIED)
            cap_violation(c, "an UNTRIED outcome at settle");
        if (o == PB_OUT_REJECT && !plans[i].dead)
            cap_violation(c, "a REJECT that is not dead-lettered");
        if (plans[i].dead && (!plans[i].reason || !plans[i].reason[0]))
            cap_violation(c, "a dead letter without a reason");
        if (cap->ops->retries_in_place && o != PB_OUT_PUBLISHED && o != PB_OUT_DEFERRED &&
            !plans[i].dead)
            cap_violation(c, "an in-place capture got an outcome that is not final");
        if (o == PB_OUT_EXPIRED && (!plans[i].dead || strcmp(plans[i].reason, "expired") != 0))
            cap_violation(c, "an EXPIRED outcome that is not a dead letter with reason expired");
        if (o == PB_OUT_DEFERRED && (plans[i].dead || !c->check_due))
            cap_violation(c, "a DEFERRED outcome dead-lettered, or from a capture whose events are due");
        c->s.rows[i] = c->cur.rows[i];
        c->s.out[i] = o;
        c->s.dead[i] = plans[i].dead;
        c->s.attempts[i] = c->cur.events[i].attempts + 1;
        c->s.delay[i] = plans[i].retry_delay_ms;
        snprintf(c->s.reason[i], sizeof c->s.reason[i], "%s", plans[i].reason ? plans[i].reason : "");
    }
    c->settle_pending = true;
    c->cur_out = false;
    if (!c->ahead_mode)
        apply_settling(c);
    return PB_OK;
}

static pb_status_t fc_wait(pb_capture_t *cap, pb_capture_tick_fn tick, void *arg, pb_error_t *err)
{
    (void)err;
    fake_cap_t *c = (fake_cap_t *)cap;
    c->waits++;
    (void)runaway(c);
    (void)tick(arg);
    return PB_OK;
}

static pb_status_t fc_keepalive(pb_capture_t *cap, pb_error_t *err)
{
    (void)err;
    ((fake_cap_t *)cap)->keepalives++;
    return PB_OK;
}

static pb_status_t fc_tick(pb_capture_t *cap, pb_error_t *err)
{
    (void)err;
    ((fake_cap_t *)cap)->ticks++;
    return PB_OK;
}

static size_t rows_left(const fake_cap_t *c)
{
    size_t n = 0;
    for (size_t i = 0; i < c->n_rows; i++)
        n += c->rows[i].state == ROW_PENDING || c->rows[i].state == ROW_WAITING;
    return n;
}

static pb_status_t fc_drained(pb_capture_t *cap, bool *done, pb_error_t *err)
{
    (void)err;
    fake_cap_t *c = (fake_cap_t *)cap;
    c->drained_calls++;
    if (c->cur_out)
        cap_violation(c, "drained asked with a batch out");
    *done = rows_left(c) == 0 && !c->settle_pending && !c->committing_pending && !c->ahead_ready;
    if (!*done)
        c->drained_false++;
    return PB_OK;
}

static pb_status_t fc_finish(pb_capture_t *cap, pb_error_t *err)
{
    (void)err;
    fake_cap_t *c = (fake_cap_t *)cap;
    c->finishes++;
    if (c->cur_out)
        cap_violation(c, "finish with a batch out");
    apply_settling(c);
    c->ahead_ready = false; /* claimed ahead: left pending */
    c->last_finish_seq = ++g_seq;
    return PB_OK;
}

/* as the poll capture: a batch claimed ahead is handed out by next at once */
static bool fc_ready(const pb_capture_t *cap)
{
    return ((const fake_cap_t *)cap)->ahead_ready;
}

static void fc_free(pb_capture_t *cap)
{
    free(cap);
}

static const pb_capture_ops_t fake_poll_ops = {
    .name = "poll",
    .retries_in_place = false,
    .connect = fc_connect,
    .connected = fc_connected,
    .disconnect = fc_disconnect,
    .ready = fc_ready,
    .next = fc_next,
    .overlap = fc_overlap,
    .settle = fc_settle,
    .wait = fc_wait,
    .keepalive = fc_keepalive,
    .tick = fc_tick,
    .drained = fc_drained,
    .finish = fc_finish,
    .free = fc_free,
};

static const pb_capture_ops_t fake_inplace_ops = {
    .name = "cdc",
    .retries_in_place = true,
    .connect = fc_connect,
    .connected = fc_connected,
    .disconnect = fc_disconnect,
    .ready = fc_ready,
    .next = fc_next,
    .overlap = fc_overlap,
    .settle = fc_settle,
    .wait = fc_wait,
    .keepalive = fc_keepalive,
    .tick = fc_tick,
    .drained = fc_drained,
    .finish = fc_finish,
    .free = fc_free,
};

/* ---- the fake sink --------------------------------------------------------------------------- */

typedef enum sink_script { SS_OK = 0, SS_FAIL_N, SS_ALWAYS_RETRY, SS_REJECT } sink_script_t;

#define REJECT_REASON "payload too large: 2000000 bytes, the broker takes 1048576"

typedef struct fake_sink {
    pb_sink_t base;
    volatile sig_atomic_t *stop;
    sink_script_t script[MAX_ROWS + 1];
    int fail_n[MAX_ROWS + 1];
    int failed[MAX_ROWS + 1];
    int tries[MAX_ROWS + 1];     /* sends of the event */
    int checks[MAX_ROWS + 1];
    int published[MAX_ROWS + 1]; /* confirms of the event */
    int64_t published_seq[MAX_ROWS + 1];
    int published_attempts[MAX_ROWS + 1]; /* its attempts before the confirmed one */
    int64_t order[MAX_PUBLISHED];
    size_t n_order;
    bool connected;
    int connects, connect_failures;
    int refuse_from, fail_connects; /* refuse fail_connects connects from connect refuse_from on */
    int sends, awaits, idles;
    int lose_in_send_at;  /* send number whose send loses the connection (0: none) */
    int lose_in_await_at; /* send number whose await loses it ... */
    size_t lose_confirmed; /* ... after confirming this many of its events */
    int stop_in_await_at; /* send number whose await sets *stop */
    bool awaiting;
    size_t sent[MAX_BATCH];
    size_t n_sent;
    int violations;
    char violation[256];
} fake_sink_t;

static void sink_violation(fake_sink_t *s, const char *what)
{
    if (!s->violations++)
        snprintf(s->violation, sizeof s->violation, "%s", what);
}

static int64_t event_no(fake_sink_t *s, const pb_event_t *ev)
{
    if (ev->id < 1 || ev->id > MAX_ROWS) {
        sink_violation(s, "an event id out of range");
        return 0;
    }
    return ev->id;
}

static pb_status_t fs_connect(pb_sink_t *snk, pb_error_t *err)
{
    fake_sink_t *s = (fake_sink_t *)snk;
    s->connects++;
    if (s->refuse_from && s->connects >= s->refuse_from && s->fail_connects > 0) {
        s->fail_connects--;
        s->connect_failures++;
        return pb_fail(err, PB_TRANSIENT, "connection refused (scripted)");
    }
    s->connected = true;
    return PB_OK;
}

static pb_status_t fs_send(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    fake_sink_t *s = (fake_sink_t *)snk;
    s->sends++;
    if (!s->connected)
        sink_violation(s, "send while not connected");
    if (s->awaiting)
        sink_violation(s, "send before the batch before was awaited");
    if (b->n > MAX_BATCH) {
        sink_violation(s, "batch too large for the fake");
        return pb_fail(err, PB_FATAL, "batch too large for the fake");
    }
    if (s->sends == s->lose_in_send_at) {
        for (size_t i = 0; i < b->n; i++)
            if (b->results[i].outcome == PB_OUT_UNTRIED)
                pb_result_set(&b->results[i], PB_OUT_RETRY, "connection lost (scripted, in send)");
        s->connected = false;
        return pb_fail(err, PB_TRANSIENT, "connection lost (scripted, in send)");
    }
    s->n_sent = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (b->results[i].outcome != PB_OUT_UNTRIED)
            continue;
        s->sent[s->n_sent++] = i;
        s->tries[event_no(s, &b->events[i])]++;
    }
    s->awaiting = true;
    return PB_OK;
}

static void confirm(fake_sink_t *s, const pb_event_t *ev, pb_result_t *r)
{
    int64_t id = event_no(s, ev);
    switch (s->script[id]) {
    case SS_FAIL_N:
        if (s->failed[id] < s->fail_n[id]) {
            s->failed[id]++;
            pb_result_set(r, PB_OUT_RETRY, "broker nacked the message (scripted)");
            return;
        }
        break;
    case SS_ALWAYS_RETRY:
        pb_result_set(r, PB_OUT_RETRY, "broker nacked the message (scripted, always)");
        return;
    case SS_REJECT:
        sink_violation(s, "an event that check refused was sent");
        pb_result_set(r, PB_OUT_REJECT, REJECT_REASON);
        return;
    case SS_OK:
        break;
    }
    pb_result_set(r, PB_OUT_PUBLISHED, NULL);
    s->published[id]++;
    s->published_seq[id] = ++g_seq;
    s->published_attempts[id] = ev->attempts;
    if (s->n_order < MAX_PUBLISHED)
        s->order[s->n_order++] = id;
}

static pb_status_t fs_await(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    fake_sink_t *s = (fake_sink_t *)snk;
    s->awaits++;
    if (!s->awaiting)
        sink_violation(s, "await without a send");
    s->awaiting = false;
    if (s->sends == s->stop_in_await_at)
        *s->stop = 1;
    bool lose = s->sends == s->lose_in_await_at;
    for (size_t k = 0; k < s->n_sent; k++) {
        size_t i = s->sent[k];
        if (lose && k >= s->lose_confirmed)
            pb_result_set(&b->results[i], PB_OUT_RETRY, "connection lost (scripted, in await)");
        else
            confirm(s, &b->events[i], &b->results[i]);
    }
    if (lose) {
        s->connected = false;
        return pb_fail(err, PB_TRANSIENT, "connection lost (scripted, in await)");
    }
    return PB_OK;
}

static bool fs_check(pb_sink_t *snk, const pb_event_t *ev, pb_result_t *r)
{
    fake_sink_t *s = (fake_sink_t *)snk;
    int64_t id = event_no(s, ev);
    s->checks[id]++;
    if (s->script[id] != SS_REJECT)
        return true;
    pb_result_set(r, PB_OUT_REJECT, REJECT_REASON);
    return false;
}

static pb_status_t fs_idle(pb_sink_t *snk, pb_error_t *err)
{
    fake_sink_t *s = (fake_sink_t *)snk;
    s->idles++;
    if (!s->connected)
        return pb_fail(err, PB_TRANSIENT, "not connected");
    return PB_OK;
}

static void fs_free(pb_sink_t *snk)
{
    free(snk);
}

static const pb_sink_ops_t fake_sink_ops = {
    .name = "fake",
    .caps = 0,
    .max_in_flight = 1,
    .connect = fs_connect,
    .send = fs_send,
    .await = fs_await,
    .check = fs_check,
    .idle = fs_idle,
    .free = fs_free,
};

/* ---- the world of one test ------------------------------------------------------------------- */

typedef struct world {
    pb_config_t cfg;
    pb_relay_opts_t opts;
    volatile sig_atomic_t stop;
    fake_cap_t *cap;
    fake_sink_t *snk;
    pb_error_t err;
    pb_status_t st;
} world_t;

/* The world of the test running: freed by teardown when a failed assertion left it behind. */
static world_t *g_world;

static world_t *world_new(const pb_capture_ops_t *ops, bool ahead, int batch_size, int max_attempts)
{
    world_t *w = calloc(1, sizeof *w);
    assert_non_null(w);
    g_world = w;
    pb_config_init(&w->cfg);
    w->cfg.relay_batch_size = batch_size;
    w->cfg.relay_max_attempts = max_attempts;
    w->cfg.relay_backoff_base = 1;
    w->cfg.relay_backoff_cap = 1;
    w->cfg.relay_reconnect_cap = 10;
    w->cfg.relay_poll_interval = 10;
    w->opts.drain = true;
    w->cap = calloc(1, sizeof *w->cap);
    w->snk = calloc(1, sizeof *w->snk);
    assert_non_null(w->cap);
    assert_non_null(w->snk);
    w->cap->base = (pb_capture_t){.ops = ops, .cfg = &w->cfg, .stop = &w->stop};
    w->cap->ahead_mode = ahead;
    w->snk->base = (pb_sink_t){.ops = &fake_sink_ops, .cfg = &w->cfg};
    w->snk->stop = &w->stop;
    return w;
}

static void world_run(world_t *w)
{
    w->cap->deadline = pb_monotonic_ms() + RUN_LIMIT_MS;
    w->st = pb_driver_run(&w->cfg, &w->opts, &w->stop, &w->cap->base, &w->snk->base, &w->err);
    if (w->cap->violations)
        fprintf(stderr, "fake capture: %d contract violations, first: %s\n", w->cap->violations,
                w->cap->violation);
    if (w->snk->violations)
        fprintf(stderr, "fake sink: %d contract violations, first: %s\n", w->snk->violations,
                w->snk->violation);
}

static void world_free(world_t *w)
{
    pb_capture_free(&w->cap->base);
    pb_sink_free(&w->snk->base);
    pb_config_free(&w->cfg);
    free(w);
    if (g_world == w)
        g_world = NULL;
}

static void assert_clean_run(const world_t *w)
{
    assert_int_equal(w->st, PB_OK);
    assert_int_equal(w->cap->violations, 0);
    assert_int_equal(w->snk->violations, 0);
}

static void print_order(const world_t *w)
{
    fprintf(stderr, "confirm order:");
    for (size_t k = 0; k < w->snk->n_order; k++) {
        const row_t *r = &w->cap->rows[w->snk->order[k] - 1];
        fprintf(stderr, " %s%lld", r->agg_id, (long long)r->id);
    }
    fprintf(stderr, "\n");
}

/* The confirms of aggregate agg come in id order, and each of its rows that is published was
 * confirmed exactly once (and so was every row of it the outbox says is published). */
static void assert_aggregate_in_order(world_t *w, const char *agg)
{
    int64_t last = 0;
    for (size_t k = 0; k < w->snk->n_order; k++) {
        const row_t *r = &w->cap->rows[w->snk->order[k] - 1];
        if (strcmp(r->agg_id, agg) != 0)
            continue;
        if (r->id < last) {
            print_order(w);
            fail_msg("aggregate %s: event %lld was published after event %lld", agg,
                     (long long)r->id, (long long)last);
        }
        last = r->id;
    }
}

static void assert_published_once(world_t *w, int64_t id)
{
    if (w->snk->published[id] != 1) {
        print_order(w);
        fail_msg("event %lld was confirmed %d times, expected once", (long long)id,
                 w->snk->published[id]);
    }
    assert_int_equal(row_of(w->cap, id)->state, ROW_PUBLISHED);
}

static void assert_all_published_once(world_t *w)
{
    for (size_t i = 1; i <= w->cap->n_rows; i++)
        assert_published_once(w, (int64_t)i);
}

/* Index of the batch (settle record) in which event id was first settled, and its outcome. */
static const settle_rec_t *first_settle_of(const fake_cap_t *c, int64_t id, size_t *at)
{
    for (size_t s = 0; s < c->n_log; s++)
        for (size_t i = 0; i < c->log[s].n; i++)
            if (c->log[s].ids[i] == id) {
                *at = i;
                return &c->log[s];
            }
    return NULL;
}

static int settles_with(const fake_cap_t *c, int64_t id, pb_outcome_t outcome)
{
    int n = 0;
    for (size_t s = 0; s < c->n_log; s++)
        for (size_t i = 0; i < c->log[s].n; i++)
            n += c->log[s].ids[i] == id && c->log[s].outcomes[i] == outcome;
    return n;
}

static int setup(void **state)
{
    (void)state;
    alarm(60); /* a hang is a failure, not a stuck ctest */
    g_seq = 0;
    pb_metrics_reset();
    return 0;
}

/* The sum of postbox_published_total over its series. */
static double published_metric(void)
{
    pb_buf_t out = {0};
    pb_metrics_render(&out);
    double sum = 0;
    for (const char *p = out.data; p && (p = strstr(p, "postbox_published_total{")) != NULL;) {
        const char *end = strchr(p, '}');
        assert_non_null(end);
        sum += strtod(end + 1, NULL);
        p = end;
    }
    pb_buf_free(&out);
    return sum;
}

static int teardown(void **state)
{
    (void)state;
    alarm(0);
    if (g_world)
        world_free(g_world);
    return 0;
}

/* ---- 1. hold-back behind a failed event ------------------------------------------------------ */

/* A1 (id 1) fails once. batch 1 = [A1 B2], batch 2 (claimed ahead, behind_unsettled) = [A3 B4]:
 * A3 must be held behind A1's unsettled failure while B4 flows on; the claims that follow park
 * A5 behind the waiting A1; in the end A publishes 1, 3, 5 in that order, B 2, 4, 6, all once. */
static void failed_event_holds_back_its_aggregate_in_the_batch_ahead(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_poll_ops, true, 2, 5);
    add_rows(w->cap, "ABABAB");
    w->snk->script[1] = SS_FAIL_N;
    w->snk->fail_n[1] = 1;
    world_run(w);
    assert_clean_run(w);

    /* batch 2 was the one claimed ahead: A3 held, B4 published */
    size_t i3 = 0, i4 = 0;
    const settle_rec_t *s3 = first_settle_of(w->cap, 3, &i3);
    const settle_rec_t *s4 = first_settle_of(w->cap, 4, &i4);
    assert_non_null(s3);
    assert_non_null(s4);
    assert_int_equal(s3->batch, 2);
    assert_int_equal(s3->outcomes[i3], PB_OUT_HELD);
    assert_int_equal(s4->batch, 2);
    assert_int_equal(s4->outcomes[i4], PB_OUT_PUBLISHED);
    /* A1's first settle: RETRY, not dead, with a retry delay within backoff_cap */
    size_t i1 = 0;
    const settle_rec_t *s1 = first_settle_of(w->cap, 1, &i1);
    assert_non_null(s1);
    assert_int_equal(s1->outcomes[i1], PB_OUT_RETRY);
    assert_false(s1->dead[i1]);
    assert_true(s1->retry_delay_ms[i1] >= 0 && s1->retry_delay_ms[i1] <= 1);
    assert_int_equal(w->snk->tries[1], 2);
    assert_int_equal(w->snk->published_attempts[1], 1);
    /* B was never held */
    assert_int_equal(settles_with(w->cap, 2, PB_OUT_HELD) + settles_with(w->cap, 4, PB_OUT_HELD) +
                         settles_with(w->cap, 6, PB_OUT_HELD),
                     0);
    assert_true(w->snk->published_seq[4] < w->snk->published_seq[1]); /* B overtook A1's retry */
    assert_aggregate_in_order(w, "A");
    assert_aggregate_in_order(w, "B");
    assert_all_published_once(w);
    assert_int_equal(rows_left(w->cap), 0);
    world_free(w);
}

/* A1 (id 1) fails once; with batches of 2, the event of A at id `held` is claimed in batch
 * `batch` by a claim that may not see A1's failure (batches between hold nothing of A). It is
 * held behind A1 all the same, and published after it. */
static void held_behind_a1(const char *rows, int64_t held, int batch)
{
    world_t *w = world_new(&fake_poll_ops, true, 2, 5);
    add_rows(w->cap, rows);
    w->snk->script[1] = SS_FAIL_N;
    w->snk->fail_n[1] = 1;
    world_run(w);
    assert_clean_run(w);

    size_t i = 0;
    const settle_rec_t *s = first_settle_of(w->cap, held, &i);
    assert_non_null(s);
    assert_int_equal(s->batch, batch);
    assert_int_equal(s->outcomes[i], PB_OUT_HELD);
    assert_int_equal(w->snk->tries[1], 2);
    assert_true(w->snk->published_seq[1] < w->snk->published_seq[held]);
    assert_aggregate_in_order(w, "A");
    assert_aggregate_in_order(w, "B");
    assert_all_published_once(w);
    assert_int_equal(rows_left(w->cap), 0);
    world_free(w);
}

/* batch 3 = [A5 B6] is claimed beside the settle of batch 1, which it cannot see */
static void failed_event_holds_back_its_aggregate_two_batches_ahead(void **state)
{
    (void)state;
    held_behind_a1("ABBBAB", 5, 3);
}

/* batch 4 = [A7 B8] is claimed beside the settle of batch 2 while that of batch 1 may still be
 * committing */
static void failed_event_holds_back_its_aggregate_three_batches_ahead(void **state)
{
    (void)state;
    held_behind_a1("ABBBBBAB", 7, 4);
}

/* ---- 2. retry, then dead letter after relay.max_attempts ------------------------------------- */

/* A1 always fails; max_attempts = 3. One event per batch, claimed ahead, so A's later events
 * meet A1's failures through the hold-back and the claim's parking. A1 is tried 3 times, then
 * dead-lettered with "gave up after 3 attempts"; A2 and A3 are published after the dead letter
 * was written, B flows on. */
static void retry_then_dead_letter_after_max_attempts(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_poll_ops, true, 1, 3);
    add_rows(w->cap, "AABABB");
    w->snk->script[1] = SS_ALWAYS_RETRY;
    world_run(w);
    assert_clean_run(w);

    assert_int_equal(w->snk->tries[1], 3);
    assert_int_equal(w->snk->published[1], 0);
    assert_int_equal(settles_with(w->cap, 1, PB_OUT_RETRY), 3);
    /* the settles of A1: attempts 0 and 1 retried, attempt 2 (the third) dead */
    int seen = 0;
    for (size_t s = 0; s < w->cap->n_log; s++)
        for (size_t i = 0; i < w->cap->log[s].n; i++) {
            const settle_rec_t *r = &w->cap->log[s];
            if (r->ids[i] != 1)
                continue;
            assert_int_equal(r->attempts[i], seen);
            if (seen < 2) {
                assert_false(r->dead[i]);
            } else {
                assert_true(r->dead[i]);
                assert_non_null(strstr(r->reasons[i], "gave up after 3 attempts"));
                assert_non_null(strstr(r->reasons[i], "broker nacked"));
            }
            seen++;
        }
    assert_int_equal(seen, 3);
    const row_t *a1 = row_of(w->cap, 1);
    assert_int_equal(a1->state, ROW_DEAD);
    assert_int_equal(a1->dead_attempts, 3);
    /* A's later events: after the dead letter, in order, once */
    assert_true(w->snk->published_seq[2] > a1->dead_seq);
    assert_true(w->snk->published_seq[4] > a1->dead_seq);
    assert_aggregate_in_order(w, "A");
    assert_aggregate_in_order(w, "B");
    /* B3 was not held back behind A */
    assert_int_equal(settles_with(w->cap, 3, PB_OUT_HELD), 0);
    for (int64_t id = 2; id <= 6; id++)
        assert_published_once(w, id);
    assert_int_equal(rows_left(w->cap), 0);
    world_free(w);
}

/* ---- 3. check() rejects an event ------------------------------------------------------------- */

/* batch = [A1 A2 B3 A4 B5]; check refuses A1: it is dead-lettered at once with the check's
 * reason, without being sent; A2 and A4 are HELD in that batch and published later, after the
 * dead letter was written; B3 and B5 are published in the batch. */
static void check_rejects_and_holds_back_the_aggregate(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_poll_ops, true, 8, 5);
    add_rows(w->cap, "AABAB");
    w->snk->script[1] = SS_REJECT;
    world_run(w);
    assert_clean_run(w);

    const settle_rec_t *first = &w->cap->log[0];
    assert_true(w->cap->n_log >= 2);
    assert_int_equal(first->n, 5);
    assert_int_equal(first->outcomes[0], PB_OUT_REJECT);
    assert_true(first->dead[0]);
    assert_string_equal(first->reasons[0], REJECT_REASON);
    assert_int_equal(first->outcomes[1], PB_OUT_HELD);
    assert_int_equal(first->outcomes[2], PB_OUT_PUBLISHED);
    assert_int_equal(first->outcomes[3], PB_OUT_HELD);
    assert_int_equal(first->outcomes[4], PB_OUT_PUBLISHED);
    assert_int_equal(w->snk->tries[1], 0);
    assert_int_equal(w->snk->checks[1], 1);
    const row_t *a1 = row_of(w->cap, 1);
    assert_int_equal(a1->state, ROW_DEAD);
    assert_int_equal(a1->dead_attempts, 1);
    assert_true(w->snk->published_seq[2] > a1->dead_seq);
    assert_true(w->snk->published_seq[4] > a1->dead_seq);
    assert_aggregate_in_order(w, "A");
    for (int64_t id = 2; id <= 5; id++)
        assert_published_once(w, id);
    /* check runs once per event per batch: the held events were not checked in batch 1 */
    assert_int_equal(w->snk->checks[2], 1);
    assert_int_equal(w->snk->checks[3], 1);
    world_free(w);
}

/* ---- 4. a lost broker connection in mid batch ------------------------------------------------ */

/* batch 1 = [A1 B2 A3 B4 A5 B6]: the broker confirms A1 and B2, then the connection drops in
 * await. The sink is connected again, the unconfirmed events
 * retried and published; later the connection drops again in send (batch 3). Nothing is lost,
 * nothing is confirmed twice, each aggregate stays in order. */
static void lost_broker_connection_in_mid_batch(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_poll_ops, true, 6, 5);
    add_rows(w->cap, "ABABABABABAB");
    w->snk->lose_in_await_at = 1;
    w->snk->lose_confirmed = 2;
    w->snk->lose_in_send_at = 3;
    world_run(w);
    assert_clean_run(w);

    /* connected at the start, after the loss in await, after the loss in send */
    assert_true(w->snk->connects >= 3);
    const settle_rec_t *first = &w->cap->log[0];
    assert_int_equal(first->n, 6);
    assert_int_equal(first->outcomes[0], PB_OUT_PUBLISHED);
    assert_int_equal(first->outcomes[1], PB_OUT_PUBLISHED);
    for (size_t i = 2; i < 6; i++) {
        assert_int_equal(first->outcomes[i], PB_OUT_RETRY);
        assert_false(first->dead[i]);
    }
    /* the outcomes in hand were written before the sink was connected again (finish) */
    assert_true(w->cap->finishes >= 2);
    assert_aggregate_in_order(w, "A");
    assert_aggregate_in_order(w, "B");
    assert_all_published_once(w);
    assert_int_equal(w->snk->published_attempts[3], 1); /* retried once after the loss */
    assert_int_equal(rows_left(w->cap), 0);
    world_free(w);
}

/* Same, but the broker refuses the first two reconnects: the driver waits with backoff, connects
 * and goes on. */
static void lost_broker_connection_waits_for_the_broker(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_poll_ops, true, 4, 5);
    add_rows(w->cap, "ABABABAB");
    w->snk->lose_in_await_at = 2;
    w->snk->lose_confirmed = 1;
    w->snk->refuse_from = 2;
    w->snk->fail_connects = 2;
    world_run(w);
    assert_clean_run(w);
    assert_int_equal(w->snk->connect_failures, 2);
    assert_int_equal(w->snk->connects, 4);
    assert_aggregate_in_order(w, "A");
    assert_aggregate_in_order(w, "B");
    assert_all_published_once(w);
    world_free(w);
}

/* ---- 5. stop in mid batch -------------------------------------------------------------------- */

/* *stop is set while batch 2 is being acknowledged: pb_driver_run returns PB_OK, batch 2 was
 * settled (its settle recorded, its confirmed events published) and written (finish) before it
 * returned, and nothing was sent after the stop. */
static void stop_in_mid_batch(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_poll_ops, true, 3, 5);
    w->opts.drain = false;
    add_rows(w->cap, "ABABABABABABABABABAB");
    w->snk->stop_in_await_at = 2;
    world_run(w);
    assert_clean_run(w);
    assert_int_equal(w->stop, 1);
    assert_int_equal(w->snk->sends, 2);
    assert_int_equal(w->cap->settles, 2);
    assert_int_equal(w->cap->n_log, 2);
    assert_int_equal(w->cap->log[1].batch, 2);
    for (size_t i = 0; i < w->cap->log[1].n; i++)
        assert_int_equal(w->cap->log[1].outcomes[i], PB_OUT_PUBLISHED);
    /* the settle was written: finish ran after it */
    assert_true(w->cap->finishes >= 1);
    assert_true(w->cap->last_finish_seq > w->cap->last_settle_seq);
    assert_false(w->cap->settle_pending);
    assert_false(w->cap->committing_pending);
    for (int64_t id = 1; id <= 6; id++) {
        assert_int_equal(row_of(w->cap, id)->state, ROW_PUBLISHED);
        assert_int_equal(w->snk->published[id], 1);
    }
    /* the batch claimed ahead was let go: still pending, never sent */
    for (int64_t id = 7; id <= 20; id++) {
        assert_int_equal(row_of(w->cap, id)->state, ROW_PENDING);
        assert_int_equal(w->snk->tries[id], 0);
    }
    world_free(w);
}

/* The same with the in-place capture, stopped while a failed event is retried in place: the run
 * returns PB_OK without settling the batch (it is relayed again at the next start). */
static void stop_while_retrying_in_place(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_inplace_ops, false, 4, 100);
    w->opts.drain = false;
    add_rows(w->cap, "ABAB");
    w->snk->script[1] = SS_ALWAYS_RETRY;
    w->snk->stop_in_await_at = 3;
    world_run(w);
    assert_clean_run(w);
    assert_int_equal(w->snk->sends, 3);
    assert_int_equal(w->cap->settles, 0);
    assert_int_equal(row_of(w->cap, 1)->state, ROW_PENDING);
    world_free(w);
}

/* ---- 6. drain -------------------------------------------------------------------------------- */

/* With opts.drain, the run returns once the outbox is empty and every outcome is written. C2
 * (its aggregate's only event) fails twice with a 30-60 ms retry delay: meanwhile the capture has nothing (next is empty) but
 * is not drained, and the run must wait for the retries instead of returning. */
static void drain_returns_once_everything_is_relayed(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_poll_ops, true, 4, 5);
    w->cfg.relay_backoff_base = 60;
    w->cfg.relay_backoff_cap = 60;
    add_rows(w->cap, "ACABABABAB");
    w->snk->script[2] = SS_FAIL_N;
    w->snk->fail_n[2] = 2;
    world_run(w);
    assert_clean_run(w);
    assert_int_equal(w->stop, 0);
    assert_true(w->cap->drained_calls >= 1);
    assert_true(w->cap->drained_false >= 1); /* it asked while C2 was waiting */
    assert_int_equal(rows_left(w->cap), 0);
    assert_false(w->cap->settle_pending);
    assert_false(w->cap->committing_pending);
    assert_false(w->cap->ahead_ready);
    assert_all_published_once(w);
    /* the metrics count a batch's published events once the next batch is sent, or before a
     * next that may wait: by the end every one is counted once, the last batch's too */
    assert_int_equal((int)published_metric(), (int)w->cap->n_rows);
    assert_int_equal(w->snk->tries[2], 3);
    assert_aggregate_in_order(w, "A");
    assert_aggregate_in_order(w, "B");
    world_free(w);
}

/* An empty outbox drains at once, without sending anything. */
static void drain_of_an_empty_outbox(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_poll_ops, true, 4, 5);
    world_run(w);
    assert_clean_run(w);
    assert_int_equal(w->snk->sends, 0);
    assert_int_equal(w->cap->drained_calls, 1);
    world_free(w);
}

/* ---- 7. the in-place retry capture ----------------------------------------------------------- */

/* One batch [A1 B2 A3 B4] from a capture that retries in place; A1 fails twice. It is retried in
 * the same batch until published; the one settle sees only final outcomes. */
static void in_place_retries_until_published(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_inplace_ops, false, 8, 5);
    add_rows(w->cap, "ABAB");
    w->snk->script[1] = SS_FAIL_N;
    w->snk->fail_n[1] = 2;
    world_run(w);
    assert_clean_run(w);
    assert_int_equal(w->cap->settles, 1);
    assert_int_equal(w->cap->batches, 1);
    const settle_rec_t *s = &w->cap->log[0];
    assert_int_equal(s->n, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(s->outcomes[i], PB_OUT_PUBLISHED);
        assert_false(s->dead[i]);
    }
    assert_int_equal(s->attempts[0], 2); /* the driver counted the in-place attempts */
    assert_int_equal(w->snk->tries[1], 3);
    assert_int_equal(w->snk->sends, 3);
    assert_int_equal(w->snk->published_attempts[1], 2);
    assert_all_published_once(w);
    assert_int_equal(rows_left(w->cap), 0);
    world_free(w);
}

/* In place up to relay.max_attempts = 3: dead after the third try, in the same batch; settle
 * sees it dead with its reason, the others published; a rejected event (check) is dead at once
 * and the event held behind it in round 1 is published in a later round. */
static void in_place_dead_letter_and_reject(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_inplace_ops, false, 8, 3);
    add_rows(w->cap, "ABCC");
    w->snk->script[1] = SS_ALWAYS_RETRY;
    w->snk->script[3] = SS_REJECT;
    world_run(w);
    assert_clean_run(w);
    assert_int_equal(w->cap->settles, 1);
    const settle_rec_t *s = &w->cap->log[0];
    assert_true(s->dead[0]);
    assert_int_equal(s->outcomes[0], PB_OUT_RETRY);
    assert_non_null(strstr(s->reasons[0], "gave up after 3 attempts"));
    assert_int_equal(w->snk->tries[1], 3);
    assert_int_equal(s->outcomes[1], PB_OUT_PUBLISHED);
    assert_true(s->dead[2]);
    assert_int_equal(s->outcomes[2], PB_OUT_REJECT);
    assert_string_equal(s->reasons[2], REJECT_REASON);
    assert_int_equal(w->snk->tries[3], 0);
    assert_int_equal(s->outcomes[3], PB_OUT_PUBLISHED);
    assert_int_equal(row_of(w->cap, 1)->state, ROW_DEAD);
    assert_int_equal(row_of(w->cap, 1)->dead_attempts, 3);
    assert_int_equal(row_of(w->cap, 3)->state, ROW_DEAD);
    assert_published_once(w, 2);
    assert_published_once(w, 4);
    world_free(w);
}

/* With an in-place capture, an event held behind a check() rejection in round 1 is checked
 * before round 2 sends it. Batch [A1 C2 C3]; check refuses C2 and C3 (too large): C3 is
 * dead-lettered with the check's reason without being sent (sink.h: "The relay calls it once per
 * event ...; send does not repeat it"; the fake sink counts a send of an event check refuses). */
static void in_place_checks_events_held_behind_a_rejection(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_inplace_ops, false, 8, 5);
    add_rows(w->cap, "ACC");
    w->snk->script[2] = SS_REJECT;
    w->snk->script[3] = SS_REJECT;
    world_run(w);
    assert_int_equal(w->st, PB_OK);
    assert_int_equal(w->cap->violations, 0);
    assert_published_once(w, 1);
    assert_int_equal(row_of(w->cap, 2)->state, ROW_DEAD);
    assert_int_equal(row_of(w->cap, 3)->state, ROW_DEAD);
    assert_string_equal(row_of(w->cap, 3)->dead_reason, REJECT_REASON);
    assert_int_equal(w->snk->tries[2], 0);
    assert_int_equal(w->snk->checks[3], 1); /* fails: see above */
    assert_int_equal(w->snk->tries[3], 0);
    assert_int_equal(w->snk->violations, 0);
    world_free(w);
}

/* A lost connection in round 1 of an in-place batch: the driver reconnects the sink and retries
 * the unconfirmed events in place; nothing lost, nothing twice, one settle. */
static void in_place_lost_connection(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_inplace_ops, false, 8, 5);
    add_rows(w->cap, "ABABAB");
    w->snk->lose_in_await_at = 1;
    w->snk->lose_confirmed = 2;
    world_run(w);
    assert_clean_run(w);
    assert_true(w->snk->connects >= 2);
    assert_int_equal(w->cap->settles, 1);
    assert_all_published_once(w);
    assert_aggregate_in_order(w, "A");
    assert_aggregate_in_order(w, "B");
    world_free(w);
}

/* In place, a retry that fails again is not overtaken by its aggregate's later events: both
 * events of A fail in round 1, A1 once more in round 2, where A2 would have gone through beside
 * it: each retry round sends only A's first undecided event. */
static void retry_is_not_overtaken_by_its_aggregate(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_inplace_ops, false, 8, 5);
    add_rows(w->cap, "AAB");
    w->snk->script[1] = SS_FAIL_N;
    w->snk->fail_n[1] = 2;
    w->snk->script[2] = SS_FAIL_N;
    w->snk->fail_n[2] = 1; /* would succeed in round 2, beside A1's second failure */
    world_run(w);
    assert_clean_run(w);
    assert_aggregate_in_order(w, "A");
    assert_all_published_once(w);
    world_free(w);
}

/* ---- 8. expiry and delay ------------------------------------------------------------------- */

#define HOUR_US INT64_C(3600000000)

/* One batch [A1 B2 A3 B4] (poll); A1 expired an hour ago: it is dead-lettered with reason
 * "expired", never sent nor checked by the sink, and the later events of its aggregate are not
 * held for it: A3 goes in the same batch. */
static void expired_event_is_dead_lettered_not_sent(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_poll_ops, false, 8, 5);
    add_rows(w->cap, "ABAB");
    row_of(w->cap, 1)->expires_at_us = pb_wall_us() - HOUR_US;
    row_of(w->cap, 2)->expires_at_us = pb_wall_us() + HOUR_US; /* not yet */
    world_run(w);
    assert_clean_run(w);
    assert_int_equal(w->cap->settles, 1);
    const settle_rec_t *s = &w->cap->log[0];
    assert_int_equal(s->outcomes[0], PB_OUT_EXPIRED);
    assert_true(s->dead[0]);
    assert_string_equal(s->reasons[0], "expired");
    for (size_t i = 1; i < 4; i++)
        assert_int_equal(s->outcomes[i], PB_OUT_PUBLISHED);
    assert_int_equal(w->snk->tries[1], 0);
    assert_int_equal(w->snk->checks[1], 0);
    assert_int_equal(row_of(w->cap, 1)->state, ROW_DEAD);
    assert_string_equal(row_of(w->cap, 1)->dead_reason, "expired");
    assert_published_once(w, 2);
    assert_published_once(w, 3);
    assert_published_once(w, 4);
    world_free(w);
}

/* The batch claimed ahead (behind_unsettled) is not held behind an expired event of the batch
 * before: batch 1 = [A1 B2] with A1 expired, batch 2 = [A3 B4] claimed while batch 1 was out;
 * A3 is published in batch 2, not held (an expired event is never published, so nothing of
 * its aggregate waits for it). */
static void expired_event_holds_nothing_back_in_the_batch_ahead(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_poll_ops, true, 2, 5);
    add_rows(w->cap, "ABAB");
    row_of(w->cap, 1)->expires_at_us = 1; /* 1970 */
    world_run(w);
    assert_clean_run(w);
    size_t i3 = 0;
    const settle_rec_t *s3 = first_settle_of(w->cap, 3, &i3);
    assert_non_null(s3);
    assert_int_equal(s3->batch, 2);
    assert_int_equal(s3->outcomes[i3], PB_OUT_PUBLISHED);
    assert_int_equal(settles_with(w->cap, 3, PB_OUT_HELD), 0);
    assert_int_equal(row_of(w->cap, 1)->state, ROW_DEAD);
    assert_int_equal(w->snk->tries[1], 0);
    world_free(w);
}

/* A capture that asks the driver to judge the times (the cdc stream), one batch
 * [A1 B2 A3 C4 B5 C6]: A1's available_at is an hour away, so A1 and A3 after it are deferred;
 * C4 comes behind an event of C set aside in an earlier batch (behind_deferred), so C4 and C6
 * are deferred; B flows on. Deferred is final for the in-place capture: one settle, nothing of
 * A or C sent. */
static void not_due_events_and_their_aggregate_are_deferred(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_inplace_ops, false, 8, 5);
    w->cap->check_due = true;
    add_rows(w->cap, "ABACBC");
    row_of(w->cap, 1)->available_at_us = pb_wall_us() + HOUR_US;
    row_of(w->cap, 2)->available_at_us = pb_wall_us() - HOUR_US; /* due */
    row_of(w->cap, 4)->behind = true;
    world_run(w);
    assert_clean_run(w);
    assert_int_equal(w->cap->settles, 1);
    const settle_rec_t *s = &w->cap->log[0];
    pb_outcome_t want[6] = {PB_OUT_DEFERRED, PB_OUT_PUBLISHED, PB_OUT_DEFERRED,
                            PB_OUT_DEFERRED, PB_OUT_PUBLISHED, PB_OUT_DEFERRED};
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(s->outcomes[i], want[i]);
        assert_false(s->dead[i]);
    }
    for (int64_t id = 1; id <= 6; id++)
        if (id != 2 && id != 5) {
            assert_int_equal(w->snk->tries[id], 0);
            assert_int_equal(row_of(w->cap, id)->state, ROW_SET_ASIDE);
        }
    assert_published_once(w, 2);
    assert_published_once(w, 5);
    world_free(w);
}

/* An event whose available_at is to come is published when the capture says its batch is due
 * (the poll capture: the claim decided by the database's clock): the driver does not judge
 * again by its own. */
static void due_batches_are_not_judged_again(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_poll_ops, true, 4, 5);
    add_rows(w->cap, "AB");
    row_of(w->cap, 1)->available_at_us = pb_wall_us() + HOUR_US;
    world_run(w);
    assert_clean_run(w);
    assert_all_published_once(w);
    world_free(w);
}

/* In place, an event retried past its expiry expires: [A1 B2 A3], A1 always fails and expires
 * 100 ms from now (retried every few milliseconds meanwhile, max_attempts far away); it ends
 * dead-lettered with reason "expired", and A3, held behind it while it was retried, is published
 * after it. */
static void retried_in_place_until_it_expires(void **state)
{
    (void)state;
    world_t *w = world_new(&fake_inplace_ops, false, 8, 100000);
    w->cfg.relay_backoff_base = 5;
    w->cfg.relay_backoff_cap = 5;
    add_rows(w->cap, "ABA");
    w->snk->script[1] = SS_ALWAYS_RETRY;
    row_of(w->cap, 1)->expires_at_us = pb_wall_us() + 100000;
    world_run(w);
    assert_clean_run(w);
    assert_int_equal(w->cap->settles, 1);
    const settle_rec_t *s = &w->cap->log[0];
    assert_int_equal(s->outcomes[0], PB_OUT_EXPIRED);
    assert_true(s->dead[0]);
    assert_string_equal(s->reasons[0], "expired");
    assert_true(w->snk->tries[1] >= 2);
    assert_int_equal(w->snk->published[1], 0);
    assert_published_once(w, 2);
    assert_published_once(w, 3);
    assert_int_equal(w->snk->tries[3], 1); /* held while A1 was retried, then sent once */
    world_free(w);
}

int main(void)
{
    pb_log_set_level("error");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(failed_event_holds_back_its_aggregate_three_batches_ahead,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(failed_event_holds_back_its_aggregate_two_batches_ahead,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(failed_event_holds_back_its_aggregate_in_the_batch_ahead,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(retry_then_dead_letter_after_max_attempts, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(check_rejects_and_holds_back_the_aggregate, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(lost_broker_connection_in_mid_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(lost_broker_connection_waits_for_the_broker, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(stop_in_mid_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(stop_while_retrying_in_place, setup, teardown),
        cmocka_unit_test_setup_teardown(drain_returns_once_everything_is_relayed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(drain_of_an_empty_outbox, setup, teardown),
        cmocka_unit_test_setup_teardown(in_place_retries_until_published, setup, teardown),
        cmocka_unit_test_setup_teardown(in_place_dead_letter_and_reject, setup, teardown),
        cmocka_unit_test_setup_teardown(in_place_checks_events_held_behind_a_rejection, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(in_place_lost_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(retry_is_not_overtaken_by_its_aggregate, setup, teardown),
        cmocka_unit_test_setup_teardown(expired_event_is_dead_lettered_not_sent, setup, teardown),
        cmocka_unit_test_setup_teardown(expired_event_holds_nothing_back_in_the_batch_ahead, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(not_due_events_and_their_aggregate_are_deferred, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(due_batches_are_not_judged_again, setup, teardown),
        cmocka_unit_test_setup_teardown(retried_in_place_until_it_expires, setup, teardown),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    pb_metrics_reset();
    return failed;
}
