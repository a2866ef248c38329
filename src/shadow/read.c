#include "shadow/read.h"

#include <string.h>

pb_status_t pb_shadow_source_parse(const char *text, const char *what, pb_shadow_source_t *out,
                                   pb_error_t *err)
{
    memset(out, 0, sizeof *out);
    out->text = text;
    out->body_field = "payload";
    if (strncmp(text, "amqp:", 5) == 0 && text[5]) {
        out->broker = PB_SHADOW_AMQP;
        out->name = text + 5;
    } else if (strncmp(text, "redis:", 6) == 0 && text[6]) {
        out->broker = PB_SHADOW_REDIS;
        out->name = text + 6;
    } else if (strncmp(text, "kafka:", 6) == 0 && text[6]) {
        out->broker = PB_SHADOW_KAFKA;
        out->name = text + 6;
    } else if (strncmp(text, "nats:", 5) == 0 && text[5]) {
        out->broker = PB_SHADOW_NATS;
        out->name = text + 5;
    } else {
        return pb_fail(err, PB_FATAL, "%s \"%s\": expected amqp:QUEUE (RabbitMQ), redis:STREAM "
                                      "(Redis Streams), kafka:TOPIC or nats:STREAM (JetStream)",
                       what, text);
    }
    return PB_OK;
}

pb_status_t pb_shadow_read(const pb_config_t *cfg, const pb_shadow_source_t *src, size_t limit,
                           pb_shadow_msgs_t *out, pb_error_t *err)
{
    switch (src->broker) {
    case PB_SHADOW_AMQP:
        return pb_shadow_read_amqp(cfg, src->name, limit, out, err);
    case PB_SHADOW_KAFKA:
        return pb_shadow_read_kafka(cfg, src->name, limit, out, err);
    case PB_SHADOW_NATS:
        return pb_shadow_read_nats(cfg, src->name, limit, out, err);
    default:
        return pb_shadow_read_redis(cfg, src->name, src->body_field, limit, out, err);
    }
}
