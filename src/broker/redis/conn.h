/* Redis plumbing shared by the redis sink and the redis source (hiredis 0.14.1, blocking
 * contexts with socket timeouts).
 *
 * The URL (redis://[[user]:password@]host[:port][/db]), the password from redis.password_file,
 * connecting with redis.timeout as connect and reply timeout, AUTH (ACL user or plain password),
 * SELECT of the database, and the classification of errors. Debian's hiredis 0.14 has no TLS:
 * rediss:// is refused with that reason.
 *
 * Error classes: an unreachable server, a timeout, a dropped connection and the server's
 * LOADING/BUSY/... replies are PB_TRANSIENT; a bad URL, refused credentials, a database index
 * out of range, a server in cluster mode are PB_FATAL. Messages never contain the password.
 *
 * @thread one context is used by one thread. */
#ifndef PB_BROKER_REDIS_CONN_H
#define PB_BROKER_REDIS_CONN_H

#include <stdbool.h>
#include <stddef.h>

#include <hiredis/hiredis.h>

#include "common/err.h"
#include "config/config.h"

/* A parsed redis:// URL. Owns its strings (pb_redis_url_free). */
typedef struct pb_redis_url {
    char *user;     /* percent-decoded; NULL when the URL names none (the "default" user) */
    char *password; /* percent-decoded; NULL when none. Never log it */
    char *host;     /* without brackets for IPv6 literals */
    int port;       /* 6379 unless given */
    int db;         /* 0 unless given as the path */
} pb_redis_url_t;

/**
 * @brief Parses redis://[[user]:password@]host[:port][/db]. rediss:// is refused (no TLS in
 * hiredis 0.14), and so are query strings, a port outside 1..65535 and a db that is not a
 * number in 0..1000000. Errors never contain the password.
 * @returns PB_OK with out filled (free with pb_redis_url_free), or PB_FATAL with out zeroed.
 */
pb_status_t pb_redis_url_parse(const char *url, pb_redis_url_t *out, pb_error_t *err) PB_MUSTCHECK;

/** @brief Frees the strings of u and zeroes it. Accepts NULL and zeroed structs. */
void pb_redis_url_free(pb_redis_url_t *u);

/** @brief "host:port/db" of u for messages (never the user or password). */
void pb_redis_url_where(const pb_redis_url_t *u, char *buf, size_t n);

/**
 * @brief The checks that need no server: redis.url parses and redis.password_file, when set, is
 * readable and not empty. Run by the sink's and the source's constructors, so a bad
 * configuration stops the command at once. PB_FATAL with the reason.
 */
pb_status_t pb_redis_check_config(const pb_config_t *cfg, pb_error_t *err) PB_MUSTCHECK;

/** What a connection found out about its server. */
typedef struct pb_redis_server {
    char where[300];  /* "host:port/db" */
    char version[32]; /* redis_version of INFO server, "" when it did not say */
    int major, minor; /* of version; 0 when unknown */
} pb_redis_server_t;

/**
 * @brief Connects to cfg->redis_url, logs in (AUTH) when the URL or redis.password_file give a
 * password, selects the database and reads the server version. cfg->redis_timeout bounds the
 * connect and every later reply on the context.
 * @returns PB_OK with *out owned by the caller (redisFree), PB_TRANSIENT when the server cannot
 *          be reached or is loading, PB_FATAL for a bad URL, refused credentials, a server in
 *          cluster mode (Redis Cluster is not supported) or a bad database number.
 */
pb_status_t pb_redis_connect(const pb_config_t *cfg, redisContext **out, pb_redis_server_t *srv,
                             pb_error_t *err) PB_MUSTCHECK;

/**
 * @brief True when an error reply ("LOADING ...", "OOM ...") may succeed later on the same or a
 * new connection: LOADING, BUSY, TRYAGAIN, MASTERDOWN, READONLY, CLUSTERDOWN, NOREPLICAS,
 * MISCONF, OOM, NOAUTH. Other errors (WRONGTYPE, ERR ...) are about the command itself.
 */
bool pb_redis_error_transient(const char *reply_error);

/**
 * @brief Fills err from a context whose last call failed (c->err, c->errstr): "redis at
 * WHERE: WHAT: errstr", PB_TRANSIENT (I/O, end of file, timeout) or PB_FATAL (protocol, out of
 * memory).
 */
pb_status_t pb_redis_context_fail(const redisContext *c, const char *where, const char *what,
                                  pb_error_t *err);

/**
 * @brief Runs one command (argv, NUL-terminated strings) and checks its reply: an error reply
 * fails with "redis at WHERE: WHAT: <error>" (PB_TRANSIENT when pb_redis_error_transient, else
 * PB_FATAL), a lost connection with pb_redis_context_fail.
 * @returns PB_OK with *reply owned by the caller (freeReplyObject; may be NULL: then it is freed).
 */
pb_status_t pb_redis_run(redisContext *c, const char *where, const char *what, int argc,
                         const char **argv, redisReply **reply, pb_error_t *err) PB_MUSTCHECK;

#endif
