/* Kafka connection code shared by the kafka sink and source (librdkafka 2.0.2): the client
 * configuration built from postbox's options and the user's kafka.* properties, librdkafka's
 * log routed into ours, a reachability check, and the classes of librdkafka's errors. */
#ifndef PB_BROKER_KAFKA_CONF_H
#define PB_BROKER_KAFKA_CONF_H

#include <stdbool.h>
#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "common/err.h"
#include "config/config.h"

typedef enum pb_kafka_role {
    PB_KAFKA_PRODUCER, /* the relay's sink */
    PB_KAFKA_CONSUMER, /* postbox consume's source (a consumer group member) */
} pb_kafka_role_t;

/* A property postbox sets for a role, whatever the user's kafka.* properties say. */
typedef struct pb_kafka_forced {
    const char *name;
    const char *value;
} pb_kafka_forced_t;

/* librdkafka's callbacks a client wants (NULL: none), all served by rd_kafka_poll or
 * rd_kafka_consumer_poll on the caller's thread; opaque is the handle's rd_kafka_opaque. */
typedef struct pb_kafka_callbacks {
    void *opaque;
    void (*delivery)(rd_kafka_t *, const rd_kafka_message_t *, void *);
    void (*rebalance)(rd_kafka_t *, rd_kafka_resp_err_t, rd_kafka_topic_partition_list_t *,
                      void *);
    void (*error)(rd_kafka_t *, int, const char *, void *);
    int (*stats)(rd_kafka_t *, char *, size_t, void *);
} pb_kafka_callbacks_t;

/* Creates a client handle: bootstrap.servers from kafka.brokers, postbox's defaults (client.id;
 * producer: message.timeout.ms 30 s, statistics.interval.ms 5 s, linger.ms 1; consumer: auto.offset.reset
 * earliest), then every kafka.* property of cfg in its order, then the forced ones
 * (NULL-terminated list; a user property that sets one of them to another value is a fatal
 * error naming it, as is a property librdkafka does not know or a value it refuses).
 * librdkafka's log lines go to our log under facility "kafka". PB_FATAL for every failure:
 * none of them goes away with a retry. */
pb_status_t pb_kafka_new(const pb_config_t *cfg, pb_kafka_role_t role,
                         const pb_kafka_forced_t *forced, const pb_kafka_callbacks_t *cb,
                         rd_kafka_t **out, pb_error_t *err) PB_MUSTCHECK;

/* The consumer group of postbox consume: kafka.group, else "postbox_" + consume.consumer. */
void pb_kafka_group(const pb_config_t *cfg, char *out, size_t n);

/* kafka.topics as a subscription list (names trimmed; "^..." a regular expression); NULL when
 * it names none. The caller destroys it. */
rd_kafka_topic_partition_list_t *pb_kafka_topics(const pb_config_t *cfg);

/* Asks the cluster for its brokers within timeout_ms: PB_OK when one answered, PB_TRANSIENT
 * naming kafka.brokers and librdkafka's reason otherwise. */
pb_status_t pb_kafka_check_reachable(rd_kafka_t *rk, const pb_config_t *cfg, int timeout_ms,
                                     pb_error_t *err) PB_MUSTCHECK;

/* Whether a delivery or produce error can never be cured by publishing again: the message is
 * too large, the topic does not exist (and is not created) or its name is invalid, the record
 * is refused as such, or access is denied to the topic. */
bool pb_kafka_error_permanent(rd_kafka_resp_err_t e);

/* A short, stable name of an error kind for metrics and logs: librdkafka's error name without
 * its leading underscore, lower case ("msg_size_too_large", "msg_timed_out", ...). */
const char *pb_kafka_error_kind(rd_kafka_resp_err_t e, char *buf, size_t n);

#endif
