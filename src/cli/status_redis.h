/* The Redis Streams part of `postbox status` (with relay.sink or consume.source = redis): each
 * stream's length and, per consumer group, the entries pending, not yet delivered (lag) and the
 * oldest pending entry's idle time. */
#ifndef PB_CLI_STATUS_REDIS_H
#define PB_CLI_STATUS_REDIS_H

#include <jansson.h>
#include <stdbool.h>

#include "config/config.h"

/* Whether the configuration uses Redis at all. */
bool pb_status_redis_wanted(const pb_config_t *cfg);

/* The "redis" object of the status: {"server", "version", "streams": [...]} or, when Redis
 * cannot be asked, {"server", "error"}. The streams are redis.streams, else the streams whose
 * name starts with redis.stream_prefix (at most 100). Returns a new reference. */
json_t *pb_status_redis(const pb_config_t *cfg);

/* Prints the object made by pb_status_redis as a table. */
void pb_status_redis_print(const json_t *redis);

#endif
