#include "cli/preflight.h"

#include <ctype.h>
#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "common/secret_file.h"
#include "common/str.h"
#include "metrics/http.h"
#include "store/pg.h"
#include "store/pg_target.h"

#define FAC "config"
#define SECRET_MAX 1024

/* amqp.tls_* files with a plaintext amqp:// URL would be ignored: the operator asked for TLS
 * and would get none. */
static pb_status_t check_amqp_tls(const pb_config_t *cfg, pb_error_t *err)
{
    bool files = *cfg->amqp_tls_ca_cert || *cfg->amqp_tls_cert || *cfg->amqp_tls_key;
    if (files && strncasecmp(cfg->amqp_url, "amqps://", 8) != 0)
        return pb_fail(err, PB_FATAL,
                       "amqp.tls_ca_cert, amqp.tls_cert or amqp.tls_key is set but amqp.url is not "
                       "amqps://: the connection would be plaintext and the files ignored (use "
                       "amqps://, or clear amqp.tls_*)");
    return PB_OK;
}

/* Files whose content is a secret, checked before anything uses them: tokens and passwords
 * (read by postbox or the broker library) and TLS private keys, which are as secret as a
 * password (anyone who reads one can pose as postbox). */
static pb_status_t check_secret_files(const pb_config_t *cfg, pb_error_t *err)
{
    const struct {
        const char *option, *path;
    } files[] = {
        {"nats.token_file", cfg->nats_token_file},
        {"nats.credentials", cfg->nats_credentials},
        {"redis.password_file", cfg->redis_password_file},
        {"metrics.token_file", cfg->metrics_token_file},
        {"amqp.tls_key", cfg->amqp_tls_key},
        {"nats.tls_key", cfg->nats_tls_key},
    };
    pb_status_t st = PB_OK;
    for (size_t i = 0; st == PB_OK && i < sizeof files / sizeof files[0]; i++)
        if (*files[i].path)
            st = pb_check_secret_file(files[i].option, files[i].path, err);
    for (size_t i = 0; st == PB_OK && i < cfg->n_kafka_props; i++)
        if (strcmp(cfg->kafka_prop_keys[i], "ssl.key.location") == 0)
            st = pb_check_secret_file("kafka.ssl.key.location", cfg->kafka_prop_values[i], err);
    return st;
}

static const char *conninfo_value(const PQconninfoOption *opts, const char *key)
{
    for (const PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, key) == 0)
            return o->val && *o->val ? o->val : NULL;
    return NULL;
}

/* Appends s percent-encoded (RFC 3986 unreserved characters kept). */
static void append_pct(pb_buf_t *b, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || strchr("-._~", *p))
            pb_buf_putc(b, (char)*p);
        else
            pb_buf_printf(b, "%%%02X", *p);
    }
}

static void replace_secret_string(char **slot, pb_buf_t *b)
{
    memset(*slot, 0, strlen(*slot));
    free(*slot);
    *slot = pb_strdup(b->data);
    memset(b->data, 0, b->len);
    pb_buf_free(b);
}

/* postgres.password_file: the password joins postgres.dsn (a URL query parameter or a quoted
 * key=value pair), which libpq then reads as usual. */
static pb_status_t load_pg_password(pb_config_t *cfg, pb_error_t *err)
{
    if (!*cfg->postgres_password_file)
        return PB_OK;
    PQconninfoOption *opts = PQconninfoParse(cfg->postgres_dsn, NULL);
    bool has = opts && conninfo_value(opts, "password");
    PQconninfoFree(opts);
    if (has)
        return pb_fail(err, PB_FATAL, "postgres.dsn has a password and postgres.password_file is "
                                      "set: keep one of them");
    char pw[SECRET_MAX];
    pb_status_t st = pb_read_secret_file("postgres.password_file", cfg->postgres_password_file,
                                         pw, sizeof pw, err);
    if (st != PB_OK)
        return st;
    const char *dsn = cfg->postgres_dsn;
    pb_buf_t b = {0};
    pb_buf_puts(&b, dsn);
    if (strncmp(dsn, "postgresql://", 13) == 0 || strncmp(dsn, "postgres://", 11) == 0) {
        pb_buf_puts(&b, strchr(dsn, '?') ? "&password=" : "?password=");
        append_pct(&b, pw);
    } else {
        pb_buf_puts(&b, *dsn ? " password='" : "password='");
        for (const char *p = pw; *p; p++) {
            if (*p == '\'' || *p == '\\')
                pb_buf_putc(&b, '\\');
            pb_buf_putc(&b, *p);
        }
        pb_buf_putc(&b, '\'');
    }
    memset(pw, 0, sizeof pw);
    replace_secret_string(&cfg->postgres_dsn, &b);
    return PB_OK;
}

/* amqp.password_file: the password joins amqp.url's userinfo, percent-encoded. */
static pb_status_t load_amqp_password(pb_config_t *cfg, pb_error_t *err)
{
    if (!*cfg->amqp_password_file)
        return PB_OK;
    const char *url = cfg->amqp_url;
    const char *sep = strstr(url, "://");
    if (!sep)
        return pb_fail(err, PB_FATAL, "amqp.password_file needs an amqp:// or amqps:// amqp.url");
    const char *auth = sep + 3;
    const char *auth_end = auth + strcspn(auth, "/?#");
    const char *at = NULL;
    for (const char *p = auth; p < auth_end; p++)
        if (*p == '@')
            at = p;
    if (at && memchr(auth, ':', (size_t)(at - auth)))
        return pb_fail(err, PB_FATAL, "amqp.url has a password and amqp.password_file is set: "
                                      "keep one of them");
    char pw[SECRET_MAX];
    pb_status_t st =
        pb_read_secret_file("amqp.password_file", cfg->amqp_password_file, pw, sizeof pw, err);
    if (st != PB_OK)
        return st;
    pb_buf_t b = {0};
    pb_buf_append(&b, url, (size_t)(auth - url));
    if (at)
        pb_buf_append(&b, auth, (size_t)(at - auth));
    else
        pb_buf_puts(&b, "guest"); /* the URL's default user */
    pb_buf_putc(&b, ':');
    append_pct(&b, pw);
    pb_buf_putc(&b, '@');
    pb_buf_puts(&b, at ? at + 1 : auth);
    memset(pw, 0, sizeof pw);
    replace_secret_string(&cfg->amqp_url, &b);
    return PB_OK;
}

/* libpq's default, sslmode=prefer, checks no certificate and falls back to plaintext: a
 * connection to another machine without sslmode=verify-full is warned about at every start.
 * The host is judged as libpq will see it, a named service and the environment applied. */
static void warn_pg_tls(const pb_config_t *cfg)
{
    pb_pg_target_t t;
    pb_error_t err;
    if (pb_pg_target_resolve(cfg->postgres_dsn, &t, &err) != PB_OK) {
        pb_pg_target_free(&t);
        return; /* pb_pg_dsn_check has said what is wrong */
    }
    const char *mode = t.sslmode;
    char where[256];
    const char *remote = pb_pg_target_remote(&t, where, sizeof where);
    if (t.service_unknown && (!mode || strcmp(mode, "verify-full") != 0))
        log_warn(FAC, "postgres.dsn: service \"%s\" is not defined in libpq's service files "
                      "(PGSERVICEFILE, ~/.pg_service.conf, PGSYSCONFDIR/pg_service.conf): cannot "
                      "tell which host it connects to, nor whether its certificate is checked",
                 t.service);
    else if (remote && (!mode || strcmp(mode, "verify-full") != 0)) {
        const char *why = !mode || strcmp(mode, "prefer") == 0 || strcmp(mode, "allow") == 0 ||
                                  strcmp(mode, "disable") == 0
                              ? "the connection may be plaintext and no certificate is checked"
                          : strcmp(mode, "verify-ca") == 0
                              ? "the server's certificate is checked, its host name is not"
                              : "encrypted, but the server's certificate is not checked";
        char via[300] = "";
        if (t.service)
            snprintf(via, sizeof via, " (from service \"%s\")", t.service);
        log_warn(FAC, "postgres.dsn: host \"%s\"%s with sslmode=%s: %s; use sslmode=verify-full "
                      "with sslrootcert (see the README, PostgreSQL over TLS)",
                 remote, via, mode ? mode : "prefer (libpq's default)", why);
    }
    pb_pg_target_free(&t);
}

/* Disabled certificate checks are said at every start of a command that uses the broker. */
static void warn_broker_tls(const pb_config_t *cfg, bool amqp, bool nats)
{
    if (amqp && strncasecmp(cfg->amqp_url, "amqps://", 8) == 0 && !cfg->amqp_tls_verify)
        log_warn(FAC, "amqp.tls_verify = false: the broker's certificate and host name are not "
                      "checked, anyone on the network path can read and change the messages");
    bool nats_tls = strstr(cfg->nats_url, "tls://") || *cfg->nats_tls_ca_cert || *cfg->nats_tls_cert;
    if (nats && nats_tls && !cfg->nats_tls_verify)
        log_warn(FAC, "nats.tls_verify = false: the server's certificate and host name are not "
                      "checked, anyone on the network path can read and change the messages");
}

pb_status_t pb_preflight(pb_config_t *cfg, const char *command, pb_error_t *err)
{
    pb_status_t st = check_amqp_tls(cfg, err);
    if (st != PB_OK || strcmp(command, "config") == 0)
        return st;
    if ((st = check_secret_files(cfg, err)) != PB_OK)
        return st;
    if ((st = load_pg_password(cfg, err)) != PB_OK || (st = load_amqp_password(cfg, err)) != PB_OK)
        return st;
    if ((st = pb_pg_dsn_check(cfg->postgres_dsn, err)) != PB_OK)
        return st;
    char host[256];
    unsigned port;
    if (*cfg->metrics_listen &&
        !pb_http_parse_listen(cfg->metrics_listen, host, sizeof host, &port))
        return pb_fail(err, PB_FATAL, "metrics.listen \"%s\": expected host:port, e.g. "
                                      "127.0.0.1:9187", cfg->metrics_listen);
    warn_pg_tls(cfg);
    const char *broker = strcmp(command, "relay") == 0 ? cfg->relay_sink
                         : strcmp(command, "consume") == 0 || strcmp(command, "dlq") == 0
                             ? cfg->consume_source
                             : "";
    if (strcmp(command, "check") == 0) /* it connects to both */
        warn_broker_tls(cfg,
                        strcmp(cfg->relay_sink, "amqp") == 0 || strcmp(cfg->consume_source, "amqp") == 0,
                        strcmp(cfg->relay_sink, "nats") == 0 || strcmp(cfg->consume_source, "nats") == 0);
    else
        warn_broker_tls(cfg, strcmp(broker, "amqp") == 0, strcmp(broker, "nats") == 0);
    return PB_OK;
}
