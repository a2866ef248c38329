/* Reading the two sides of `postbox shadow compare` without taking anything away from them.
 *
 * RabbitMQ (amqp:QUEUE): basic.get without acknowledgement until the queue is empty, every
 * message held unacknowledged on one channel (so none comes twice), then one basic.nack of them
 * all with requeue: the queue keeps every message, in its order, flagged redelivered. A
 * consumer on the same queue would take messages meanwhile: read a comparison queue of its own
 * (bound beside the consumers' queues) that nothing else consumes.
 *
 * Redis Streams (redis:STREAM): XRANGE from the first entry to the last, in pages; a stream is
 * not changed by reading it. The message body is the entry's field body_field, every field is
 * an attribute.
 *
 * Kafka (kafka:TOPIC): every partition from its low to its high watermark at the start, by a
 * consumer assigned the partitions, which joins no group and commits nothing. The body is the
 * record's value; its headers and its key (attribute "key") are the attributes.
 *
 * NATS JetStream (nats:STREAM): every message from the stream's first sequence to its last at
 * the start, one by one through the JetStream API (no consumer is made). The body is the data;
 * its headers and its subject (attribute "subject") are the attributes.
 *
 * Connections come from the configuration (amqp.url with its TLS and password options,
 * redis.url). */
#ifndef PB_SHADOW_READ_H
#define PB_SHADOW_READ_H

#include <stddef.h>

#include "common/err.h"
#include "config/config.h"
#include "shadow/compare.h"

/* Where one side is read: "amqp:QUEUE", "redis:STREAM", "kafka:TOPIC" or "nats:STREAM". */
typedef struct pb_shadow_source {
    const char *text; /* as given */
    enum { PB_SHADOW_AMQP, PB_SHADOW_REDIS, PB_SHADOW_KAFKA, PB_SHADOW_NATS } broker;
    const char *name; /* the queue or stream (points into text) */
    const char *body_field; /* Redis: the field that holds the body */
} pb_shadow_source_t;

/* Parses "amqp:QUEUE", "redis:STREAM", "kafka:TOPIC" or "nats:STREAM"; PB_FATAL naming what is
 * wrong (what: the option). */
pb_status_t pb_shadow_source_parse(const char *text, const char *what, pb_shadow_source_t *out,
                                   pb_error_t *err) PB_MUSTCHECK;

/* Reads every message of src into out, at most limit (more is an error: a partial read would
 * report what was not read as missing). PB_TRANSIENT when the broker cannot be reached, PB_FATAL
 * for a queue or stream that does not exist and the like. */
pb_status_t pb_shadow_read(const pb_config_t *cfg, const pb_shadow_source_t *src, size_t limit,
                           pb_shadow_msgs_t *out, pb_error_t *err) PB_MUSTCHECK;

pb_status_t pb_shadow_read_amqp(const pb_config_t *cfg, const char *queue, size_t limit,
                                pb_shadow_msgs_t *out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_shadow_read_redis(const pb_config_t *cfg, const char *stream,
                                 const char *body_field, size_t limit, pb_shadow_msgs_t *out,
                                 pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_shadow_read_kafka(const pb_config_t *cfg, const char *topic, size_t limit,
                                 pb_shadow_msgs_t *out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_shadow_read_nats(const pb_config_t *cfg, const char *stream, size_t limit,
                                pb_shadow_msgs_t *out, pb_error_t *err) PB_MUSTCHECK;

#endif
