#include "broker/redis/conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/secret_file.h"
#include "common/str.h"

#define URL_USAGE "expected redis://[[user]:password@]host[:port][/db]"
#define DEFAULT_PORT 6379
#define DB_MAX 1000000
#define PASSWORD_MAX 1024

/* ---- URL ------------------------------------------------------------------------------------ */

static pb_status_t bad_url(const char *url, const char *why, pb_error_t *err)
{
    char shown[256];
    pb_redact_secret(url, shown, sizeof shown);
    return pb_fail(err, PB_FATAL, "bad redis url \"%s\": %s (" URL_USAGE ")", shown, why);
}

/* A decimal number s[0..n) within lo..hi into *out; false when it is not one. */
static bool parse_number(const char *s, size_t n, long lo, long hi, int *out)
{
    if (n == 0 || n > 9)
        return false;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

pb_status_t pb_redis_url_parse(const char *url, pb_redis_url_t *out, pb_error_t *err)
{
    memset(out, 0, sizeof *out);
    pb_status_t st = pb_url_precheck(url, "redis", URL_USAGE, err);
    if (st != PB_OK)
        return st;
    if (strncasecmp(url, "rediss://", 9) == 0)
        return bad_url(url, "TLS (rediss://) is not supported: Debian's hiredis 0.14 is built "
                            "without TLS; reach the server through a TLS tunnel or on a trusted "
                            "network with redis://", err);
    if (strncasecmp(url, "redis://", 8) != 0)
        return bad_url(url, "the scheme must be redis://", err);

    pb_redis_url_t u = {.port = DEFAULT_PORT};
    const char *auth = url + 8;
    const char *auth_end = auth + strcspn(auth, "/?#");
    if (*auth_end == '?' || *auth_end == '#')
        return bad_url(url, "query strings and fragments are not supported", err);

    /* userinfo ends at the last '@' of the authority: an '@' in a password may be left bare */
    const char *at = NULL;
    for (const char *q = auth; q < auth_end; q++)
        if (*q == '@')
            at = q;
    const char *host = auth;
    if (at) {
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        const char *user_end = colon ? colon : at;
        bool ok = true;
        if (user_end > auth)
            ok = pb_percent_decode(auth, (size_t)(user_end - auth), &u.user);
        if (ok && colon)
            ok = pb_percent_decode(colon + 1, (size_t)(at - colon - 1), &u.password);
        if (!ok) {
            pb_redis_url_free(&u);
            return bad_url(url, "malformed percent-escape in the user or password", err);
        }
        if (u.password && !*u.password) {
            free(u.password);
            u.password = NULL;
        }
        host = at + 1;
    }

    const char *host_end, *port_at = NULL;
    if (*host == '[') {
        const char *close = memchr(host, ']', (size_t)(auth_end - host));
        if (!close) {
            pb_redis_url_free(&u);
            return bad_url(url, "unclosed '[' in the host", err);
        }
        if (!pb_percent_decode(host + 1, (size_t)(close - host - 1), &u.host)) {
            pb_redis_url_free(&u);
            return bad_url(url, "malformed host", err);
        }
        host_end = close + 1;
        if (host_end < auth_end && *host_end == ':')
            port_at = host_end + 1;
        else if (host_end != auth_end) {
            pb_redis_url_free(&u);
            return bad_url(url, "text after the IPv6 address", err);
        }
    } else {
        const char *colon = memchr(host, ':', (size_t)(auth_end - host));
        host_end = colon ? colon : auth_end;
        port_at = colon ? colon + 1 : NULL;
        if (!pb_percent_decode(host, (size_t)(host_end - host), &u.host)) {
            pb_redis_url_free(&u);
            return bad_url(url, "malformed host", err);
        }
    }
    if (!u.host || !*u.host) {
        pb_redis_url_free(&u);
        return bad_url(url, "no host", err);
    }
    if (port_at && !parse_number(port_at, (size_t)(auth_end - port_at), 1, 65535, &u.port)) {
        pb_redis_url_free(&u);
        return bad_url(url, "the port must be a number in 1..65535", err);
    }
    if (*auth_end == '/' && auth_end[1]) {
        const char *db = auth_end + 1;
        if (!parse_number(db, strlen(db), 0, DB_MAX, &u.db)) {
            pb_redis_url_free(&u);
            return bad_url(url, "the path must be a database number (0, 1, ...)", err);
        }
    }
    *out = u;
    return PB_OK;
}

void pb_redis_url_free(pb_redis_url_t *u)
{
    if (!u)
        return;
    free(u->user);
    if (u->password)
        memset(u->password, 0, strlen(u->password));
    free(u->password);
    free(u->host);
    memset(u, 0, sizeof *u);
}

void pb_redis_url_where(const pb_redis_url_t *u, char *buf, size_t n)
{
    snprintf(buf, n, strchr(u->host, ':') ? "[%s]:%d/%d" : "%s:%d/%d", u->host, u->port, u->db);
}

/* The password to log in with: redis.password_file when set, else the URL's. Into out. */
static pb_status_t password_of(const pb_config_t *cfg, const pb_redis_url_t *u, char *out,
                               size_t n, pb_error_t *err)
{
    out[0] = '\0';
    if (*cfg->redis_password_file)
        return pb_read_secret_file("redis.password_file", cfg->redis_password_file, out, n, err);
    if (u->password)
        snprintf(out, n, "%s", u->password);
    return PB_OK;
}

pb_status_t pb_redis_check_config(const pb_config_t *cfg, pb_error_t *err)
{
    pb_redis_url_t u;
    pb_status_t st = pb_redis_url_parse(cfg->redis_url, &u, err);
    if (st != PB_OK)
        return st;
    char pw[PASSWORD_MAX];
    st = password_of(cfg, &u, pw, sizeof pw, err);
    memset(pw, 0, sizeof pw);
    pb_redis_url_free(&u);
    return st;
}

/* ---- errors --------------------------------------------------------------------------------- */

bool pb_redis_error_transient(const char *e)
{
    static const char *const words[] = {"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "READONLY",
                                        "CLUSTERDOWN", "NOREPLICAS", "MISCONF", "OOM", "NOAUTH"};
    if (!e)
        return true;
    size_t len = strcspn(e, " ");
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strlen(words[i]) == len && strncmp(e, words[i], len) == 0)
            return true;
    return false;
}

pb_status_t pb_redis_context_fail(const redisContext *c, const char *where, const char *what,
                                  pb_error_t *err)
{
    if (!c)
        return pb_fail(err, PB_FATAL, "redis at %s: %s: out of memory", where, what);
    const char *text = c->errstr[0] ? c->errstr : "connection failed";
    bool timeout = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
    pb_status_t st = c->err == REDIS_ERR_PROTOCOL || c->err == REDIS_ERR_OOM ? PB_FATAL
                                                                              : PB_TRANSIENT;
    return pb_fail(err, st, "redis at %s: %s: %s%s", where, what, text,
                   timeout ? " (no reply within redis.timeout)" : "");
}

pb_status_t pb_redis_run(redisContext *c, const char *where, const char *what, int argc,
                         const char **argv, redisReply **reply, pb_error_t *err)
{
    if (reply)
        *reply = NULL;
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (!r)
        return pb_redis_context_fail(c, where, what, err);
    if (r->type == REDIS_REPLY_ERROR) {
        pb_status_t st = pb_redis_error_transient(r->str) ? PB_TRANSIENT : PB_FATAL;
        pb_fail(err, st, "redis at %s: %s: %s", where, what, r->str);
        freeReplyObject(r);
        return st;
    }
    if (reply)
        *reply = r;
    else
        freeReplyObject(r);
    return PB_OK;
}

/* ---- connecting ----------------------------------------------------------------------------- */

/* AUTH [user] password. A refusal is PB_FATAL: retrying the same credentials cannot help. */
static pb_status_t login(redisContext *c, const pb_redis_url_t *u, const char *password,
                         const char *where, pb_error_t *err)
{
    const char *argv[3] = {"AUTH"};
    int argc = 1;
    if (u->user)
        argv[argc++] = u->user;
    argv[argc++] = password;
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (!r)
        return pb_redis_context_fail(c, where, "AUTH", err);
    pb_status_t st = PB_OK;
    if (r->type == REDIS_REPLY_ERROR)
        st = pb_fail(err, PB_FATAL, "redis at %s: login%s%s%s refused: %s", where,
                     u->user ? " as user \"" : "", u->user ? u->user : "", u->user ? "\"" : "",
                     r->str);
    freeReplyObject(r);
    return st;
}

/* PING: the server answers, and NOAUTH when it wants a password that was not given. */
static pb_status_t ping(redisContext *c, const char *where, bool logged_in, pb_error_t *err)
{
    redisReply *r = redisCommand(c, "PING");
    if (!r)
        return pb_redis_context_fail(c, where, "PING", err);
    pb_status_t st = PB_OK;
    if (r->type == REDIS_REPLY_ERROR) {
        if (!logged_in && strncmp(r->str, "NOAUTH", 6) == 0)
            st = pb_fail(err, PB_FATAL, "redis at %s requires a password: give it in redis.url "
                                        "or redis.password_file", where);
        else
            st = pb_fail(err, pb_redis_error_transient(r->str) ? PB_TRANSIENT : PB_FATAL,
                         "redis at %s: PING: %s", where, r->str);
    }
    freeReplyObject(r);
    return st;
}

/* The server's version from INFO server ("redis_version:7.0.15"). */
static void read_version(redisContext *c, pb_redis_server_t *srv)
{
    redisReply *r = redisCommand(c, "INFO server");
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *v = strstr(r->str, "redis_version:");
        if (v) {
            v += strlen("redis_version:");
            snprintf(srv->version, sizeof srv->version, "%.*s", (int)strcspn(v, "\r\n"), v);
            if (sscanf(srv->version, "%d.%d", &srv->major, &srv->minor) != 2)
                srv->major = srv->minor = 0;
        }
    }
    if (r)
        freeReplyObject(r);
}

/* Refuses a server in cluster mode (INFO cluster says cluster_enabled:1): postbox talks to the
 * one server of redis.url and does not follow MOVED/ASK redirections, so the keys another node
 * owns would fail one by one (and their events be dead-lettered) instead of stopping at start. */
static pb_status_t refuse_cluster_mode(redisContext *c, const char *where, pb_error_t *err)
{
    redisReply *r = redisCommand(c, "INFO cluster");
    if (!r)
        return pb_redis_context_fail(c, where, "INFO cluster", err);
    bool cluster = r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_enabled:1") != NULL;
    freeReplyObject(r);
    if (cluster)
        return pb_fail(err, PB_FATAL, "redis at %s runs in cluster mode (cluster_enabled:1): "
                                      "postbox does not support Redis Cluster (it follows no "
                                      "MOVED redirection); point redis.url at a standalone "
                                      "server or the address of a replicated primary", where);
    return PB_OK;
}

pb_status_t pb_redis_connect(const pb_config_t *cfg, redisContext **out, pb_redis_server_t *srv,
                             pb_error_t *err)
{
    *out = NULL;
    memset(srv, 0, sizeof *srv);
    pb_redis_url_t u;
    pb_status_t st = pb_redis_url_parse(cfg->redis_url, &u, err);
    if (st != PB_OK)
        return st;
    pb_redis_url_where(&u, srv->where, sizeof srv->where);
    char pw[PASSWORD_MAX];
    if ((st = password_of(cfg, &u, pw, sizeof pw, err)) != PB_OK) {
        pb_redis_url_free(&u);
        return st;
    }

    struct timeval tv = pb_ms_timeval(cfg->redis_timeout);
    redisContext *c = redisConnectWithTimeout(u.host, u.port, tv);
    if (!c || c->err) {
        st = pb_redis_context_fail(c, srv->where, "connect", err);
        goto done;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK || redisEnableKeepAlive(c) != REDIS_OK) {
        st = pb_redis_context_fail(c, srv->where, "socket options", err);
        goto done;
    }
    if (pw[0] && (st = login(c, &u, pw, srv->where, err)) != PB_OK)
        goto done;
    if ((st = refuse_cluster_mode(c, srv->where, err)) != PB_OK)
        goto done;
    if (u.db != 0) {
        char db[16];
        snprintf(db, sizeof db, "%d", u.db);
        const char *argv[2] = {"SELECT", db};
        if ((st = pb_redis_run(c, srv->where, "SELECT", 2, argv, NULL, err)) != PB_OK)
            goto done;
    }
    if ((st = ping(c, srv->where, pw[0] != '\0', err)) != PB_OK)
        goto done;
    read_version(c, srv);
    *out = c;
    c = NULL;
done:
    memset(pw, 0, sizeof pw);
    pb_redis_url_free(&u);
    if (c)
        redisFree(c);
    return st;
}
