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

#include "common/log.h"
#include "common/str.h"
#include "metrics/metrics.h"

#define FAC "metrics"

#define LOOPBACK "127.0.0.1" /* a listen address without a host: not every interface */
#define UNAUTHORIZED "unauthorized: send Authorization: Bearer <the token of metrics.token_file>\n"

struct pb_http {
    struct MHD_Daemon *daemon;
    char *authorization; /* "Bearer <token>", or NULL: no token needed */
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
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
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
    if (token && *token) {
        pb_buf_t b = {0};
        pb_buf_printf(&b, "Bearer %s", token);
        srv->authorization = b.data;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, srv, MHD_OPTION_EXTERNAL_LOGGER,
        on_mhd_log, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)32, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
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
        MHD_stop_daemon(srv->daemon);
    if (srv->authorization)
        memset(srv->authorization, 0, strlen(srv->authorization));
    free(srv->authorization);
    free(srv);
}
