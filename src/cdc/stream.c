#include "cdc/stream.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include "cdc/pgoutput.h"
#include "common/clock.h"
#include "common/log.h"
#include "store/pg.h"

#define FAC "cdc"
#define PG_EPOCH_OFFSET_US 946684800000000LL /* 2000-01-01 in unix microseconds */
#define REPORT_MIN_GAP_MS 100
/* How long a clean close waits for the server to end the copy (having read the last status). */
#define CLOSE_WAIT_MS 2000
/* pgoutput streams in-progress transactions (protocol 2, option streaming) from PostgreSQL 14 */
#define STREAMING_MIN_SERVER_VERSION 140000

bool pb_lsn_parse(const char *text, uint64_t *lsn)
{
    unsigned int hi, lo;
    if (!text || sscanf(text, "%X/%X", &hi, &lo) != 2)
        return false;
    *lsn = ((uint64_t)hi << 32) | lo;
    return true;
}

void pb_lsn_format(uint64_t lsn, char *out, size_t outsz)
{
    snprintf(out, outsz, "%X/%X", (unsigned)(lsn >> 32), (unsigned)(lsn & 0xffffffffu));
}

/* Runs a simple-protocol statement on the walsender connection (the only protocol it speaks). */
static pb_status_t simple(pb_cdc_stream_t *s, const char *sql, ExecStatusType expected,
                          PGresult **out, pb_error_t *err)
{
    PGresult *res = PQexec(s->conn, sql);
    pb_status_t st = pb_pg_check(s->conn, res, expected, sql, err);
    if (st != PB_OK)
        return st;
    if (out)
        *out = res;
    else
        PQclear(res);
    return PB_OK;
}

static pb_status_t ensure_publication(pb_cdc_stream_t *s, pb_error_t *err)
{
    const pb_config_t *cfg = s->cfg;
    char *lit = NULL, *ident = NULL;
    char sql[1024];
    PGresult *res = NULL;
    pb_status_t st = pb_pg_quote_literal(s->conn, cfg->cdc_publication, "cdc.publication", &lit, err);
    if (st == PB_OK)
        st = pb_pg_quote_ident(s->conn, cfg->cdc_publication, "cdc.publication", &ident, err);
    if (st == PB_OK)
        st = pb_pg_sql_printf(sql, sizeof sql, "look up the publication", err,
                              "SELECT 1 FROM pg_publication WHERE pubname = %s", lit);
    if (st == PB_OK)
        st = simple(s, sql, PGRES_TUPLES_OK, &res, err);
    if (st == PB_OK && PQntuples(res) == 0) {
        /* inserts only: deleting or marking rows puts nothing on the stream */
        st = pb_pg_sql_printf(sql, sizeof sql, "create the publication", err,
                              "CREATE PUBLICATION %s FOR TABLE postbox.outbox WITH (publish = 'insert')",
                              ident);
        if (st == PB_OK)
            st = simple(s, sql, PGRES_COMMAND_OK, NULL, err);
        if (st == PB_OK)
            log_info(FAC, "created publication \"%s\" for inserts into postbox.outbox",
                     cfg->cdc_publication);
    }
    PQclear(res);
    PQfreemem(lit);
    PQfreemem(ident);
    return st;
}

static pb_status_t ensure_slot(pb_cdc_stream_t *s, pb_error_t *err)
{
    const pb_config_t *cfg = s->cfg;
    char *ident;
    pb_status_t st = pb_pg_quote_ident(s->conn, cfg->cdc_slot, "cdc.slot", &ident, err);
    if (st != PB_OK)
        return st;
    char sql[512];
    st = pb_pg_sql_printf(sql, sizeof sql, "create the replication slot", err,
                          "CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (SNAPSHOT 'nothing')", ident);
    PQfreemem(ident);
    if (st != PB_OK)
        return st;
    PGresult *res = PQexec(s->conn, sql);
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (state && strcmp(state, "42710") == 0) { /* exists already: what we want */
        PQclear(res);
        return PB_OK;
    }
    if ((st = pb_pg_check(s->conn, res, PGRES_TUPLES_OK, "create replication slot", err)) != PB_OK)
        return st;
    log_info(FAC, "created logical replication slot \"%s\" (pgoutput), consistent at %s",
             cfg->cdc_slot, PQgetvalue(res, 0, 1));
    PQclear(res);
    return PB_OK;
}

/* The START_REPLICATION command of the slot and publication into sql[size]. */
static pb_status_t start_command(pb_cdc_stream_t *s, char *sql, size_t size, pb_error_t *err)
{
    const pb_config_t *cfg = s->cfg;
    char *slot = NULL, *pub = NULL, *publit = NULL;
    pb_status_t st = pb_pg_quote_ident(s->conn, cfg->cdc_slot, "cdc.slot", &slot, err);
    if (st == PB_OK)
        st = pb_pg_quote_ident(s->conn, cfg->cdc_publication, "cdc.publication", &pub, err);
    /* publication_names is a list of identifiers inside a string literal */
    if (st == PB_OK)
        st = pb_pg_quote_literal(s->conn, pub, "cdc.publication", &publit, err);
    /* Protocol 2 with streaming (PostgreSQL 14+): a transaction larger than the server's
     * logical_decoding_work_mem is sent while it runs, in blocks, instead of being spilled by
     * the server and sent in one go after its commit; the capture keeps such blocks on disk
     * until the commit (cdc/streamed.h). */
    if (st == PB_OK)
        st = pb_pg_sql_printf(sql, size, "start replication", err,
                              "START_REPLICATION SLOT %s LOGICAL 0/0 (\"proto_version\" '%s', "
                              "\"publication_names\" %s, \"messages\" 'true'%s)",
                              slot, s->streams_in_progress ? "2" : "1", publit,
                              s->streams_in_progress ? ", \"streaming\" 'on'" : "");
    PQfreemem(slot);
    PQfreemem(pub);
    PQfreemem(publit);
    return st;
}

static pb_status_t open_conn(pb_cdc_stream_t *s, pb_error_t *err)
{
    const char *keys[] = {"dbname", "replication", "fallback_application_name", NULL};
    const char *vals[] = {s->cfg->postgres_dsn, "database", "postbox-cdc", NULL};
    s->conn = PQconnectdbParams(keys, vals, 1);
    if (!s->conn || PQstatus(s->conn) != CONNECTION_OK) {
        pb_fail(err, PB_TRANSIENT, "replication connection: %s",
                s->conn ? PQerrorMessage(s->conn) : "out of memory");
        for (char *p = err->msg; *p; p++)
            if (*p == '\n')
                *p = ' ';
        PQfinish(s->conn);
        s->conn = NULL;
        return PB_TRANSIENT;
    }
    PGresult *res = NULL;
    pb_status_t st = simple(s, "IDENTIFY_SYSTEM", PGRES_TUPLES_OK, &res, err);
    if (st != PB_OK)
        return st;
    bool has_db = PQnfields(res) >= 4 && !PQgetisnull(res, 0, 3);
    PQclear(res);
    if (!has_db)
        return pb_fail(err, PB_FATAL, "replication connection is not bound to a database");
    return PB_OK;
}

pb_status_t pb_cdc_stream_create_exported(pb_cdc_stream_t *s, const pb_config_t *cfg,
                                          char *snapshot, size_t size, uint64_t *consistent,
                                          pb_error_t *err)
{
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    char *ident = NULL;
    char sql[512];
    PGresult *res = NULL;
    pb_status_t st = open_conn(s, err);
    if (st == PB_OK)
        st = ensure_publication(s, err);
    if (st == PB_OK)
        st = pb_pg_quote_ident(s->conn, cfg->cdc_slot, "cdc.slot", &ident, err);
    if (st == PB_OK)
        st = pb_pg_sql_printf(sql, sizeof sql, "create the replication slot", err,
                              "CREATE_REPLICATION_SLOT %s LOGICAL pgoutput (SNAPSHOT 'export')",
                              ident);
    PQfreemem(ident);
    if (st == PB_OK)
        st = simple(s, sql, PGRES_TUPLES_OK, &res, err);
    if (st == PB_OK && (PQntuples(res) != 1 || PQnfields(res) < 3 || PQgetisnull(res, 0, 2) ||
                        !pb_lsn_parse(PQgetvalue(res, 0, 1), consistent) ||
                        strlen(PQgetvalue(res, 0, 2)) >= size))
        st = pb_fail(err, PB_FATAL, "create the replication slot: the server exported no snapshot");
    if (st == PB_OK)
        snprintf(snapshot, size, "%s", PQgetvalue(res, 0, 2));
    PQclear(res);
    if (st != PB_OK)
        pb_cdc_stream_close(s);
    return st;
}

pb_status_t pb_cdc_stream_open(pb_cdc_stream_t *s, const pb_config_t *cfg, bool create,
                               pb_error_t *err)
{
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    pb_status_t st = open_conn(s, err);
    if (st == PB_OK && create) {
        if ((st = ensure_publication(s, err)) == PB_OK)
            st = ensure_slot(s, err);
    }
    if (st != PB_OK) {
        pb_cdc_stream_close(s);
        return st;
    }
    s->streams_in_progress = cfg->cdc_stream_in_progress &&
                             PQserverVersion(s->conn) >= STREAMING_MIN_SERVER_VERSION;
    char sql[1024];
    if ((st = start_command(s, sql, sizeof sql, err)) != PB_OK) {
        pb_cdc_stream_close(s);
        return st;
    }
    PGresult *res = PQexec(s->conn, sql);
    if (PQresultStatus(res) != PGRES_COPY_BOTH) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        s->in_use_elsewhere = state && strcmp(state, "55006") == 0;
        st = pb_pg_check(s->conn, res, PGRES_COPY_BOTH, "start replication", err);
        if (s->in_use_elsewhere)
            st = PB_TRANSIENT;
        else if (state && strcmp(state, "42704") == 0)
            pb_fail(err, PB_FATAL, "replication slot \"%s\" does not exist (set cdc.create_slot = true)",
                    cfg->cdc_slot);
        pb_cdc_stream_close(s);
        return st;
    }
    PQclear(res);
    s->copying = true;
    if (PQsetnonblocking(s->conn, 1) != 0) {
        pb_cdc_stream_close(s);
        return pb_fail(err, PB_TRANSIENT, "cannot make the replication connection non-blocking");
    }
    s->last_report_ms = pb_monotonic_ms();
    log_info(FAC, "streaming slot \"%s\" (publication \"%s\", pgoutput protocol %s)", cfg->cdc_slot,
             cfg->cdc_publication,
             s->streams_in_progress ? "2, large transactions streamed while in progress" : "1");
    return PB_OK;
}

static pb_status_t send_status(pb_cdc_stream_t *s, bool reply_requested, pb_error_t *err)
{
    unsigned char msg[34];
    msg[0] = 'r';
    pb_pgo_put_u64(msg + 1, s->received_lsn > s->confirmed_lsn ? s->received_lsn : s->confirmed_lsn);
    pb_pgo_put_u64(msg + 9, s->confirmed_lsn);
    pb_pgo_put_u64(msg + 17, s->confirmed_lsn);
    pb_pgo_put_u64(msg + 25, (uint64_t)(pb_wall_us() - PG_EPOCH_OFFSET_US));
    msg[33] = reply_requested ? 1 : 0;
    if (PQputCopyData(s->conn, (const char *)msg, sizeof msg) != 1 || PQflush(s->conn) < 0)
        return pb_fail(err, PB_TRANSIENT, "send standby status: %s", PQerrorMessage(s->conn));
    s->reported_lsn = s->confirmed_lsn;
    s->last_report_ms = pb_monotonic_ms();
    return PB_OK;
}

pb_status_t pb_cdc_stream_confirm(pb_cdc_stream_t *s, uint64_t lsn, pb_error_t *err)
{
    if (lsn > s->confirmed_lsn)
        s->confirmed_lsn = lsn;
    int64_t since = pb_monotonic_ms() - s->last_report_ms;
    bool changed = s->confirmed_lsn != s->reported_lsn;
    if ((changed && since >= REPORT_MIN_GAP_MS) || since >= s->cfg->cdc_status_interval)
        return send_status(s, false, err);
    return PB_OK;
}

/* Handles one CopyData message; *payload set for XLogData. */
static pb_status_t on_copy_data(pb_cdc_stream_t *s, const char *buf, int n, const char **payload,
                                size_t *len, pb_error_t *err)
{
    const unsigned char *u = (const unsigned char *)buf;
    if (buf[0] == 'k') {
        if (n < 18)
            return pb_fail(err, PB_TRANSIENT, "replication: short keepalive");
        uint64_t wal_end = pb_pgo_get_u64(u + 1);
        if (wal_end > s->keepalive_end)
            s->keepalive_end = wal_end;
        if (u[17])
            return send_status(s, false, err);
        return PB_OK;
    }
    if (buf[0] == 'w') {
        if (n < 25)
            return pb_fail(err, PB_TRANSIENT, "replication: short XLogData");
        uint64_t start = pb_pgo_get_u64(u + 1);
        if (start > s->received_lsn) /* 0/0 for all but the last write of a callback */
            s->received_lsn = start;
        *payload = buf + 25;
        *len = (size_t)n - 25;
        return PB_OK;
    }
    return pb_fail(err, PB_TRANSIENT, "replication: unknown message type 0x%02x", u[0]);
}

/* Waits up to ms for the connection's socket to be readable: select's result (errno set when
 * negative). */
static int wait_readable(PGconn *conn, int64_t ms)
{
    int fd = PQsocket(conn);
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(fd, &rd);
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return select(fd + 1, &rd, NULL, NULL, &tv);
}

pb_status_t pb_cdc_stream_read(pb_cdc_stream_t *s, int64_t timeout_ms, const char **data,
                               size_t *len, pb_error_t *err)
{
    *len = 0;
    if (s->buf) {
        PQfreemem(s->buf);
        s->buf = NULL;
    }
    int64_t until = pb_monotonic_ms() + timeout_ms;
    bool polled = false; /* read the socket at least once, even with timeout 0 */
    for (;;) {
        if (pb_monotonic_ms() - s->last_report_ms >= s->cfg->cdc_status_interval) {
            pb_status_t st = send_status(s, false, err);
            if (st != PB_OK)
                return st;
        }
        char *buf = NULL;
        int n = PQgetCopyData(s->conn, &buf, 1);
        if (n > 0) {
            pb_status_t st = on_copy_data(s, buf, n, data, len, err);
            if (*len) {
                s->buf = buf; /* the payload points into it */
                return st;
            }
            PQfreemem(buf);
            if (st != PB_OK)
                return st;
            continue;
        }
        if (n == -1) {
            s->copying = false;
            PGresult *res = PQgetResult(s->conn);
            pb_status_t st = pb_pg_check(s->conn, res, PGRES_COMMAND_OK, "replication stream ended", err);
            if (st == PB_OK) {
                PQclear(res);
                st = pb_fail(err, PB_TRANSIENT, "the server ended the replication stream");
            }
            return st == PB_FATAL ? PB_TRANSIENT : st;
        }
        if (n == -2)
            return pb_fail(err, PB_TRANSIENT, "replication stream: %s", PQerrorMessage(s->conn));
        int64_t left = until - pb_monotonic_ms();
        if (left <= 0) {
            if (polled)
                return PB_OK;
            /* what the kernel has already received is ours without waiting */
            polled = true;
            if (!PQconsumeInput(s->conn))
                return pb_fail(err, PB_TRANSIENT, "replication stream: %s", PQerrorMessage(s->conn));
            continue;
        }
        int rc = wait_readable(s->conn, left);
        if (rc < 0 && errno == EINTR)
            return PB_OK; /* a signal: let the caller look at its stop flag */
        if (rc < 0)
            return pb_fail(err, PB_TRANSIENT, "select: %s", strerror(errno));
        if (rc > 0 && !PQconsumeInput(s->conn))
            return pb_fail(err, PB_TRANSIENT, "replication stream: %s", PQerrorMessage(s->conn));
    }
}

/* Ends the copy after the last status update, then reads (and drops) what the server still sends
 * until it ends its side: closing at once, with data unread, resets the connection, and the
 * server may drop the status update with it. Bounded by CLOSE_WAIT_MS. */
static void end_copy(pb_cdc_stream_t *s)
{
    pb_error_t ignored;
    if (send_status(s, false, &ignored) != PB_OK || PQputCopyEnd(s->conn, NULL) != 1)
        return;
    int64_t until = pb_monotonic_ms() + CLOSE_WAIT_MS;
    for (;;) {
        if (PQflush(s->conn) < 0)
            return;
        char *buf = NULL;
        int n = PQgetCopyData(s->conn, &buf, 1);
        if (n > 0) {
            PQfreemem(buf);
            continue;
        }
        if (n < 0) /* -1: the server ended the copy (after the status update); -2: broken */
            break;
        int64_t left = until - pb_monotonic_ms();
        if (left <= 0)
            return;
        int rc = wait_readable(s->conn, left);
        if ((rc < 0 && errno != EINTR) || (rc > 0 && !PQconsumeInput(s->conn)))
            return;
    }
    for (PGresult *res; (res = PQgetResult(s->conn)) != NULL;)
        PQclear(res);
}

void pb_cdc_stream_close(pb_cdc_stream_t *s)
{
    if (s->buf) {
        PQfreemem(s->buf);
        s->buf = NULL;
    }
    if (!s->conn)
        return;
    if (s->copying && PQstatus(s->conn) == CONNECTION_OK)
        end_copy(s);
    s->copying = false;
    PQfinish(s->conn);
    s->conn = NULL;
}
