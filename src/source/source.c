#include "source/source.h"

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

pb_status_t pb_source_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err)
{
    *out = NULL;
    if (strcmp(cfg->consume_source, "amqp") == 0)
        return pb_source_amqp_new(cfg, out, err);
    if (strcmp(cfg->consume_source, "nats") == 0)
        return pb_source_nats_new(cfg, out, err);
    if (strcmp(cfg->consume_source, "redis") == 0)
        return pb_source_redis_new(cfg, out, err);
    if (strcmp(cfg->consume_source, "kafka") == 0)
        return pb_source_kafka_new(cfg, out, err);
    return pb_fail(err, PB_FATAL, "consume.source: unknown source \"%s\"", cfg->consume_source);
}
