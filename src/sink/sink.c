#include "sink/sink.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/str.h"

pb_status_t pb_sink_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err)
{
    *out = NULL;
    if (strcmp(cfg->relay_sink, "amqp") == 0)
        return pb_sink_amqp_new(cfg, out, err);
    if (strcmp(cfg->relay_sink, "nats") == 0)
        return pb_sink_nats_new(cfg, out, err);
    if (strcmp(cfg->relay_sink, "stdout") == 0)
        return pb_sink_stdout_new(cfg, out, err);
    return pb_fail(err, PB_FATAL, "relay.sink: unknown sink \"%s\"", cfg->relay_sink);
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
