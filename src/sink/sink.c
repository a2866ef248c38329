#include "sink/sink.h"

#include <string.h>

pb_status_t pb_sink_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err)
{
    *out = NULL;
    if (strcmp(cfg->relay_sink, "amqp") == 0)
        return pb_sink_amqp_new(cfg, out, err);
    if (strcmp(cfg->relay_sink, "nats") == 0)
        return pb_sink_nats_new(cfg, out, err);
    if (strcmp(cfg->relay_sink, "stdout") == 0)
        return pb_sink_stdout_new(cfg, out, err);
    return pb_fail(err, PB_FATAL, "relay.sink: unknown sink \"%s\"", cfg->relay_sink);
}
