/* AMQP connection helpers shared by the amqp sink, the consuming side and the test tools:
 * URL parsing, opening a logged-in connection, and formatting rabbitmq-c replies.
 *
 * @thread any, but one connection is only ever used by one thread (rabbitmq-c rule). */
#ifndef PB_BROKER_AMQP_URL_H
#define PB_BROKER_AMQP_URL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <amqp.h>

#include "common/err.h"
#include "config/config.h"

/* A parsed amqp:// or amqps:// URL. Owns its strings (free with pb_amqp_url_free). */
typedef struct pb_amqp_url {
    char *user;     /* percent-decoded; "guest" when the URL has none */
    char *password; /* percent-decoded; "guest" when the URL has none. Never log it */
    char *host;     /* without brackets for IPv6 literals */
    int port;       /* 5672 for amqp://, 5671 for amqps:// unless given */
    char *vhost;    /* percent-decoded; "/" when the URL has no path or an empty one */
    bool tls;       /* amqps:// */
} pb_amqp_url_t;

/**
 * @brief Parses amqp://user:password@host:port/vhost (or amqps://).
 *
 * Percent-decoding as amqp_parse_url does it (so the default vhost "/" is written %2f), with
 * these differences: a host is required, the port must be 1..65535, an empty path means vhost
 * "/", and query strings are refused. Errors never contain the password.
 * @returns PB_OK and fills out (the caller frees it with pb_amqp_url_free), or PB_FATAL with
 *          out zeroed.
 */
pb_status_t pb_amqp_url_parse(const char *url, pb_amqp_url_t *out, pb_error_t *err) PB_MUSTCHECK;

/** @brief Frees the strings of u and zeroes it. Accepts NULL and zeroed structs. */
void pb_amqp_url_free(pb_amqp_url_t *u);

/** @brief Writes "host:port" of u into buf for messages ("[host]:port" for an IPv6 literal);
 * never the user or password. Truncated to fit n bytes (n > 0). */
void pb_amqp_url_where(const pb_amqp_url_t *u, char *buf, size_t n);

/** @brief The heartbeat to propose, in whole seconds (the unit on the wire), for amqp.heartbeat in
 * milliseconds: rounded up, so that a small nonzero interval never becomes 0 ("disabled"), and
 * capped at 65535. @returns 0 when heartbeat_ms <= 0. */
int pb_amqp_heartbeat_s(int64_t heartbeat_ms);

/**
 * @brief Opens a TCP or TLS socket to u, logs in with PLAIN and opens the connection to the
 * vhost. Channels are left to the caller.
 *
 * TLS uses cfg->amqp_tls_ca_cert (the system bundle when empty), amqp_tls_cert/amqp_tls_key
 * and amqp_tls_verify. cfg->amqp_confirm_timeout bounds the TCP/TLS connect, the login
 * handshake and every later RPC on the connection (channel.open, exchange.declare, close).
 * heartbeat_s is the heartbeat to propose in seconds (0 disables).
 * @returns PB_OK with *out owned by the caller (amqp_destroy_connection), PB_TRANSIENT when the
 *          broker cannot be reached or drops the handshake (retry later), PB_FATAL when a retry
 *          cannot help: refused credentials, missing vhost, certificate problems.
 */
pb_status_t pb_amqp_open(const pb_amqp_url_t *u, const pb_config_t *cfg, int heartbeat_s,
                         amqp_connection_state_t *out, pb_error_t *err) PB_MUSTCHECK;

/**
 * @brief Formats a failed rabbitmq-c RPC reply as "<what>: <detail>", e.g.
 * "declare exchange: 404 NOT_FOUND - no exchange 'x' in vhost '/'" or
 * "open channel: a socket error occurred".
 * @returns buf (always NUL-terminated when n > 0).
 */
const char *pb_amqp_reply_error(amqp_rpc_reply_t r, const char *what, char *buf, size_t n);

#endif
