#include "consume/subscription.h"

#include <stdio.h>
#include <string.h>

#include "common/str.h"

/* Whether the comma-separated list holds word. */
static bool list_has(const char *list, const char *word)
{
    const char *p = list, *item;
    size_t len;
    while (pb_list_next(&p, &item, &len))
        if (len == strlen(word) && memcmp(item, word, len) == 0)
            return true;
    return false;
}

/* A destination template that puts the events of one aggregate in several places. */
static bool splits_aggregate(const char *template)
{
    return strstr(template, "{event_type}") || strstr(template, "{event_id}");
}

static bool amqp_complete(const pb_config_t *cfg, char *why, size_t n)
{
    if (!cfg->amqp_queue_declare) {
        snprintf(why, n, "amqp.queue_declare is false, so the queue's bindings are not known");
        return false;
    }
    if (strcmp(cfg->amqp_exchange_type, "fanout") == 0) {
        bool bound = *cfg->amqp_bindings != '\0';
        snprintf(why, n, bound ? "the queue is bound to fanout exchange %s"
                               : "the queue is not bound to fanout exchange %s",
                 cfg->amqp_exchange);
        return bound;
    }
    if (strcmp(cfg->amqp_exchange_type, "topic") == 0 && list_has(cfg->amqp_bindings, "#")) {
        snprintf(why, n, "amqp.bindings has '#'");
        return true;
    }
    snprintf(why, n, "amqp.bindings '%s' on a %s exchange may take only some event types",
             cfg->amqp_bindings, cfg->amqp_exchange_type);
    return false;
}

static bool nats_complete(const pb_config_t *cfg, char *why, size_t n)
{
    const char *f = cfg->nats_filter_subject;
    char all[512];
    snprintf(all, sizeof all, "%s>", cfg->nats_subject_prefix);
    if (!*f || strcmp(f, ">") == 0 ||
        (!*cfg->nats_stream_subjects && strcmp(f, all) == 0) ||
        (*cfg->nats_stream_subjects && strcmp(f, cfg->nats_stream_subjects) == 0)) {
        snprintf(why, n, "it reads the whole stream %s", cfg->nats_stream);
        return true;
    }
    snprintf(why, n, "nats.filter_subject '%s' may take only some event types", f);
    return false;
}

static bool template_complete(const char *option, const char *template, char *why, size_t n)
{
    if (splits_aggregate(template)) {
        snprintf(why, n, "%s '%s' sends one aggregate's events to several places", option,
                 template);
        return false;
    }
    snprintf(why, n, "%s '%s' keeps one aggregate's events in one place", option, template);
    return true;
}

bool pb_subscription_waits_for_gaps(const pb_config_t *cfg, char *why, size_t n)
{
    if (strcmp(cfg->consume_wait_for_gaps, "always") == 0) {
        snprintf(why, n, "consume.wait_for_gaps = always");
        return true;
    }
    if (strcmp(cfg->consume_wait_for_gaps, "never") == 0) {
        snprintf(why, n, "consume.wait_for_gaps = never");
        return false;
    }
    if (cfg->consume_gap_timeout == 0) {
        snprintf(why, n, "consume.gap_timeout = 0");
        return false;
    }
    const char *src = cfg->consume_source;
    if (strcmp(src, "amqp") == 0)
        return amqp_complete(cfg, why, n);
    if (strcmp(src, "nats") == 0)
        return nats_complete(cfg, why, n);
    if (strcmp(src, "redis") == 0)
        return template_complete("redis.stream", cfg->redis_stream, why, n);
    if (strcmp(src, "kafka") == 0)
        return template_complete("kafka.topic", cfg->kafka_topic, why, n);
    snprintf(why, n, "source %s is not known to take every event", src);
    return false;
}
