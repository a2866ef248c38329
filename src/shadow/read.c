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
    } else {
        return pb_fail(err, PB_FATAL, "%s \"%s\": expected amqp:QUEUE (RabbitMQ) or redis:STREAM "
                                      "(Redis Streams)", what, text);
    }
    return PB_OK;
}

pb_status_t pb_shadow_read(const pb_config_t *cfg, const pb_shadow_source_t *src, size_t limit,
                           pb_shadow_msgs_t *out, pb_error_t *err)
{
    if (src->broker == PB_SHADOW_AMQP)
        return pb_shadow_read_amqp(cfg, src->name, limit, out, err);
    return pb_shadow_read_redis(cfg, src->name, src->body_field, limit, out, err);
}
