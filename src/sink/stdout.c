/* stdout sink: one JSON object per event on standard output, for development and pipelines.
 * An event counts as published once the line is flushed to the stdout file descriptor. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/route.h"
#include "common/str.h"
#include "sink/sink.h"

typedef struct stdout_sink {
    pb_sink_t base;
    pb_buf_t line;
} stdout_sink_t;

static pb_status_t stdout_connect(pb_sink_t *snk, pb_error_t *err)
{
    (void)snk;
    (void)err;
    return PB_OK;
}

static pb_status_t stdout_publish(pb_sink_t *snk, const pb_event_t *events, size_t n,
                                  pb_result_t *results, pb_error_t *err)
{
    stdout_sink_t *s = (stdout_sink_t *)snk;
    char route[256];
    pb_buf_reset(&s->line);
    for (size_t i = 0; i < n; i++) {
        if (results[i].outcome != PB_OUT_UNTRIED)
            continue;
        const pb_event_t *ev = &events[i];
        pb_route_render(snk->cfg->amqp_routing_key, ev, route, sizeof route);
        pb_buf_puts(&s->line, "{\"event_id\":");
        pb_buf_append_json_string(&s->line, ev->event_id);
        pb_buf_puts(&s->line, ",\"aggregate_type\":");
        pb_buf_append_json_string(&s->line, ev->aggregate_type);
        pb_buf_puts(&s->line, ",\"aggregate_id\":");
        pb_buf_append_json_string(&s->line, ev->aggregate_id);
        pb_buf_puts(&s->line, ",\"event_type\":");
        pb_buf_append_json_string(&s->line, ev->event_type);
        pb_buf_puts(&s->line, ",\"destination\":");
        pb_buf_append_json_string(&s->line, route);
        pb_buf_printf(&s->line, ",\"created_at_us\":%lld,\"headers\":%s,\"payload\":%s}\n",
                      (long long)ev->created_at_us, ev->headers ? ev->headers : "{}", ev->payload);
    }
    size_t written = fwrite(s->line.data ? s->line.data : "", 1, s->line.len, stdout);
    int flushed = fflush(stdout);
    bool ok = written == s->line.len && flushed == 0;
    for (size_t i = 0; i < n; i++) {
        if (results[i].outcome != PB_OUT_UNTRIED)
            continue;
        results[i].outcome = ok ? PB_OUT_PUBLISHED : PB_OUT_RETRY;
        if (!ok)
            snprintf(results[i].error, sizeof results[i].error, "write to stdout failed: %s",
                     strerror(errno));
    }
    if (!ok)
        return pb_fail(err, PB_TRANSIENT, "write to stdout failed: %s", strerror(errno));
    return PB_OK;
}

static pb_status_t stdout_idle(pb_sink_t *snk, pb_error_t *err)
{
    (void)snk;
    (void)err;
    return PB_OK;
}

static void stdout_free(pb_sink_t *snk)
{
    stdout_sink_t *s = (stdout_sink_t *)snk;
    if (!s)
        return;
    pb_buf_free(&s->line);
    free(s);
}

static const pb_sink_ops_t stdout_ops = {
    .name = "stdout",
    .connect = stdout_connect,
    .publish = stdout_publish,
    .check = NULL,
    .idle = stdout_idle,
    .free = stdout_free,
};

pb_status_t pb_sink_stdout_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err)
{
    (void)err;
    stdout_sink_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->base.ops = &stdout_ops;
    s->base.cfg = cfg;
    *out = &s->base;
    return PB_OK;
}
