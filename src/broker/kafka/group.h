/* A consumer group's position in its topics, asked of the cluster (for `postbox status`): per
 * partition of kafka.topics the group's committed offset, the partition's end, and the lag. */
#ifndef PB_BROKER_KAFKA_GROUP_H
#define PB_BROKER_KAFKA_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "config/config.h"

typedef struct pb_kafka_partition_lag {
    char topic[256];
    int32_t partition;
    int64_t committed; /* -1: the group committed nothing here */
    int64_t end;       /* high watermark */
    int64_t lag;       /* end - committed (from the low watermark when nothing is committed) */
} pb_kafka_partition_lag_t;

typedef struct pb_kafka_group_lag {
    char group[256];
    int brokers; /* brokers the cluster lists */
    pb_kafka_partition_lag_t *parts; /* owned; pb_kafka_group_lag_free */
    size_t n;
} pb_kafka_group_lag_t;

/* Asks the cluster at kafka.brokers about cfg's consumer group (pb_kafka_group) over the topics
 * named in kafka.topics (patterns "^..." are skipped: they name no topic). Without kafka.topics
 * only the brokers are counted. PB_TRANSIENT when the cluster cannot be asked, PB_FATAL for a
 * bad configuration. */
pb_status_t pb_kafka_group_lag(const pb_config_t *cfg, pb_kafka_group_lag_t *out,
                               pb_error_t *err) PB_MUSTCHECK;

void pb_kafka_group_lag_free(pb_kafka_group_lag_t *g);

#endif
