#include "store/pg.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/retry.h"
#include "common/log.h"
#include "common/str.h"

static void on_notice(void *arg, const char *message)
{
    (void)arg;
    size_t n = strlen(message);
    while (n && message[n - 1] == '\n')
        n--;
    log_info("pg", "server notice: %.*s", (int)n, message);
}

static void strip_newlines(char *s)
{
    for (char *p = s; *p; p++)
        if (*p == '\n')
            *p = ' ';
    size_t n = strlen(s);
    while (n && s[n - 1] == ' ')
        s[--n] = '\0';
}

/* libpq's parse errors quote the connection string around the mistake, and that may be the
 * password: only the kind of mistake is told (the branch on its text picks our message, it
 * classifies nothing). */
static const char *dsn_problem(const char *libpq_msg)
{
    if (!libpq_msg)
        return "out of memory while parsing it";
    if (strstr(libpq_msg, "missing \"=\" after"))
        return "a word without \"=\" (a value with blanks goes in single quotes)";
    if (strstr(libpq_msg, "unterminated quoted string"))
        return "an unterminated quoted value";
    if (strstr(libpq_msg, "invalid connection option"))
        return "an unknown keyword";
    if (strstr(libpq_msg, "percent-encoded"))
        return "a bad percent-encoding (%XX)";
    if (strstr(libpq_msg, "URI"))
        return "a malformed URL";
    if (strstr(libpq_msg, "exceeds the maximum"))
        return "more text than libpq accepts";
    return "a syntax error";
}

pb_status_t pb_pg_dsn_check(const char *dsn, pb_error_t *err)
{
    char *parse_err = NULL;
    PQconninfoOption *opts = PQconninfoParse(dsn, &parse_err);
    if (!opts) {
        pb_status_t st = pb_fail(err, PB_FATAL,
                                 "postgres.dsn is not a valid connection string: it has %s "
                                 "(libpq's message is not shown: it may quote the password)",
                                 dsn_problem(parse_err));
        PQfreemem(parse_err);
        return st;
    }
    PQconninfoFree(opts);
    /* libpq ends a URL's userinfo at its first '@' and its authority at the first '/': an
     * unencoded '@' or '/' in a password makes a host or port of the password's tail, and
     * libpq's connection errors would print it */
    const char *sep = strstr(dsn, "://");
    if (sep && (strncmp(dsn, "postgresql://", 13) == 0 || strncmp(dsn, "postgres://", 11) == 0)) {
        const char *auth = sep + 3;
        size_t auth_len = strcspn(auth, "/?");
        const char *at = memchr(auth, '@', auth_len);
        if ((at && memchr(at + 1, '@', auth_len - (size_t)(at + 1 - auth))) ||
            strchr(auth + auth_len, '@'))
            return pb_fail(err, PB_FATAL,
                           "postgres.dsn: an '@' after the user part of the URL: percent-encode "
                           "'@', '/' and '?' in a password (%%40, %%2F, %%3F) or use "
                           "postgres.password_file");
    }
    return PB_OK;
}

pb_status_t pb_pg_version_check(int version, const char *version_text, pb_error_t *err)
{
    /* the relay's claim names its batches in flight as an int8multirange (PostgreSQL 14) */
    if (version >= PB_PG_MIN_VERSION)
        return PB_OK;
    return pb_fail(err, PB_FATAL, "postgresql %s is too old: postbox needs %d or later",
                   version_text ? version_text : "(unknown version)", PB_PG_MIN_VERSION / 10000);
}

pb_status_t pb_pg_open(const char *dsn, PGconn **out, pb_error_t *err)
{
    *out = NULL;
    pb_status_t st = pb_pg_dsn_check(dsn, err);
    if (st != PB_OK)
        return st;

    /* fallback_application_name: `postbox status` and pg_stat_activity show who we are,
     * unless the DSN names the application itself */
    const char *keys[] = {"dbname", "fallback_application_name", NULL};
    const char *vals[] = {dsn, "postbox", NULL};
    PGconn *conn = PQconnectdbParams(keys, vals, 1);
    if (!conn)
        return pb_fail(err, PB_TRANSIENT, "cannot allocate a postgresql connection");
    if (PQstatus(conn) != CONNECTION_OK) {
        pb_fail(err, PB_TRANSIENT, "%s", PQerrorMessage(conn));
        strip_newlines(err->msg);
        PQfinish(conn);
        return PB_TRANSIENT;
    }
    PQsetNoticeProcessor(conn, on_notice, NULL);
    *out = conn;
    return PB_OK;
}

pb_status_t pb_pg_connect(const char *dsn, PGconn **out, pb_error_t *err)
{
    pb_status_t st = pb_pg_open(dsn, out, err);
    if (st == PB_OK &&
        (st = pb_pg_version_check(PQserverVersion(*out),
                                  PQparameterStatus(*out, "server_version"), err)) != PB_OK) {
        PQfinish(*out);
        *out = NULL;
    }
    return st;
}

pb_status_t pb_pg_connect_primary(const char *dsn, PGconn **out, pb_error_t *err)
{
    pb_status_t st = pb_pg_connect(dsn, out, err);
    if (st != PB_OK)
        return st;
    const char *standby = PQparameterStatus(*out, "in_hot_standby");
    if (!standby || strcmp(standby, "on") != 0)
        return PB_OK;
    /* transient: a standby may be promoted (a failover in progress), and then it is the one */
    char where[256];
    pb_pg_describe(*out, where, sizeof where);
    PQfinish(*out);
    *out = NULL;
    return pb_fail(err, PB_TRANSIENT,
                   "postgresql %s is a standby (read-only, in recovery), and postbox needs the "
                   "primary: list every node in postgres.dsn with "
                   "target_session_attrs=read-write (the relay and the consumer retry until a "
                   "primary answers)",
                   where);
}

typedef struct dsn_arg {
    const char *dsn;
    PGconn **out;
} dsn_arg_t;

static pb_status_t connect_once(void *arg, pb_error_t *err)
{
    dsn_arg_t *a = arg;
    return pb_pg_connect_primary(a->dsn, a->out, err);
}

pb_status_t pb_pg_connect_retry(const char *dsn, int64_t cap_ms, volatile sig_atomic_t *stop,
                                PGconn **out, pb_error_t *err)
{
    pb_retry_t r = {.fac = "pg", .what = "postgresql", .cap_ms = cap_ms, .stop = stop};
    dsn_arg_t a = {dsn, out};
    return pb_retry_connect(&r, connect_once, &a, err);
}

pb_status_t pb_pg_check(PGconn *conn, PGresult *res, ExecStatusType expected, const char *what,
                        pb_error_t *err)
{
    if (res && PQresultStatus(res) == expected)
        return PB_OK;
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = res ? PQresultErrorMessage(res) : "";
    if (!msg || !*msg)
        msg = PQerrorMessage(conn);
    pb_fail(err, PB_FATAL, "%s: %s", what, msg);
    strip_newlines(err->msg);
    if (err && state)
        snprintf(err->sqlstate, sizeof err->sqlstate, "%.5s", state);
    pb_status_t st = PB_FATAL;
    if (PQstatus(conn) != CONNECTION_OK || !state)
        st = PB_TRANSIENT;
    else if (strncmp(state, "08", 2) == 0 || strcmp(state, "57P01") == 0 ||
             strcmp(state, "57P02") == 0 || strcmp(state, "57P03") == 0 ||
             strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
             strcmp(state, "25P03") == 0)
        st = PB_TRANSIENT;
    if (err)
        err->status = st;
    PQclear(res);
    return st;
}

pb_status_t pb_pg_sql_printf(char *sql, size_t size, const char *what, pb_error_t *err,
                             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sql, size, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size) {
        if (size)
            sql[0] = '\0';
        return pb_fail(err, PB_FATAL, "%s: the statement does not fit in %zu bytes", what, size);
    }
    return PB_OK;
}

/* The message of libpq's last error on conn as one line. */
static void pg_error_line(PGconn *conn, char *out, size_t outsz)
{
    const char *msg = conn ? PQerrorMessage(conn) : "";
    pb_text_copy(out, outsz, *msg ? msg : "out of memory");
    size_t n = strlen(out);
    while (n && out[n - 1] == ' ')
        out[--n] = '\0';
}

pb_status_t pb_pg_quote_ident(PGconn *conn, const char *name, const char *what, char **out,
                              pb_error_t *err)
{
    *out = PQescapeIdentifier(conn, name, strlen(name));
    if (*out)
        return PB_OK;
    char why[256];
    pg_error_line(conn, why, sizeof why);
    return pb_fail(err, PB_FATAL, "%s: cannot quote it as an identifier: %s", what, why);
}

pb_status_t pb_pg_quote_literal(PGconn *conn, const char *text, const char *what, char **out,
                                pb_error_t *err)
{
    *out = PQescapeLiteral(conn, text, strlen(text));
    if (*out)
        return PB_OK;
    char why[256];
    pg_error_line(conn, why, sizeof why);
    return pb_fail(err, PB_FATAL, "%s: cannot quote it as a string: %s", what, why);
}

pb_status_t pb_pg_exec(PGconn *conn, const char *sql, pb_error_t *err)
{
    PGresult *res = PQexec(conn, sql);
    pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, sql, err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}

/* The one value of a one-row, one-column query: the result (to clear) and the value's text. */
static pb_status_t query_value(PGconn *conn, const char *sql, const char *what, PGresult **res,
                               pb_error_t *err)
{
    *res = PQexec(conn, sql);
    pb_status_t st = pb_pg_check(conn, *res, PGRES_TUPLES_OK, what, err);
    if (st != PB_OK)
        return st;
    if (PQntuples(*res) != 1 || PQnfields(*res) != 1) {
        int rows = PQntuples(*res), columns = PQnfields(*res);
        PQclear(*res);
        return pb_fail(err, PB_FATAL, "%s: the server returned %d row(s) of %d column(s), not one value",
                       what, rows, columns);
    }
    return PB_OK;
}

pb_status_t pb_pg_query_bool(PGconn *conn, const char *sql, const char *what, bool *out,
                             pb_error_t *err)
{
    PGresult *res;
    pb_status_t st = query_value(conn, sql, what, &res, err);
    if (st != PB_OK)
        return st;
    *out = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    return PB_OK;
}

pb_status_t pb_pg_query_int64(PGconn *conn, const char *sql, const char *what, int64_t *out,
                              bool *is_null, pb_error_t *err)
{
    PGresult *res;
    pb_status_t st = query_value(conn, sql, what, &res, err);
    if (st != PB_OK)
        return st;
    bool null = PQgetisnull(res, 0, 0);
    *out = null ? 0 : strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    if (is_null)
        *is_null = null;
    PQclear(res);
    return PB_OK;
}

void pb_pg_describe(PGconn *conn, char *out, size_t outsz)
{
    const char *host = PQhost(conn);
    snprintf(out, outsz, "%s:%s/%s", host && *host ? host : "(socket)", PQport(conn), PQdb(conn));
}

pb_status_t pb_pg_send(PGconn *conn, const char *sql, pb_error_t *err)
{
    if (PQsendQueryParams(conn, sql, 0, NULL, NULL, NULL, NULL, 0) != 1)
        return pb_fail(err, PB_TRANSIENT, "%s: %s", sql, PQerrorMessage(conn));
    return PB_OK;
}

pb_status_t pb_pg_send_sync(PGconn *conn, pb_error_t *err)
{
    if (PQpipelineSync(conn) != 1)
        return pb_fail(err, PB_TRANSIENT, "pipeline sync: %s", PQerrorMessage(conn));
    return PB_OK;
}

pb_status_t pb_pg_read_result(PGconn *conn, ExecStatusType expect, const char *what,
                              PGresult **out, pb_error_t *err)
{
    PGresult *res = PQgetResult(conn);
    if (!res) /* the reads are out of step with what was queued: a bug, not the network */
        return pb_fail(err, PB_FATAL, "%s: no result (pipeline out of step)", what);
    if (PQresultStatus(res) == PGRES_PIPELINE_ABORTED) {
        PQclear(res);
        return pb_fail(err, PB_TRANSIENT, "%s: not run (an earlier statement failed)", what);
    }
    pb_status_t st = pb_pg_check(conn, res, expect, what, err);
    if (st != PB_OK)
        return st;
    PGresult *end = PQgetResult(conn);
    if (end) {
        PQclear(end);
        PQclear(res);
        return pb_fail(err, PB_FATAL, "%s: more results than one statement gives", what);
    }
    if (out)
        *out = res;
    else
        PQclear(res);
    return PB_OK;
}

pb_status_t pb_pg_read_sync(PGconn *conn, pb_error_t *err)
{
    PGresult *res = PQgetResult(conn);
    if (res && PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
        PQclear(res);
        return PB_OK;
    }
    return pb_pg_check(conn, res, PGRES_PIPELINE_SYNC, "pipeline sync", err);
}

pb_status_t pb_pg_prepare_all(PGconn *conn, const pb_pg_statement_t *stmts, size_t n,
                              pb_error_t *err)
{
    for (size_t k = 0; k < n; k++) {
        PGresult *res = PQprepare(conn, stmts[k].name, stmts[k].sql, 0, NULL);
        char what[96];
        snprintf(what, sizeof what, "prepare %s", stmts[k].name);
        pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, what, err);
        if (st != PB_OK)
            return st;
        PQclear(res);
    }
    return PB_OK;
}
