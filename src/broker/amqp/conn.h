/* The rabbitmq-c connection state shared by the amqp sink and the amqp source (rabbitmq-c 0.11):
 * one connection with one channel, PB_AMQP_LINK_CHANNEL, and the bookkeeping around closing it,
 * answering the broker's closes and reading frames with a deadline.
 *
 * Opening the connection itself (URL, TLS, login) is pb_amqp_open in broker/amqp/url.h; these
 * functions take over from there. None of them logs: the caller knows its facility and words.
 *
 * @thread the owner's thread only (a rabbitmq-c connection is not thread-safe). */
#ifndef PB_BROKER_AMQP_CONN_H
#define PB_BROKER_AMQP_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <amqp.h>

#include "common/err.h"

/** The channel the sink and the source use on their connection. */
#define PB_AMQP_LINK_CHANNEL 1

/** A connection and the state of its channel, embedded in the owning sink or source. A zeroed
 * link is disconnected. */
typedef struct pb_amqp_link {
    amqp_connection_state_t conn; /* owned; NULL while disconnected */
    bool channel_open;            /* PB_AMQP_LINK_CHANNEL is open on conn */
} pb_amqp_link_t;

/** @brief Destroys the connection without a word to the broker (it is broken, or the broker
 * closed it) and marks the link disconnected. A disconnected link is left as it is. */
void pb_amqp_link_drop(pb_amqp_link_t *lk);

/**
 * @brief channel.close (when the channel is open) and connection.close, each bounded by the rpc
 * timeout set in pb_amqp_open, then pb_amqp_link_drop. Failures are ignored: the connection is
 * destroyed either way. Frames that arrive meanwhile (deliveries, confirms in flight) are queued
 * by rabbitmq-c and dropped with the connection. A disconnected link is left as it is.
 */
void pb_amqp_link_close(pb_amqp_link_t *lk);

/**
 * @brief Opens PB_AMQP_LINK_CHANNEL on the connected link.
 * @returns PB_OK with channel_open set, or PB_TRANSIENT with "open channel: <detail>" in err; then
 *          the connection may be dropped too (see pb_amqp_link_rpc_failed).
 */
pb_status_t pb_amqp_link_channel_open(pb_amqp_link_t *lk, pb_error_t *err) PB_MUSTCHECK;

/**
 * @brief Answers a channel.close from the broker with channel.close-ok and marks the channel
 * closed. The connection stays the caller's to keep or drop.
 * @returns the rabbitmq-c status of the send: AMQP_STATUS_OK when the connection is still usable.
 */
int pb_amqp_link_channel_close_ok(pb_amqp_link_t *lk);

/** @brief Answers a connection.close from the broker with connection.close-ok, as a courtesy
 * (a failure is ignored: the connection is finished either way). The link is not dropped. */
void pb_amqp_link_connection_close_ok(pb_amqp_link_t *lk);

/**
 * @brief After a failed synchronous RPC on PB_AMQP_LINK_CHANNEL (the rabbitmq-c call returned
 * NULL or 0): formats the reply into buf as pb_amqp_reply_error does ("<what>: <detail>") and
 * answers a close from the broker.
 * @returns the reply code of a channel close (e.g. AMQP_NOT_FOUND) when the close-ok was sent:
 *          the channel is closed but the connection stays usable. Otherwise 0, with the
 *          connection dropped (pb_amqp_link_drop).
 */
unsigned pb_amqp_link_rpc_failed(pb_amqp_link_t *lk, const char *what, char *buf, size_t n);

struct pb_amqp_url;
struct pb_config;

/**
 * @brief (Re)connects lk: closes what it had, opens the connection to url (TLS, login,
 * heartbeat_s), then setup(arg, err) prepares it (the channel and what the sink or source
 * declares). When setup fails the connection is closed again.
 */
pb_status_t pb_amqp_link_connect(pb_amqp_link_t *lk, const struct pb_amqp_url *url,
                                 const struct pb_config *cfg, int heartbeat_s,
                                 pb_status_t (*setup)(void *arg, pb_error_t *err), void *arg,
                                 pb_error_t *err);

/**
 * @brief After a failed exchange.declare or queue.declare (kind "exchange" or "queue") of name
 * on vhost by user: the error, PB_FATAL for what a retry cannot fix. declare: it was declared
 * (else only checked, passively), option the setting that declares it; mismatch says how an
 * existing one differs when the broker refuses it as it is (PRECONDITION_FAILED).
 */
pb_status_t pb_amqp_link_declare_failed(pb_amqp_link_t *lk, const char *kind, const char *name,
                                        const char *vhost, const char *user, bool declare,
                                        const char *option, const char *mismatch,
                                        pb_error_t *err);

/**
 * @brief Declares amqp.exchange (durable, amqp.exchange_type) when amqp.declare_exchange, else
 * checks passively that it exists; with amqp.alternate_exchange set, that exchange is declared
 * first (durable fanout) and named in the main one's alternate-exchange argument, so that what
 * no binding routes lands there instead of coming back unroutable. The relay and the consumer
 * both declare through here, so neither redeclares the exchange differently. The default
 * exchange ("") is left alone.
 */
pb_status_t pb_amqp_link_setup_exchange(pb_amqp_link_t *lk, const struct pb_config *cfg,
                                        const char *vhost, const char *user,
                                        pb_error_t *err) PB_MUSTCHECK;

/**
 * @brief Declares amqp.queue (durable, with the x-arguments of amqp.queue_type, queue_max_length,
 * queue_message_ttl, queue_dead_letter_exchange, single_active_consumer) when
 * amqp.queue_declare, else checks passively that it exists. An existing queue declared with other
 * arguments (one without the bound an older postbox left) is PB_FATAL saying how to keep it.
 */
pb_status_t pb_amqp_link_setup_queue(pb_amqp_link_t *lk, const struct pb_config *cfg,
                                     const char *vhost, const char *user,
                                     pb_error_t *err) PB_MUSTCHECK;

/**
 * @brief A passive declare of the exchange or queue (kind "exchange" or "queue") name on
 * PB_AMQP_LINK_CHANNEL: whether it exists, changing nothing.
 * @returns 0 when it exists; the reply code of the channel's close (AMQP_NOT_FOUND: it does not
 *          exist; AMQP_ACCESS_REFUSED) with the channel closed and the connection usable; -1 when
 *          the connection was lost (dropped). buf gets the broker's words on failure.
 */
int pb_amqp_link_passive(pb_amqp_link_t *lk, const char *kind, const char *name, char *buf,
                         size_t n);

/**
 * @brief Waits for the next frame until deadline_ms (pb_monotonic_ms clock). A passed deadline
 * still polls once: frames already buffered or readable at once are returned.
 * @returns AMQP_STATUS_OK with *f filled (its payload lives in rabbitmq-c's pools until the next
 *          amqp_maybe_release_buffers), AMQP_STATUS_TIMEOUT, or another rabbitmq-c error status
 *          when the connection failed (then it is unusable; the link is not dropped).
 */
int pb_amqp_link_wait_frame(pb_amqp_link_t *lk, amqp_frame_t *f, int64_t deadline_ms);

/** @brief Copies an AMQP short or long string into buf for messages, truncated to n - 1 bytes
 * (n > 0). @returns buf, NUL-terminated. */
const char *pb_amqp_bytes_text(amqp_bytes_t b, char *buf, size_t n);

#endif
