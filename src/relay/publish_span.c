#include "relay/publish_span.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/clock.h"
#include "common/str.h"
#include "metrics/metrics.h"
#include "sink/sink.h"

const char *pb_publish_span_system(const char *sink)
{
    return strcmp(sink, "amqp") == 0 ? "rabbitmq" : sink; /* nats, kafka, redis: the same words */
}

void pb_publish_span_init(pb_publish_span_t *ps, const pb_config_t *cfg, const char *sink,
                          pb_otlp_t *otlp)
{
    memset(ps, 0, sizeof *ps);
    ps->otlp = otlp;
    ps->system = pb_publish_span_system(sink);
    /* RabbitMQ publishes to one exchange (the conventions' destination; the routing key varies);
     * the other brokers' subjects, topics and streams come from a template per event, too many
     * names for a span name, so the span is just "publish" */
    if (strcmp(sink, "amqp") == 0 && *cfg->amqp_exchange)
        ps->destination = cfg->amqp_exchange;
    if (ps->destination)
        snprintf(ps->name, sizeof ps->name, "%s publish", ps->destination);
    else
        snprintf(ps->name, sizeof ps->name, "publish");
}

void pb_publish_span_begin(pb_publish_span_t *ps, const pb_result_t *results, size_t n)
{
    if (!ps->otlp)
        return;
    if (n > ps->cap) {
        ps->sent = pb_realloc(ps->sent, n * sizeof *ps->sent);
        ps->cap = n;
    }
    ps->n_sent = 0;
    for (size_t i = 0; i < n; i++)
        if (results[i].outcome == PB_OUT_UNTRIED)
            ps->sent[ps->n_sent++] = i;
    ps->start_ns = pb_wall_us() * 1000;
}

/* The producer's context of ev, when its headers carry a valid traceparent. */
static bool producer_link(const pb_event_t *ev, pb_otlp_link_t *link)
{
    const char *val;
    size_t len;
    if (!pb_header_string(ev, "traceparent", &val, &len) ||
        !pb_traceparent_parse(val, len, &link->ctx))
        return false;
    link->tracestate = NULL;
    link->tracestate_len = 0;
    if (pb_header_string(ev, "tracestate", &val, &len) && pb_tracestate_valid(val, len)) {
        link->tracestate = val;
        link->tracestate_len = len;
    }
    return true;
}

void pb_publish_span_end(pb_publish_span_t *ps, const pb_event_t *events,
                         const pb_result_t *results)
{
    if (!ps->otlp || ps->n_sent == 0)
        return;
    pb_otlp_span_t span = {.name = ps->name, .start_ns = ps->start_ns,
                           .end_ns = pb_wall_us() * 1000, .system = ps->system,
                           .destination = ps->destination, .message_count = ps->n_sent,
                           .links = ps->links};
    for (size_t k = 0; k < ps->n_sent; k++) {
        size_t i = ps->sent[k];
        if (results[i].outcome != PB_OUT_PUBLISHED) {
            if (!span.failed++)
                span.first_error = results[i].error;
        }
        if (span.n_links < PB_OTLP_MAX_LINKS) {
            if (producer_link(&events[i], &ps->links[span.n_links]))
                span.n_links++;
        } else {
            pb_otlp_link_t spare;
            span.dropped_links += producer_link(&events[i], &spare);
        }
    }
    /* a trace of its own: random ids, as an OpenTelemetry SDK makes them */
    uint8_t rnd[24];
    if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd)
    {
        pb_metrics_otlp_spans(0, 0, 1); /* no randomness now: no span rather than a made-up id */
        return;
    }
    pb_otlp_hex(rnd, 16, span.trace_id);
    pb_otlp_hex(rnd + 16, 8, span.span_id);
    pb_otlp_add(ps->otlp, &span);
}

void pb_publish_span_free(pb_publish_span_t *ps)
{
    free(ps->sent);
    ps->sent = NULL;
    ps->cap = ps->n_sent = 0;
}
