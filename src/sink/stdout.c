/* stdout sink: one JSON object per event on standard output, for development and pipelines.
 * An event counts as published once the line is flushed to the stdout file descriptor. With
 * stdout.cloudevents = structured the object is a CloudEvent in the JSON event format: the
 * attributes as sink/cloudevents.h makes them, the extension attribute destination, and the
 * payload as data; headers other than the trace context have no attribute to go to. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/route.h"
#include "common/str.h"
#include "sink/cloudevents.h"
#include "sink/sink.h"

typedef struct stdout_sink {
    pb_sink_t base;
    pb_buf_t line;
    pb_buf_t value; /* an attribute's value, NUL-terminated for the JSON writer */
} stdout_sink_t;

static pb_status_t stdout_connect(pb_sink_t *snk, pb_error_t *err)
{
    (void)snk;
    (void)err;
    return PB_OK;
}

/* Appends JSON text re-indented (stdout.pretty), or as it is; parsed is the text already
 * parsed, when it was. */
static void append_json(stdout_sink_t *s, const char *text, const json_t *parsed)
{
    if (!s->base.cfg->stdout_pretty) {
        pb_buf_puts(&s->line, text);
        return;
    }
    json_t *v = parsed ? NULL : json_loads(text, JSON_DECODE_ANY, NULL);
    const json_t *show = parsed ? parsed : v;
    char *out =
        show ? json_dumps(show, JSON_INDENT(2) | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER) : NULL;
    pb_buf_puts(&s->line, out ? out : text);
    free(out);
    json_decref(v);
}

/* One line in the JSON event format. */
static void put_cloudevent(stdout_sink_t *s, const pb_event_t *ev, const char *route)
{
    pb_ce_attr_t attrs[PB_CE_NATTRS];
    size_t na = pb_ce_attrs(s->base.ce, ev, attrs);
    pb_buf_putc(&s->line, '{');
    for (size_t k = 0; k < na; k++) {
        pb_buf_reset(&s->value);
        pb_buf_append(&s->value, attrs[k].value, attrs[k].len);
        pb_buf_append_json_string(&s->line, attrs[k].name);
        pb_buf_putc(&s->line, ':');
        pb_buf_append_json_string(&s->line, s->value.data);
        pb_buf_putc(&s->line, ',');
    }
    pb_buf_puts(&s->line, "\"destination\":");
    pb_buf_append_json_string(&s->line, route);
    pb_buf_puts(&s->line, ",\"data\":");
    append_json(s, ev->payload, NULL);
    pb_buf_puts(&s->line, "}\n");
}

static pb_status_t stdout_send(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    stdout_sink_t *s = (stdout_sink_t *)snk;
    const pb_event_t *events = b->events;
    pb_result_t *results = b->results;
    size_t n = b->n;
    char route[256];
    pb_buf_reset(&s->line);
    for (size_t i = 0; i < n; i++) {
        if (results[i].outcome != PB_OUT_UNTRIED)
            continue;
        const pb_event_t *ev = &events[i];
        pb_route_render(snk->cfg->stdout_destination, ev, route, sizeof route);
        if (s->base.ce) {
            put_cloudevent(s, ev, route);
            continue;
        }
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
        pb_buf_printf(&s->line, ",\"created_at_us\":%lld,\"headers\":",
                      (long long)ev->created_at_us);
        append_json(s, ev->headers ? ev->headers : "{}", ev->header_obj);
        pb_buf_puts(&s->line, ",\"payload\":");
        append_json(s, ev->payload, NULL);
        pb_buf_puts(&s->line, "}\n");
    }
    size_t written = fwrite(s->line.data ? s->line.data : "", 1, s->line.len, stdout);
    int flushed = fflush(stdout);
    bool ok = written == s->line.len && flushed == 0;
    for (size_t i = 0; i < n; i++) {
        if (results[i].outcome != PB_OUT_UNTRIED)
            continue;
        if (ok)
            results[i].outcome = PB_OUT_PUBLISHED;
        else
            pb_result_setf(&results[i], PB_OUT_RETRY, "write to stdout failed: %s",
                           strerror(errno));
    }
    if (!ok)
        return pb_fail(err, PB_TRANSIENT, "write to stdout failed: %s", strerror(errno));
    return PB_OK;
}

/* Everything is settled by send: a line counts once it is flushed. */
static pb_status_t stdout_await(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    (void)snk;
    (void)b;
    (void)err;
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
    pb_buf_free(&s->value);
    pb_ce_free(s->base.ce);
    free(s);
}

static const pb_sink_ops_t stdout_ops = {
    .name = "stdout",
    .max_in_flight = 1,
    .connect = stdout_connect,
    .send = stdout_send,
    .await = stdout_await,
    .check = NULL,
    .idle = stdout_idle,
    .free = stdout_free,
};

pb_status_t pb_sink_stdout_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err)
{
    pb_error_t why;
    if (pb_route_check_template(cfg->stdout_destination, &why) != PB_OK)
        return pb_fail(err, PB_FATAL, "stdout.destination: %s", why.msg);
    pb_ce_t *ce = NULL;
    if (pb_ce_wanted(cfg->stdout_cloudevents)) {
        pb_status_t st = pb_ce_new(cfg, PB_CE_JSON, NULL, &ce, err);
        if (st != PB_OK)
            return st;
    }
    stdout_sink_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->base.ops = &stdout_ops;
    s->base.cfg = cfg;
    s->base.ce = ce;
    *out = &s->base;
    return PB_OK;
}
