/* The connection guard of the HTTP endpoint: slow or idle clients must not hold every connection
 * while a liveness probe waits. libmicrohttpd bounds only the idle time of a connection (a client
 * that sends one header line every few seconds is never idle) and the number of connections (a
 * newcomer beyond it waits in the kernel's queue, or is refused): a few dozen slow clients would
 * keep /healthz from answering. The guard adds what it lacks:
 *   - a deadline per request: from its connect (or the end of its previous answer) a connection
 *     has request_ms to send a whole request, and from then request_ms to read the answer;
 *   - room for newcomers: a connection beyond keep_per_peer of one client address, or beyond
 *     keep in all, closes the connection of that client (of the client holding the most, when
 *     over keep) that has waited longest without sending a whole request.
 * The probe is the newest connection and sends its request at once, so it is never the one
 * closed; a client that keeps reconnecting only closes its own connections.
 *
 * The guard is pure bookkeeping: it calls close_fn(fd) to close a connection (the server shuts
 * the socket down; libmicrohttpd then sees the end and reports the connection closed). Times
 * are monotonic milliseconds passed by the caller. @thread the server's one polling thread:
 * every call comes from libmicrohttpd's callbacks, so the guard has no lock. */
#ifndef PB_METRICS_HTTP_GUARD_H
#define PB_METRICS_HTTP_GUARD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct pb_http_guard pb_http_guard_t;
typedef struct pb_http_conn pb_http_conn_t; /* one connection, owned by the guard */

typedef struct pb_http_limits {
    unsigned slots;         /* connections tracked at most: the server's own connection limit */
    unsigned keep;          /* connections kept in all (below slots, so newcomers get in) */
    unsigned keep_per_peer; /* connections kept per client address */
    int64_t request_ms;     /* time to send a request, and again to read its answer */
} pb_http_limits_t;

typedef void pb_http_close_fn(int fd, void *arg);

/* What the guard closed, since the start. */
typedef struct pb_http_guard_stats {
    uint64_t late;    /* past the deadline of their request */
    uint64_t surplus; /* over keep_per_peer or keep, to let a newcomer in */
} pb_http_guard_stats_t;

/* lim->keep < lim->slots and lim->keep_per_peer <= lim->keep (asserted). Never NULL. */
pb_http_guard_t *pb_http_guard_new(const pb_http_limits_t *lim, pb_http_close_fn *close_fn,
                                   void *arg);
/* Frees the table (the connections it tracks are the server's to close). Accepts NULL. */
void pb_http_guard_free(pb_http_guard_t *g);

/* A new connection (socket fd, client address peer): first closes the connections past their
 * deadline, then makes room by the limits. Returns the connection's entry (the server's socket
 * context), or NULL when every slot is taken (the server exceeded slots: the caller closes it). */
pb_http_conn_t *pb_http_guard_open(pb_http_guard_t *g, int fd, const struct sockaddr *peer,
                                   socklen_t peer_len, int64_t now_ms);
/* A whole request arrived on c: its answer is under way (not closed to make room). */
void pb_http_guard_request(pb_http_conn_t *c, int64_t now_ms);
/* The answer on c was sent: c waits for its next request. */
void pb_http_guard_answered(pb_http_conn_t *c, int64_t now_ms);
/* c is closed (its socket is about to be): its entry is freed. Accepts NULL. */
void pb_http_guard_close(pb_http_guard_t *g, pb_http_conn_t *c);

pb_http_guard_stats_t pb_http_guard_stats(const pb_http_guard_t *g);
/* Connections tracked and not closed by the guard. */
unsigned pb_http_guard_open_count(const pb_http_guard_t *g);

#endif
