#include "sink/sink.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/str.h"
#include "sink/cloudevents.h"

/* Every sink: its name in relay.sink and its constructor. */
static const struct {
    const char *name;
    pb_sink_new_fn make;
} sinks[] = {
    {"amqp", pb_sink_amqp_new},
    {"nats", pb_sink_nats_new},
    {"redis", pb_sink_redis_new},
    {"kafka", pb_sink_kafka_new},
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

/* Whether JSON headers text holds anything: "{}", the most common, skips the parser. */
static bool headers_present(const char *json)
{
    if (!json)
        return false;
    const char *p = json + strspn(json, " \t\r\n");
    if (*p != '{')
        return *p != '\0';
    p++;
    p += strspn(p, " \t\r\n");
    return *p != '}';
}

bool pb_sink_prepare(pb_sink_t *snk, pb_event_t *ev, pb_result_t *result)
{
    PB_ASSERT(ev->header_obj == NULL); /* once per event */
    if (headers_present(ev->headers)) {
        json_error_t jerr;
        json_t *root = json_loads(ev->headers, JSON_DECODE_ANY, &jerr);
        if (!root) {
            pb_result_setf(result, PB_OUT_REJECT, "headers are not valid JSON: %s", jerr.text);
            return false;
        }
        if (!json_is_object(root) && !json_is_null(root)) {
            json_decref(root);
            pb_result_set(result, PB_OUT_REJECT, "headers must be a JSON object");
            return false;
        }
        if (json_is_object(root) && json_object_size(root) > 0)
            ev->header_obj = root;
        else
            json_decref(root);
    }
    if (snk->ce && !pb_ce_check_event(ev, result))
        return false;
    return !snk->ops->check || snk->ops->check(snk, ev, result);
}

void pb_sink_release(pb_event_t *ev)
{
    json_decref(ev->header_obj);
    ev->header_obj = NULL;
}

pb_status_t pb_sink_publish(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    pb_status_t st = snk->ops->send(snk, b, err);
    return st == PB_OK ? snk->ops->await(snk, b, err) : st;
}

void pb_result_set(pb_result_t *r, pb_outcome_t outcome, const char *reason)
{
    r->outcome = outcome;
    r->duplicate = false;
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
    r->duplicate = false;
    pb_text_copy(r->error, sizeof r->error, msg);
}
