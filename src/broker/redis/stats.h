/* What a Redis stream and its consumer groups hold, for `postbox status` and /metrics: the
 * stream's length, and per group the entries pending (delivered, not acknowledged), the entries
 * not yet delivered (lag) and how long the oldest pending entry has been idle.
 *
 * Cost: XLEN, XINFO GROUPS and one XPENDING ... - + 1 per group with pending entries, all
 * constant-time or bounded by the number of groups. @thread the context's. */
#ifndef PB_BROKER_REDIS_STATS_H
#define PB_BROKER_REDIS_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "common/err.h"

#define PB_REDIS_STATS_GROUPS 16 /* groups reported per stream at most */

typedef struct pb_redis_group_stats {
    char name[128];
    int64_t pending;        /* entries delivered and not acknowledged */
    int64_t lag;            /* entries not delivered yet; -1 when Redis cannot tell */
    int64_t consumers;
    double oldest_idle_s;   /* idle time of the oldest pending entry (lowest id); 0 when none */
    char oldest_consumer[128]; /* the consumer it is pending on; "" when none */
} pb_redis_group_stats_t;

typedef struct pb_redis_stream_stats {
    bool exists;
    int64_t length;
    size_t ngroups;          /* of the groups reported (at most PB_REDIS_STATS_GROUPS) */
    size_t groups_total;     /* of the stream */
    pb_redis_group_stats_t groups[PB_REDIS_STATS_GROUPS];
} pb_redis_stream_stats_t;

/**
 * @brief Fills *out for stream and its groups: every group with group NULL, only the named one
 * otherwise ("" for none: the length alone).
 * @returns PB_OK (a missing stream is exists = false), PB_TRANSIENT when the connection failed,
 *          PB_FATAL when the key is not a stream or a reply is not understood.
 */
pb_status_t pb_redis_stream_stats(redisContext *c, const char *where, const char *stream,
                                  const char *group, pb_redis_stream_stats_t *out,
                                  pb_error_t *err) PB_MUSTCHECK;

#endif
