#include "source/source.h"

#include <stdio.h>
#include <string.h>

int64_t pb_source_sequence(const char *text, size_t len)
{
    int64_t v = 0;
    if (!text || len == 0 || len > 18)
        return 0; /* 18 digits cannot overflow */
    for (size_t i = 0; i < len; i++) {
        if (text[i] < '0' || text[i] > '9')
            return 0;
        v = v * 10 + (text[i] - '0');
    }
    return v;
}

bool pb_source_template_keeps_aggregate(const char *option, const char *template, char *why,
                                        size_t n)
{
    if (strstr(template, "{event_type}") || strstr(template, "{event_id}")) {
        snprintf(why, n, "%s '%s' sends one aggregate's events to several places", option,
                 template);
        return false;
    }
    snprintf(why, n, "%s '%s' keeps one aggregate's events in one place", option, template);
    return true;
}

/* Every source: its name in consume.source and its constructor, which checks its own
 * configuration. */
static const struct {
    const char *name;
    pb_status_t (*make)(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err);
} sources[] = {
    {"amqp", pb_source_amqp_new},
    {"nats", pb_source_nats_new},
    {"redis", pb_source_redis_new},
    {"kafka", pb_source_kafka_new},
};

pb_status_t pb_source_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err)
{
    *out = NULL;
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++)
        if (strcmp(cfg->consume_source, sources[i].name) == 0)
            return sources[i].make(cfg, out, err);
    return pb_fail(err, PB_FATAL, "consume.source: unknown source \"%s\"", cfg->consume_source);
}
