/* Whether an existing RabbitMQ queue is bounded, asked without changing it. AMQP 0-9-1 has no
 * way to read a queue's arguments, but a queue.declare of an existing queue is refused
 * (406 PRECONDITION_FAILED) when its arguments differ, and the refusal names the first argument
 * that differs and its current value. The probe declares the queue with no arguments and, each
 * time one is named that is not a bound (x-queue-type, x-dead-letter-exchange, ...), declares it
 * again with that argument added at its current value, until the broker accepts (the queue has
 * no bound argument) or names x-message-ttl, x-max-length or x-max-length-bytes (it has one).
 * Each refusal closes the channel, which is opened again. A policy can bound a queue without
 * arguments; the probe cannot see policies. Used where amqp.queue_declare = false leaves the
 * queue's arguments to someone else: at the consumer's start and by postbox check.
 *
 * @thread the link owner's thread only. */
#ifndef PB_BROKER_AMQP_QUEUE_BOUND_H
#define PB_BROKER_AMQP_QUEUE_BOUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <amqp.h>

#include "broker/amqp/conn.h"
#include "common/err.h"

typedef enum pb_amqp_queue_bound {
    PB_AMQP_QUEUE_BOUNDED,       /* an argument bounds it: detail names it and its value */
    PB_AMQP_QUEUE_UNBOUNDED,     /* no bound argument (a policy may still bound it) */
    PB_AMQP_QUEUE_BOUND_UNKNOWN, /* the broker's answers could not be followed: detail says why */
} pb_amqp_queue_bound_t;

/** The argument a refusal names and its current value, as the probe declares it next. */
typedef struct pb_amqp_inequivalent {
    char name[64];                /* e.g. "x-queue-type", or the flag "durable", "auto_delete" */
    amqp_field_value_kind_t kind; /* UTF8, BOOLEAN, I8, I16, I32 or I64 */
    char str[128];                /* UTF8 */
    int64_t num;                  /* the integer kinds */
    bool flag;                    /* BOOLEAN, and the flags */
} pb_amqp_inequivalent_t;

/**
 * @brief Reads RabbitMQ's refusal text ("... inequivalent arg 'x-message-ttl' for queue 'q' in
 * vhost '/': received none but current is the value '1000' of type 'signedint'", or "received
 * 'quorum' but current is 'classic'" for a value that was sent) into out. Pure.
 * @returns false when text is not such a refusal, or the value's type is not one of longstr,
 *          signedint, long, short, byte, bool (then the probe cannot repeat it).
 */
bool pb_amqp_parse_inequivalent(const char *text, pb_amqp_inequivalent_t *out);

/** @brief Whether an argument of this name bounds a queue's length or its messages' age. */
bool pb_amqp_arg_bounds_queue(const char *name);

/**
 * @brief Probes the existing queue on the link's channel (see above); call it only after a
 * passive declare found the queue (a declare of a missing queue would create it).
 * @returns PB_OK with *out and detail set and the channel open again; PB_TRANSIENT when the
 *          connection was lost (then the link is dropped).
 */
pb_status_t pb_amqp_probe_queue_bound(pb_amqp_link_t *lk, const char *queue,
                                      pb_amqp_queue_bound_t *out, char *detail, size_t n,
                                      pb_error_t *err) PB_MUSTCHECK;

#endif
