#include "sink/sink.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/str.h"

/* Every sink: its name in relay.sink and its constructor. */
static const struct {
    const char *name;
    pb_sink_new_fn make;
} sinks[] = {
    {"amqp", pb_sink_amqp_new},
    {"nats", pb_sink_nats_new},
    {"stdout", pb_sink_stdout_new},
};

pb_status_t pb_sink_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err)
{
    *out = NULL;
    for (size_t i = 0; i < sizeof sinks / sizeof sinks[0]; i++)
        if (strcmp(cfg->relay_sink, sinks[i].name) == 0)
            return sinks[i].make(cfg, out, err);
    return pb_fail(err, PB_FATAL, "relay.sink: unknown sink \"%s\"", cfg->relay_sink);
}

pb_status_t pb_sink_publish(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    pb_status_t st = snk->ops->send(snk, b, err);
    return st == PB_OK ? snk->ops->await(snk, b, err) : st;
}

void pb_result_set(pb_result_t *r, pb_outcome_t outcome, const char *reason)
{
    r->outcome = outcome;
    pb_text_copy(r->error, sizeof r->error, reason);
}

void pb_result_setf(pb_result_t *r, pb_outcome_t outcome, const char *fmt, ...)
{
    char msg[1024]; /* longer than r->error, so the cut happens in pb_text_copy */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->outcome = outcome;
    pb_text_copy(r->error, sizeof r->error, msg);
}
