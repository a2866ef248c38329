/* `postbox consume`: the wiring of the consume driver (driver.h) to the configured source and to
 * the PostgreSQL inbox, one connection per lane. */
#include "consume/consume.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check.h"
#include "common/log.h"
#include "consume/driver.h"
#include "consume/subscription.h"
#include "inbox/inbox.h"
#include "metrics/service.h"
#include "source/source.h"
#include "store/pg.h"

#define FAC "consume"

/* The PostgreSQL inbox of the driver: a connection and a pb_inbox_t per lane. */
typedef struct pg_inbox {
    const pb_config_t *cfg;
    bool wait_for_gaps;
    int n_lanes;
    PGconn *conn[16];
    pb_inbox_t ib[16];
} pg_inbox_t;

static void pg_disconnect(void *ctx)
{
    pg_inbox_t *p = ctx;
    for (int l = 0; l < p->n_lanes; l++) {
        if (!p->conn[l])
            continue;
        pb_inbox_free(&p->ib[l]);
        PQfinish(p->conn[l]);
        p->conn[l] = NULL;
    }
    p->n_lanes = 0;
}

static pb_status_t pg_connect(void *ctx, int n_lanes, pb_error_t *err)
{
    pg_inbox_t *p = ctx;
    p->n_lanes = n_lanes;
    for (int l = 0; l < n_lanes; l++) {
        pb_status_t st = pb_pg_connect_primary(p->cfg->postgres_dsn, &p->conn[l], err);
        if (st == PB_OK && (st = pb_inbox_init(&p->ib[l], p->conn[l], p->cfg, err)) != PB_OK) {
            PQfinish(p->conn[l]);
            p->conn[l] = NULL;
            if (st == PB_FATAL && pb_error_schema_missing(err))
                pb_fail(err, PB_FATAL, "%s (run `postbox init` first)", err->msg);
        }
        if (st != PB_OK) {
            pg_disconnect(p);
            return st;
        }
        p->ib[l].seq.wait_for_gaps = p->wait_for_gaps;
    }
    return PB_OK;
}

static pb_status_t pg_handle(void *ctx, int lane, const pb_message_t *msgs, const uint8_t *flags,
                             size_t n, pb_inbox_verdict_t *verdicts, pb_inbox_counts_t *counts,
                             pb_error_t *err)
{
    pg_inbox_t *p = ctx;
    return pb_inbox_handle(&p->ib[lane], msgs, flags, n, verdicts, counts, err);
}

static void pg_set_wait(void *ctx, void (*fn)(void *arg, int fd), void *arg)
{
    pg_inbox_t *p = ctx;
    pb_inbox_set_wait(&p->ib[0], fn, arg);
}

static void pg_describe(void *ctx, char *buf, size_t n)
{
    pg_inbox_t *p = ctx;
    pb_pg_describe(p->conn[0], buf, n);
}

static const pb_consume_inbox_ops_t pg_inbox_ops = {
    .connect = pg_connect,
    .disconnect = pg_disconnect,
    .handle = pg_handle,
    .set_wait = pg_set_wait,
    .describe = pg_describe,
};

/* Logs how the consumer orders (see subscription.h); returns whether it waits for gaps. */
static bool check_ordering(const pb_config_t *cfg, const pb_source_t *src)
{
    char why[400];
    bool wait_for_gaps = pb_subscription_waits_for_gaps(cfg, src, why, sizeof why);
    if (wait_for_gaps)
        log_info(FAC, "ordering: an aggregate's message waits up to %lld ms for a missing earlier "
                      "aggregate_sequence, since %s", (long long)cfg->consume_gap_timeout, why);
    else
        log_info(FAC, "ordering: the broker's order per aggregate, no wait for missing "
                      "aggregate_sequence numbers, since %s", why);
    return wait_for_gaps;
}

pb_status_t pb_consume_run(const pb_config_t *cfg, const pb_consume_opts_t *opts,
                           volatile sig_atomic_t *stop, pb_error_t *err)
{
    pb_status_t st = *cfg->consume_handler || cfg->n_handlers
                         ? PB_OK
                         : pb_fail(err, PB_FATAL, "no handler configured: set consume.handler or "
                                                  "a [handlers] entry");
    pb_source_t *src = NULL;
    if (st == PB_OK)
        st = pb_source_new(cfg, &src, err); /* checks the configuration, connects nothing */
    if (st != PB_OK) {
        if (opts->config_error)
            *opts->config_error = true;
        return st;
    }
    pb_check_at_start(cfg, PB_CHECK_CONSUME, FAC); /* what `postbox check` finds, as warnings */
    pg_inbox_t inbox = {.cfg = cfg, .wait_for_gaps = check_ordering(cfg, src)};
    pb_ops_t *ops; /* /metrics, /healthz, /readyz; inbox retention purge */
    if ((st = pb_ops_start(cfg, "consume", &ops, err)) == PB_OK) {
        pb_consume_setup_t setup = {.cfg = cfg, .src = src, .inbox = &pg_inbox_ops,
                                    .inbox_ctx = &inbox, .drain = opts->drain, .stop = stop};
        st = pb_consume_drive(&setup, err);
        pb_ops_stop(ops);
    }
    pb_source_free(src);
    return st;
}
