#include "source/source.h"

#include <string.h>

pb_status_t pb_source_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err)
{
    *out = NULL;
    if (strcmp(cfg->consume_source, "amqp") == 0)
        return pb_source_amqp_new(cfg, out, err);
    if (strcmp(cfg->consume_source, "nats") == 0)
        return pb_source_nats_new(cfg, out, err);
    return pb_fail(err, PB_FATAL, "consume.source: unknown source \"%s\"", cfg->consume_source);
}
