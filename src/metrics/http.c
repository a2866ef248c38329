#include "metrics/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <netdb.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/log_limit.h"
#include "common/str.h"
#include "metrics/http_guard.h"
#include "metrics/metrics.h"

#define FAC "metrics"

#define LOOPBACK "127.0.0.1" /* a listen address without a host: not every interface */
#define UNAUTHORIZED "unauthorized: send Authorization: Bearer <the token of metrics.token_file>\n"

/* Connections: libmicrohttpd takes at most SLOTS; the guard (http_guard.h) keeps KEEP of them,
 * PER_CLIENT per client address, and gives each REQUEST_SECONDS to send a request and as long
 * again to read the answer. A scrape or a probe needs one connection for milliseconds. */
#define SLOTS 64
#define KEEP 32
#define PER_CLIENT 16
#define REQUEST_SECONDS 5
#define CLOSED_LOG_INTERVAL_MS 60000
/* libmicrohttpd's own messages (one per client that hangs up mid-request: anyone can cause
 * them), one record per interval at most */
#define MHD_LOG_INTERVAL_MS 10000

struct pb_http {
    struct MHD_Daemon *daemon;
    char *authorization; /* "Bearer <token>", or NULL: no token needed */
    pb_http_guard_t *guard;
    pb_log_limit_t closed_log; /* the guard's closes, one record a minute at most */
    pb_http_guard_stats_t logged; /* the guard's counts at the last record */
    pthread_mutex_t mhd_log_lock; /* libmicrohttpd logs from the starting thread too */
    pb_log_limit_t mhd_log;
};

bool pb_http_parse_listen(const char *listen, char *host, unsigned long hostsz, unsigned *port)
{
    const char *colon;
    const char *h = listen;
    size_t hlen;
    if (listen[0] == '[') { /* [v6]:port */
        const char *close = strchr(listen, ']');
        if (!close || close[1] != ':')
            return false;
        h = listen + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(listen, ':');
        if (!colon)
            return false;
        hlen = (size_t)(colon - listen);
    }
    if (hlen + 1 > hostsz)
        return false;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    char *end;
    unsigned long p = strtoul(colon + 1, &end, 10);
    if (end == colon + 1 || *end || p == 0 || p > 65535)
        return false;
    *port = (unsigned)p;
    return true;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
                             char *body, size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result r = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result reply_text(struct MHD_Connection *conn, unsigned status, const char *text)
{
    return reply(conn, status, "text/plain; charset=utf-8", pb_strdup(text), strlen(text));
}

/* Compares in time that does not depend on where the texts differ (the token is a secret). */
static bool same_secret(const char *given, const char *want)
{
    size_t n = strlen(want), m = given ? strlen(given) : 0;
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(want[i] ^ (i < m ? given[i] : 0));
    return diff == 0;
}

static pb_http_conn_t *guarded(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

/* The guard closes a connection by shutting its socket down: libmicrohttpd, which owns the
 * socket, sees the end at once and closes it. */
static void shut_down(int fd, void *arg)
{
    (void)arg;
    shutdown(fd, SHUT_RDWR);
}

/* Logs what the guard closed since the last record, at most once a minute. */
static void log_closed(pb_http_t *srv, int64_t now)
{
    pb_http_guard_stats_t st = pb_http_guard_stats(srv->guard);
    uint64_t late = st.late - srv->logged.late, surplus = st.surplus - srv->logged.surplus;
    uint64_t held; /* the counts say it all */
    if ((late || surplus) && pb_log_limit_pass(&srv->closed_log, now, &held)) {
        log_warn(FAC, "http: closed %llu slow connection(s) (over %d s for a request or for its "
                      "answer) and %llu waiting for a request, to make room for newcomers "
                      "(over %d per client address or %d in all)",
                 (unsigned long long)late, REQUEST_SECONDS, (unsigned long long)surplus,
                 PER_CLIENT, KEEP);
        srv->logged = st;
    }
}

/* @thread http */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    pb_http_t *srv = cls;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        pb_http_guard_close(srv->guard, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd_info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *addr_info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!fd_info)
        return; /* not tracked: libmicrohttpd's own limits still bound it */
    int64_t now = pb_monotonic_ms();
    const struct sockaddr *peer = addr_info ? addr_info->client_addr : NULL;
    socklen_t peer_len = !peer                        ? 0
                         : peer->sa_family == AF_INET6 ? (socklen_t)sizeof(struct sockaddr_in6)
                                                       : (socklen_t)sizeof(struct sockaddr_in);
    *socket_context = pb_http_guard_open(srv->guard, fd_info->connect_fd, peer, peer_len, now);
    if (!*socket_context)
        shutdown(fd_info->connect_fd, SHUT_RDWR);
    log_closed(srv, now);
}

/* @thread http: the answer of a request was sent (or the request ended otherwise) */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)con_cls;
    (void)toe;
    pb_http_guard_answered(guarded(conn), pb_monotonic_ms());
}

/* @thread http (libmicrohttpd's polling thread) */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    const pb_http_t *srv = cls;
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    pb_http_guard_request(guarded(conn), pb_monotonic_ms());
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
    /* liveness tells nothing; the figures and readiness need the token when one is set */
    if (srv->authorization && strcmp(url, "/healthz") != 0 &&
        !same_secret(MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_AUTHORIZATION),
                     srv->authorization)) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(
            strlen(UNAUTHORIZED), (void *)(uintptr_t)UNAUTHORIZED, MHD_RESPMEM_PERSISTENT);
        if (!resp)
            return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
        enum MHD_Result r = MHD_queue_response(conn, MHD_HTTP_UNAUTHORIZED, resp);
        MHD_destroy_response(resp);
        return r;
    }
    if (strcmp(url, "/metrics") == 0) {
        pb_buf_t out = {0};
        pb_metrics_render(&out);
        size_t len = out.len;
        return reply(conn, MHD_HTTP_OK, PB_METRICS_CONTENT_TYPE, out.data, len);
    }
    if (strcmp(url, "/healthz") == 0)
        return reply_text(conn, MHD_HTTP_OK, "ok\n");
    if (strcmp(url, "/readyz") == 0) {
        if (pb_metrics_ready())
            return reply_text(conn, MHD_HTTP_OK, "ready\n");
        return reply_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                          "not ready (see postbox_database_up, postbox_broker_up, postbox_owner)\n");
    }
    return reply_text(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics, /healthz or /readyz\n");
}

/* fmt and ap come from libmicrohttpd (the attribute tells the compiler so) */
__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt,
                                                             va_list ap)
{
    pb_http_t *srv = cls;
    uint64_t held = 0;
    pthread_mutex_lock(&srv->mhd_log_lock);
    bool pass = pb_log_limit_pass(&srv->mhd_log, pb_monotonic_ms(), &held);
    pthread_mutex_unlock(&srv->mhd_log_lock);
    if (!pass)
        return;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    if (held)
        log_warn(FAC, "http: %s (%llu more message(s) of the server held back before it)", msg,
                 (unsigned long long)held);
    else
        log_warn(FAC, "http: %s", msg);
}

pb_status_t pb_http_new(const char *listen, const char *token, pb_http_t **out,
                        pb_error_t *err)
{
    *out = NULL;
    char host[256];
    unsigned port;
    if (!pb_http_parse_listen(listen, host, sizeof host, &port))
        return pb_fail(err, PB_FATAL, "metrics.listen \"%s\": expected host:port", listen);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port_text[8];
    snprintf(port_text, sizeof port_text, "%u", port);
    int rc = getaddrinfo(*host ? host : LOOPBACK, port_text, &hints, &ai);
    if (rc != 0 || !ai)
        return pb_fail(err, PB_FATAL, "metrics.listen \"%s\": %s", listen, gai_strerror(rc));
    /* one polling thread (epoll on Linux) for every connection: a slow client costs a table
     * entry, not a thread, and the guard's table needs no lock */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* the server thread inherits this mask: SIGTERM and SIGINT stay with the main thread,
     * whose sleeps they interrupt */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    pb_http_t *srv = pb_malloc(sizeof *srv);
    memset(srv, 0, sizeof *srv); /* pb_http_free of a server that did not start stops nothing */
    pthread_mutex_init(&srv->mhd_log_lock, NULL);
    if (token && *token) {
        pb_buf_t b = {0};
        pb_buf_printf(&b, "Bearer %s", token);
        srv->authorization = b.data;
    }
    pb_http_limits_t lim = {.slots = SLOTS, .keep = KEEP, .keep_per_peer = PER_CLIENT,
                            .request_ms = REQUEST_SECONDS * 1000};
    srv->guard = pb_http_guard_new(&lim, shut_down, NULL);
    pb_log_limit_init(&srv->closed_log, CLOSED_LOG_INTERVAL_MS);
    pb_log_limit_init(&srv->mhd_log, MHD_LOG_INTERVAL_MS);
    /* libmicrohttpd's per-IP limit is not used: it refuses the newcomer, which would be the
     * probe when it shares its address with the slow clients; the guard closes one of theirs */
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, srv, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)SLOTS, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)REQUEST_SECONDS,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, srv, MHD_OPTION_END);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    freeaddrinfo(ai);
    if (!d) {
        pb_http_free(srv);
        return pb_fail(err, PB_FATAL,
                       "metrics.listen \"%s\": cannot listen (address in use or not available)",
                       listen);
    }
    srv->daemon = d;
    *out = srv;
    log_info(FAC, "serving /metrics, /healthz and /readyz on http://%s%s%s", *host ? "" : LOOPBACK,
             listen, srv->authorization ? " (bearer token required but for /healthz)" : "");
    return PB_OK;
}

void pb_http_free(pb_http_t *srv)
{
    if (!srv)
        return;
    if (srv->daemon)
        MHD_stop_daemon(srv->daemon); /* reports every connection closed to the guard */
    pb_http_guard_free(srv->guard);
    pthread_mutex_destroy(&srv->mhd_log_lock);
    if (srv->authorization)
        memset(srv->authorization, 0, strlen(srv->authorization));
    free(srv->authorization);
    free(srv);
}
