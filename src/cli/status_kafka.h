/* The Kafka part of `postbox status` (with relay.sink or consume.source = kafka): the brokers
 * the cluster lists and, for consume's group, per partition of kafka.topics the committed
 * offset, the end of the partition and the lag. */
#ifndef PB_CLI_STATUS_KAFKA_H
#define PB_CLI_STATUS_KAFKA_H

#include <jansson.h>
#include <stdbool.h>

#include "config/config.h"

/* Whether the configuration uses Kafka at all. */
bool pb_status_kafka_wanted(const pb_config_t *cfg);

/* The "kafka" object of the status: {"brokers", "broker_count", "group", "lag",
 * "partitions": [...]} or, when the cluster cannot be asked, {"brokers", "error"}. Returns a
 * new reference. */
json_t *pb_status_kafka(const pb_config_t *cfg);

/* Prints the object made by pb_status_kafka as a table. */
void pb_status_kafka_print(const json_t *kafka);

#endif
