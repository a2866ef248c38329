/* The brokers: the relay's sink and the consumer's source, each with its configuration checked
 * as a starting relay or consumer checks it (their constructors, which connect nothing), then
 * the broker itself asked, once per broker when both sides use the same. */
#include <string.h>

#include "check/check_int.h"
#include "sink/sink.h"
#include "source/source.h"

typedef void (*broker_fn)(pb_check_ctx_t *ctx, bool sink, bool source);

static const struct {
    const char *name;
    broker_fn check;
} brokers[] = {
    {"amqp", pb_check_amqp},
    {"nats", pb_check_nats},
    {"redis", pb_check_redis},
    {"kafka", pb_check_kafka},
};

static bool sink_config(pb_check_ctx_t *ctx)
{
    pb_sink_t *snk;
    pb_error_t err;
    if (pb_sink_new(ctx->cfg, &snk, &err) != PB_OK) {
        pb_check_finding_t *f = pb_check_add(ctx->r, PB_CHECK_FAIL, "sink.config", "%s", err.msg);
        pb_check_hint(f, "the relay refuses to start with this configuration (relay.sink = %s)",
                      ctx->cfg->relay_sink);
        return false;
    }
    pb_sink_free(snk);
    if (strcmp(ctx->cfg->relay_sink, "stdout") == 0) {
        pb_check_add(ctx->r, PB_CHECK_OK, "sink.config",
                     "relay.sink = stdout: events go to standard output, no broker to check");
        return false;
    }
    return true;
}

static bool source_config(pb_check_ctx_t *ctx)
{
    const pb_config_t *cfg = ctx->cfg;
    pb_check_finding_t *f;
    if (!*cfg->consume_handler && !cfg->n_handlers) {
        f = pb_check_add(ctx->r, PB_CHECK_FAIL, "source.config",
                         "no handler configured: postbox consume has nothing to run");
        pb_check_hint(f, "set consume.handler or a [handlers] entry");
        return false;
    }
    pb_source_t *src;
    pb_error_t err;
    if (pb_source_new(cfg, &src, &err) != PB_OK) {
        f = pb_check_add(ctx->r, PB_CHECK_FAIL, "source.config", "%s", err.msg);
        pb_check_hint(f, "postbox consume refuses to start with this configuration "
                         "(consume.source = %s)",
                      cfg->consume_source);
        return false;
    }
    pb_source_free(src);
    return true;
}

void pb_check_broker(pb_check_ctx_t *ctx)
{
    bool sink = (ctx->sides & PB_CHECK_RELAY) && sink_config(ctx);
    bool source = (ctx->sides & PB_CHECK_CONSUME) && source_config(ctx);
    for (size_t i = 0; i < sizeof brokers / sizeof brokers[0]; i++) {
        bool s = sink && strcmp(ctx->cfg->relay_sink, brokers[i].name) == 0;
        bool c = source && strcmp(ctx->cfg->consume_source, brokers[i].name) == 0;
        if (s || c)
            brokers[i].check(ctx, s, c);
    }
}
