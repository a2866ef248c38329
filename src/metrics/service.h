/* What the relay and the consumer start next to their loop: the metrics registry's process
 * info, the HTTP endpoint (metrics.listen) and the janitor (sampling, retention purge). */
#ifndef PB_METRICS_SERVICE_H
#define PB_METRICS_SERVICE_H

#include "common/err.h"
#include "config/config.h"

typedef struct pb_ops pb_ops_t;

/* component: "relay" (samples the outbox, purges it with relay.retention and its dead letters
 * with relay.dead_letter_retention[_types]) or "consume" (purges its consumer's inbox rows with
 * consume.retention and its dead messages with consume.dead_retention[_types]). PB_FATAL when metrics.listen cannot be
 * served. cfg is borrowed and must outlive the result. */
pb_status_t pb_ops_start(const pb_config_t *cfg, const char *component, pb_ops_t **out,
                         pb_error_t *err) PB_MUSTCHECK;

/* Stops and frees what pb_ops_start started. Accepts NULL. */
void pb_ops_stop(pb_ops_t *ops);

#endif
