#include "broker/amqp/url.h"

#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <amqp_framing.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/redact.h"
#include "common/str.h"

#define FAC "sink.amqp"
#define URL_USAGE "expected amqp://user:password@host:port/vhost"
/* Used when amqp.tls_ca_cert is empty: rabbitmq-c 0.11 does not load OpenSSL's default paths. */
#define SYSTEM_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt"

/* ---- URL parsing ---------------------------------------------------------------------------- */

static bool all_digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
    }
    return n > 0;
}

static pb_status_t bad_url(pb_error_t *err, const char *url, const char *why)
{
    char shown[256];
    pb_redact_secret(url, shown, sizeof shown);
    if (!why)
        return pb_fail(err, PB_FATAL, "bad amqp url \"%s\": " URL_USAGE, shown);
    return pb_fail(err, PB_FATAL, "bad amqp url \"%s\": %s (" URL_USAGE ")", shown, why);
}

pb_status_t pb_amqp_url_parse(const char *url, pb_amqp_url_t *out, pb_error_t *err)
{
    memset(out, 0, sizeof *out);
    pb_status_t st = pb_url_precheck(url, "amqp", URL_USAGE, err);
    if (st != PB_OK)
        return st;

    pb_amqp_url_t u = {0};
    const char *p;
    if (strncasecmp(url, "amqp://", 7) == 0) {
        p = url + 7;
    } else if (strncasecmp(url, "amqps://", 8) == 0) {
        p = url + 8;
        u.tls = true;
    } else {
        return bad_url(err, url, "the scheme must be amqp:// or amqps://");
    }

    /* authority = [userinfo@]host[:port], up to the path; userinfo ends at its last '@' */
    const char *auth_end = p + strcspn(p, "/?#");
    const char *at = NULL;
    for (const char *q = p; q < auth_end; q++) {
        if (*q == '@')
            at = q;
    }
    const char *hostport = p;
    const char *why = NULL;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *user_end = colon ? colon : at;
        if (user_end == p) {
            why = "missing user name before '@'";
            goto fail;
        }
        if (!pb_percent_decode(p, (size_t)(user_end - p), &u.user) ||
            (colon && !pb_percent_decode(colon + 1, (size_t)(at - colon - 1), &u.password))) {
            why = "bad percent-encoding in the user name or password";
            goto fail;
        }
        hostport = at + 1;
    }

    const char *after_host;
    if (*hostport == '[') {
        const char *close = memchr(hostport, ']', (size_t)(auth_end - hostport));
        if (!close) {
            why = "missing ']' after the IPv6 address";
            goto fail;
        }
        if (!pb_percent_decode(hostport + 1, (size_t)(close - hostport - 1), &u.host)) {
            why = "bad percent-encoding in the host";
            goto fail;
        }
        after_host = close + 1;
        if (after_host < auth_end && *after_host != ':') {
            why = "unexpected text after the IPv6 address";
            goto fail;
        }
    } else {
        const char *colon = memchr(hostport, ':', (size_t)(auth_end - hostport));
        after_host = colon ? colon : auth_end;
        if (!pb_percent_decode(hostport, (size_t)(after_host - hostport), &u.host)) {
            why = "bad percent-encoding in the host";
            goto fail;
        }
    }
    if (!*u.host) {
        why = "missing host";
        goto fail;
    }

    if (after_host < auth_end) { /* ":port" */
        const char *digits = after_host + 1;
        size_t len = (size_t)(auth_end - digits);
        long port = all_digits(digits, len) && len <= 5 ? strtol(digits, NULL, 10) : -1;
        if (port < 1 || port > 65535) {
            why = "the port must be a number from 1 to 65535";
            goto fail;
        }
        u.port = (int)port;
    } else {
        u.port = u.tls ? 5671 : 5672;
    }

    const char *rest = auth_end;
    if (*rest == '/') {
        const char *vh = rest + 1;
        size_t len = strcspn(vh, "/?#");
        if (vh[len] == '/') {
            why = "the vhost must be one path segment: write a '/' in it as %2f";
            goto fail;
        }
        rest = vh + len;
        if (len == 0) {
            u.vhost = pb_strdup("/");
        } else if (!pb_percent_decode(vh, len, &u.vhost)) {
            why = "bad percent-encoding in the vhost";
            goto fail;
        }
    } else {
        u.vhost = pb_strdup("/");
    }
    if (*rest) { /* '?' or '#' */
        why = "query parameters are not supported: use the amqp.* options";
        goto fail;
    }

    if (!u.user)
        u.user = pb_strdup("guest");
    if (!u.password)
        u.password = pb_strdup("guest");
    *out = u;
    return PB_OK;

fail:
    pb_amqp_url_free(&u);
    return bad_url(err, url, why);
}

void pb_amqp_url_free(pb_amqp_url_t *u)
{
    if (!u)
        return;
    free(u->user);
    if (u->password) /* do not leave the secret in freed memory */
        memset(u->password, 0, strlen(u->password));
    free(u->password);
    free(u->host);
    free(u->vhost);
    memset(u, 0, sizeof *u);
}

void pb_amqp_url_where(const pb_amqp_url_t *u, char *buf, size_t n)
{
    if (strchr(u->host, ':'))
        snprintf(buf, n, "[%s]:%d", u->host, u->port);
    else
        snprintf(buf, n, "%s:%d", u->host, u->port);
}

int pb_amqp_heartbeat_s(int64_t heartbeat_ms)
{
    /* whole seconds on the wire; never round a small nonzero interval down to "disabled" */
    int64_t hb = heartbeat_ms > 0 ? (heartbeat_ms + 999) / 1000 : 0;
    return (int)(hb > 65535 ? 65535 : hb);
}

/* ---- replies -------------------------------------------------------------------------------- */

const char *pb_amqp_reply_error(amqp_rpc_reply_t r, const char *what, char *buf, size_t n)
{
    if (!n)
        return buf;
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        snprintf(buf, n, "%s: ok", what);
        break;
    case AMQP_RESPONSE_NONE:
        snprintf(buf, n, "%s: no reply from rabbitmq", what);
        break;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        snprintf(buf, n, "%s: %s", what, amqp_error_string2(r.library_error));
        break;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD && r.reply.decoded) {
            const amqp_connection_close_t *m = r.reply.decoded;
            snprintf(buf, n, "%s: connection closed by rabbitmq: %u %.*s", what,
                     (unsigned)m->reply_code, (int)m->reply_text.len,
                     (const char *)m->reply_text.bytes);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD && r.reply.decoded) {
            const amqp_channel_close_t *m = r.reply.decoded;
            snprintf(buf, n, "%s: channel closed by rabbitmq: %u %.*s", what,
                     (unsigned)m->reply_code, (int)m->reply_text.len,
                     (const char *)m->reply_text.bytes);
        } else {
            snprintf(buf, n, "%s: unexpected reply 0x%08x from rabbitmq", what,
                     (unsigned)r.reply.id);
        }
        break;
    default:
        snprintf(buf, n, "%s: unknown reply type %d", what, (int)r.reply_type);
        break;
    }
    return buf;
}

/* ---- connecting ----------------------------------------------------------------------------- */

static const char *errno_text(int e, char *buf, size_t n)
{
    switch (e) {
    case 0: return "connection failed";
    case ECONNREFUSED: return "connection refused";
    case ETIMEDOUT: return "connection timed out";
    case EHOSTUNREACH: return "host unreachable";
    case ENETUNREACH: return "network unreachable";
    case ECONNRESET: return "connection reset";
    default: break;
    }
    const char *s = strerror_r(e, buf, n); /* GNU variant (_GNU_SOURCE) */
    if (s != buf)
        snprintf(buf, n, "%s", s);
    if (buf[0])
        buf[0] = (char)tolower((unsigned char)buf[0]);
    return buf;
}

/* rabbitmq-c reports every failed connect() as AMQP_STATUS_SOCKET_ERROR and loses errno (its
 * non-blocking connect reads SO_ERROR without storing it). To tell "connection refused" from
 * "host unreachable" we try once more ourselves; only on this failure path. */
static int probe_connect_errno(const char *host, int port, int64_t timeout_ms)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    if (getaddrinfo(host, service, &hints, &res) != 0)
        return 0;
    int e = 0;
    int wait_ms = (int)(timeout_ms < 5000 ? timeout_ms : 5000);
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            e = 0;
        } else if (errno != EINPROGRESS) {
            e = errno;
        } else {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int pr = poll(&pfd, 1, wait_ms);
            if (pr == 0) {
                e = ETIMEDOUT;
            } else if (pr < 0) {
                e = errno;
            } else {
                int soerr = 0;
                socklen_t len = sizeof soerr;
                e = getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) == 0 ? soerr : errno;
            }
        }
        close(fd);
        if (e == 0)
            break;
    }
    freeaddrinfo(res);
    return e;
}

static pb_status_t open_failed(int rc, const pb_amqp_url_t *u, const pb_config_t *cfg,
                               const char *where, pb_error_t *err)
{
    char buf[128];
    switch (rc) {
    case AMQP_STATUS_HOSTNAME_RESOLUTION_FAILED:
        return pb_fail(err, PB_TRANSIENT, "cannot reach rabbitmq at %s: cannot resolve host \"%s\"",
                       where, u->host);
    case AMQP_STATUS_TIMEOUT:
        return pb_fail(err, PB_TRANSIENT, "cannot reach rabbitmq at %s: no answer within %lld ms",
                       where, (long long)cfg->amqp_confirm_timeout);
    case AMQP_STATUS_SOCKET_ERROR:
    case AMQP_STATUS_TCP_ERROR: {
        int e = probe_connect_errno(u->host, u->port, cfg->amqp_confirm_timeout);
        if (e == 0 && u->tls)
            return pb_fail(err, PB_TRANSIENT,
                           "cannot reach rabbitmq at %s: tls handshake failed: %s", where,
                           amqp_error_string2(rc));
        return pb_fail(err, PB_TRANSIENT, "cannot reach rabbitmq at %s: %s", where,
                       errno_text(e, buf, sizeof buf));
    }
    case AMQP_STATUS_SSL_PEER_VERIFY_FAILED:
        return pb_fail(err, PB_FATAL,
                       "tls: the certificate of rabbitmq at %s does not verify against the CA in "
                       "\"%s\" (set amqp.tls_ca_cert, or amqp.tls_verify = false for tests)",
                       where,
                       cfg->amqp_tls_ca_cert && *cfg->amqp_tls_ca_cert ? cfg->amqp_tls_ca_cert
                                                                       : SYSTEM_CA_BUNDLE);
    case AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED:
        return pb_fail(err, PB_FATAL,
                       "tls: the certificate of rabbitmq at %s is not valid for host \"%s\"",
                       where, u->host);
    case AMQP_STATUS_SSL_CONNECTION_FAILED:
    case AMQP_STATUS_SSL_ERROR:
        return pb_fail(err, PB_TRANSIENT,
                       "cannot reach rabbitmq at %s: tls handshake failed (is it a TLS port?)",
                       where);
    default:
        return pb_fail(err, PB_TRANSIENT, "cannot reach rabbitmq at %s: %s", where,
                       amqp_error_string2(rc));
    }
}

static pb_status_t login_failed(amqp_connection_state_t conn, amqp_rpc_reply_t r,
                                const pb_amqp_url_t *u, const char *where, pb_error_t *err)
{
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CONNECTION_CLOSE_METHOD && r.reply.decoded) {
        const amqp_connection_close_t *m = r.reply.decoded;
        char text[256];
        snprintf(text, sizeof text, "%.*s", (int)m->reply_text.len,
                 (const char *)m->reply_text.bytes);
        unsigned code = m->reply_code;
        amqp_connection_close_ok_t ok = {0};
        (void)amqp_send_method(conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok); /* courtesy */
        if (code == AMQP_ACCESS_REFUSED)
            return pb_fail(err, PB_FATAL,
                           "rabbitmq refused the login of user \"%s\": check the credentials "
                           "(%s said: %s)", u->user, where, text);
        if (code == AMQP_NOT_ALLOWED && strstr(text, "not found"))
            return pb_fail(err, PB_FATAL, "vhost \"%s\" does not exist on rabbitmq at %s (%s)",
                           u->vhost, where, text);
        if (code == AMQP_NOT_ALLOWED)
            return pb_fail(err, PB_FATAL,
                           "rabbitmq refused user \"%s\" access to vhost \"%s\": %u %s",
                           u->user, u->vhost, code, text);
        return pb_fail(err, PB_TRANSIENT,
                       "rabbitmq at %s closed the connection during login: %u %s", where, code,
                       text);
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
        switch (r.library_error) {
        case AMQP_STATUS_BROKER_UNSUPPORTED_SASL_METHOD:
            return pb_fail(err, PB_FATAL,
                           "rabbitmq at %s does not offer the PLAIN login mechanism", where);
        case AMQP_STATUS_INCOMPATIBLE_AMQP_VERSION:
        case AMQP_STATUS_BAD_AMQP_DATA:
        case AMQP_STATUS_UNKNOWN_CLASS:
        case AMQP_STATUS_UNKNOWN_METHOD:
            return pb_fail(err, PB_FATAL,
                           "the server at %s does not speak AMQP 0-9-1 (%s): wrong port, or "
                           "amqp:// to a TLS port?", where, amqp_error_string2(r.library_error));
        default:
            break;
        }
    }
    char buf[256];
    return pb_fail(err, PB_TRANSIENT, "%s",
                   pb_amqp_reply_error(r, "login to rabbitmq failed", buf, sizeof buf));
}

static pb_status_t tls_socket(amqp_connection_state_t conn, const pb_config_t *cfg,
                              amqp_socket_t **out, pb_error_t *err)
{
    amqp_socket_t *sock = amqp_ssl_socket_new(conn); /* owned by conn from here */
    if (!sock)
        return pb_fail(err, PB_FATAL, "cannot create a tls socket (openssl initialisation failed)");
    const char *ca = cfg->amqp_tls_ca_cert && *cfg->amqp_tls_ca_cert ? cfg->amqp_tls_ca_cert : NULL;
    if (!ca && cfg->amqp_tls_verify) {
        if (access(SYSTEM_CA_BUNDLE, R_OK) != 0)
            return pb_fail(err, PB_FATAL,
                           "amqp.tls_ca_cert is required with amqp.tls_verify = true (no system CA "
                           "bundle at %s)", SYSTEM_CA_BUNDLE);
        ca = SYSTEM_CA_BUNDLE;
    }
    if (ca && amqp_ssl_socket_set_cacert(sock, ca) != AMQP_STATUS_OK)
        return pb_fail(err, PB_FATAL, "cannot load the CA certificate \"%s\" (amqp.tls_ca_cert)",
                       ca);

    const char *cert = cfg->amqp_tls_cert && *cfg->amqp_tls_cert ? cfg->amqp_tls_cert : NULL;
    const char *key = cfg->amqp_tls_key && *cfg->amqp_tls_key ? cfg->amqp_tls_key : NULL;
    if ((cert == NULL) != (key == NULL))
        return pb_fail(err, PB_FATAL, "amqp.tls_cert and amqp.tls_key must be set together");
    if (cert && amqp_ssl_socket_set_key(sock, cert, key) != AMQP_STATUS_OK)
        return pb_fail(err, PB_FATAL,
                       "cannot load the client certificate \"%s\" with key \"%s\" "
                       "(amqp.tls_cert, amqp.tls_key)", cert, key);

    amqp_ssl_socket_set_verify_peer(sock, cfg->amqp_tls_verify);
    amqp_ssl_socket_set_verify_hostname(sock, cfg->amqp_tls_verify);
    /* TLS 1.2 or newer; older OpenSSL builds without this knob keep their defaults */
    int rc = amqp_ssl_socket_set_ssl_versions(sock, AMQP_TLSv1_2, AMQP_TLSvLATEST);
    if (rc != AMQP_STATUS_OK && rc != AMQP_STATUS_UNSUPPORTED)
        return pb_fail(err, PB_FATAL, "cannot restrict tls versions: %s", amqp_error_string2(rc));
    *out = sock;
    return PB_OK;
}

pb_status_t pb_amqp_open(const pb_amqp_url_t *u, const pb_config_t *cfg, int heartbeat_s,
                         amqp_connection_state_t *out, pb_error_t *err)
{
    *out = NULL;
    char where[300];
    if (strchr(u->host, ':'))
        snprintf(where, sizeof where, "[%s]:%d", u->host, u->port);
    else
        snprintf(where, sizeof where, "%s:%d", u->host, u->port);
    if (heartbeat_s < 0 || heartbeat_s > 65535)
        return pb_fail(err, PB_FATAL, "amqp heartbeat of %d s is out of range", heartbeat_s);

    amqp_connection_state_t conn = amqp_new_connection();
    if (!conn)
        return pb_fail(err, PB_FATAL, "out of memory creating an amqp connection");

    pb_status_t st;
    amqp_socket_t *sock = NULL;
    if (u->tls) {
        st = tls_socket(conn, cfg, &sock, err);
        if (st != PB_OK)
            goto fail;
    } else {
        sock = amqp_tcp_socket_new(conn); /* owned by conn */
        if (!sock) {
            st = pb_fail(err, PB_FATAL, "out of memory creating an amqp socket");
            goto fail;
        }
    }

    struct timeval tv = pb_ms_timeval(cfg->amqp_confirm_timeout);
    int rc = amqp_socket_open_noblock(sock, u->host, u->port, &tv);
    if (rc != AMQP_STATUS_OK) {
        st = open_failed(rc, u, cfg, where, err);
        goto fail;
    }
    rc = amqp_set_handshake_timeout(conn, &tv);
    if (rc != AMQP_STATUS_OK) {
        st = pb_fail(err, PB_FATAL, "cannot set the amqp handshake timeout: %s",
                     amqp_error_string2(rc));
        goto fail;
    }
    /* announce consumer_cancel_notify so that a deleted queue cancels our consumer visibly
     * instead of leaving it waiting forever (rabbitmq-c merges these with its defaults) */
    amqp_table_entry_t caps[1] = {
        {.key = amqp_cstring_bytes("consumer_cancel_notify"),
         .value = {.kind = AMQP_FIELD_KIND_BOOLEAN, .value = {.boolean = 1}}},
    };
    amqp_table_entry_t props[2] = {
        {.key = amqp_cstring_bytes("capabilities"),
         .value = {.kind = AMQP_FIELD_KIND_TABLE, .value = {.table = {1, caps}}}},
        {.key = amqp_cstring_bytes("product"),
         .value = {.kind = AMQP_FIELD_KIND_UTF8, .value = {.bytes = amqp_cstring_bytes("postbox")}}},
    };
    amqp_table_t client_properties = {2, props};
    amqp_rpc_reply_t r = amqp_login_with_properties(
        conn, u->vhost, AMQP_DEFAULT_MAX_CHANNELS, AMQP_DEFAULT_FRAME_SIZE, heartbeat_s,
        &client_properties, AMQP_SASL_METHOD_PLAIN, u->user, u->password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        st = login_failed(conn, r, u, where, err);
        goto fail;
    }
    /* bounds channel.open, exchange.declare and the polite close: a hung broker must not hang us */
    rc = amqp_set_rpc_timeout(conn, &tv);
    if (rc != AMQP_STATUS_OK) {
        st = pb_fail(err, PB_FATAL, "cannot set the amqp rpc timeout: %s", amqp_error_string2(rc));
        goto fail;
    }
    log_debug(FAC, "logged in to rabbitmq at %s vhost=\"%s\" user=\"%s\" heartbeat=%ds "
                   "frame_max=%d", where, u->vhost, u->user, amqp_get_heartbeat(conn),
              amqp_get_frame_max(conn));
    *out = conn;
    return PB_OK;

fail:
    amqp_destroy_connection(conn);
    return st;
}
